"""`Replicas`: several local vLLM servers (serve.py's `LocalServer`) for one model on consecutive ports, advertised as
one endpoint (URLs joined by commas) the client spreads calls over (llm/endpoints.py); on GPUs each gets its share.
On one machine vLLM's `--data-parallel-size N` (one server, one URL) is the better tool; replicas are for a model per
GPU on a vLLM build without it, or the CPU build, where each replica is one more process.
"""

import os
import subprocess
import time
from dataclasses import replace

from rubricrl.errors import UserError
from rubricrl.serving.discovery import Endpoint
from rubricrl.serving.server import LocalServer, vllm_on_cpu


class Replicas:
    """`count` LocalServers for one model on ports port .. port+count-1, started together and advertised as one
    endpoint: its base_url is their URLs joined by commas, its pid the first one's. Same interface as LocalServer
    (start, stop, alive, log_path, log_tail)."""

    def __init__(self, count: int, model: str | None = None, *, port: int, **options):
        if count < 1:
            raise UserError(f"--replicas must be at least 1, got {count}")
        self.servers = [
            LocalServer(model, port=port + i, devices=share, **options) for i, share in enumerate(gpu_shares(count))
        ]

    @property
    def ports(self) -> list[int]:
        return [server.port for server in self.servers]

    @property
    def log_path(self) -> str:
        return ", ".join(str(server.log_path) for server in self.servers)

    @property
    def endpoint(self) -> Endpoint:
        first = self.servers[0].endpoint
        return replace(first, base_url=",".join(server.endpoint.base_url for server in self.servers))

    def start(self, timeout: float = 600.0) -> Endpoint:
        """Launch them all, then wait for each (they load at once); any failure stops them all."""
        try:
            for server in self.servers:
                server.launch()
            deadline = time.monotonic() + timeout
            for server in self.servers:
                server.wait_ready(deadline, timeout)
            return self.endpoint
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def alive(self) -> bool:
        """All of them are running (`rubricrl serve` stops when one exits: its log says why)."""
        return all(server.alive() for server in self.servers)

    def log_tail(self, chars: int = 4000) -> str:
        dead = [server for server in self.servers if not server.alive()] or self.servers[:1]
        return "\n".join(f"{server.log_path}:\n{server.log_tail(chars)}" for server in dead)

    def __enter__(self) -> Endpoint:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def gpu_shares(count: int) -> list[str | None]:
    """CUDA_VISIBLE_DEVICES for each of `count` replicas: the visible GPUs cut into equal contiguous shares (two
    GPUs each for 2 replicas of 4 GPUs, for --tensor-parallel-size=2). None each on the CPU build or without
    nvidia-smi (the environment decides)."""
    if count == 1 or vllm_on_cpu():
        return [None] * count
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        devices = [d.strip() for d in visible.split(",") if d.strip()]
    else:
        try:
            listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            return [None] * count
        devices = [str(i) for i, line in enumerate(listed.splitlines()) if line.startswith("GPU ")]
    if len(devices) < count:
        raise UserError(
            f"--replicas {count} needs a GPU per replica at least, and {len(devices)} are visible "
            "(CUDA_VISIBLE_DEVICES or nvidia-smi)"
        )
    share = len(devices) // count
    return [",".join(devices[i * share : (i + 1) * share]) for i in range(count)]
