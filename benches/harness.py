"""What the scale benchmarks share: the canned endpoint in a child process, one `rubricrl` command in a child
process with the bytes it wrote and its peak RSS, and a process tree's CPU-seconds."""

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from rubricrl.serving.discovery import free_port

ROOT = Path(__file__).resolve().parents[1]
RUN = """
import os, resource, sys
if os.path.exists("commands/main.py"):  # the tree run from (cwd) holds the entry point
    from commands.main import main
else:  # a baseline from before the entry point moved to commands/
    from rubricrl.cli import main
code = main(sys.argv[1:])
io = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
print("WCHAR", io["write_bytes"], "RSS_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""


class Canned:
    """benches/canned_server.py on a free port: valid answers after a latency L +- 20%."""

    def __init__(self, port: int, process: subprocess.Popen):
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.process = process

    def kill(self) -> None:
        """SIGKILL: the endpoint dies mid-answer, as a crashed server does."""
        self.process.kill()
        self.process.wait()

    def stats(self) -> dict:
        return json.load(urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats"))

    def reset(self) -> None:
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{self.port}/stats/reset", method="POST"))


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` and all its descendants now (vLLM's API server and its engine core)."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents, cpu = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # a process that ended while we read
            continue
        child = int(stat.parent.name)
        parents[child] = int(fields[1])
        cpu[child] = (int(fields[11]) + int(fields[12])) / ticks
    tree, grew = {pid}, True
    while grew:
        more = {p for p, parent in parents.items() if parent in tree} - tree
        tree, grew = tree | more, bool(more)
    return sum(cpu.get(p, 0.0) for p in tree)


@contextmanager
def canned_endpoint(latency: float, jitter: float = 0.2):
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "benches" / "canned_server.py"),
            "--port",
            str(port),
            "--latency",
            str(latency),
            "--jitter",
            str(jitter),
        ],
        cwd=ROOT,
    )
    endpoint = Canned(port, server)
    try:
        for _ in range(100):
            try:
                endpoint.stats()
                break
            except OSError:
                time.sleep(0.1)
        yield endpoint
    finally:
        server.terminate()
        server.wait()


def run_command(argv: list[str], out: Path, home: Path, root: Path = ROOT) -> dict:
    """One `rubricrl` command in a child process: wall time, bytes it wrote, its output's size, its peak RSS. `root`:
    the tree whose code runs (a baseline's checkout from `baseline_tree`; its folder is first on the path)."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", RUN, *argv],
        env={**os.environ, "RUBRICRL_HOME": str(home)},
        cwd=root,
        capture_output=True,
        text=True,
    )
    ended = time.monotonic()
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    wchar, rss_kb = (int(done.stderr.split(tag)[1].split()[0]) for tag in ("WCHAR ", "RSS_KB "))
    output = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {
        "seconds": ended - started,
        "started": started,
        "ended": ended,
        "written": wchar,
        "output": output,
        "rss_mb": rss_kb / 1024,
    }


@contextmanager
def baseline_tree(rev: str | None):
    """A checkout of commit `rev` of this repository in a temporary folder (git worktree), for running its code beside
    this tree's in one benchmark run, on the same machine at the same moment, in the same venv; None: no baseline."""
    if rev is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="baseline-") as folder:
        tree = Path(folder) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), rev], cwd=ROOT, check=True, capture_output=True
        )
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)


def where_time_went(stats: dict, run: dict, concurrency: int) -> str:
    """Before the first request (start-up, validation), the endpoint's slots in use between its first request and
    its last answer, after the last answer (final files, manifest)."""
    span = stats["last"] - stats["first"]
    busy = stats["busy"] / (concurrency * span)
    return (
        f"first request after {stats['first'] - run['started']:.2f} s; slots busy {busy:.3f} of {span:.1f} s; "
        f"exit {run['ended'] - stats['last']:.2f} s after the last answer"
    )
