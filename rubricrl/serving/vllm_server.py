"""`python -m rubricrl.serving.vllm_server ARGS`: vLLM's OpenAI server (`vllm.entrypoints.openai.api_server ARGS`),
taken down with its whole process group when the process that started it dies, at any moment.

die_with_parent (processes.py) has Linux send the server SIGTERM when its parent dies. A ready server shuts down on
it, engine included; but while the engine starts, vLLM's main thread waits in a blocking call and its SIGTERM
handler (on the event loop) never runs: a `serve` SIGKILLed then left the API server and its engine process waiting
on each other for good. So a thread here watches the parent too, and past a grace for the SIGTERM shutdown kills
the group (LocalServer starts the server as the leader of its own group: the API server and the engine process).
"""

import os
import runpy
import signal
import sys
import threading
import time

GRACE_S = 10.0  # a ready server's SIGTERM shutdown takes ~1 s
POLL_S = 0.5


def take_down(sig: int) -> None:
    """`sig` to our process group when we lead it (as LocalServer starts us: the API server and its engine), else
    to this process alone (started by hand, the group may be a shell script's)."""
    if os.getpgrp() == os.getpid():
        os.killpg(0, sig)
    else:
        os.kill(os.getpid(), sig)


def watch_parent(parent: int) -> None:
    """Once `parent` is gone (we are re-parented), SIGTERM the group, then after GRACE_S SIGKILL what is left."""
    while os.getppid() == parent:
        time.sleep(POLL_S)
    take_down(signal.SIGTERM)
    time.sleep(GRACE_S)
    take_down(signal.SIGKILL)


def main() -> None:
    threading.Thread(target=watch_parent, args=(os.getppid(),), name="rubricrl-parent-watch", daemon=True).start()
    sys.argv[0] = "vllm.entrypoints.openai.api_server"
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
