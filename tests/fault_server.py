"""A scriptable OpenAI-compatible server for what a real server cannot do on demand: 429s with Retry-After,
5xx, answers slower than the client's timeout, garbage or truncated bodies, canned replies, and exact request
counts. Never a stand-in for the model in the main paths (those run against the real vLLM server).

Each request takes the next scripted `Fault` (or answers normally once the script is empty). A normal answer is
a valid chat completion whose content is `reply` (a string, or a function of the request body). A reply may also
be a dict shaped as a vLLM reasoning parser's message: its keys become the message's fields (`content`, possibly
None, `reasoning`, `reasoning_content`), except `finish_reason` (default "stop") and `logprobs`, which go to the
choice, and `reasoning_tokens`, which goes, summed over the choices as vLLM does, to `usage.completion_tokens_details`.
"""

import json
import select
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Fault:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds to wait before answering."""
    body: bytes | None = None
    """Raw body to send instead of a valid completion."""
    cut_connection: bool = False
    """Announce the full length, send half of it, close the connection."""


Reply = str | dict[str, Any]
SHUTDOWN_POLL = 0.01  # seconds


class _CountingServer(ThreadingHTTPServer):
    """Counts its open connections, accepting and counting under one lock: a connection is always either waiting
    to be accepted or counted, so `FaultServer.wait_idle` can tell when none is left."""

    def __init__(self, address, handler):
        super().__init__(address, handler)
        self.idle = threading.Condition()
        self.open_connections = 0
        self.socket.settimeout(1.0)  # accept, under the lock, never blocks for long (accepted sockets stay blocking)

    def get_request(self):
        with self.idle:
            request = super().get_request()
            self.open_connections += 1
        return request

    def handle_error(self, request, client_address):
        """A client that hangs up mid-request (a command that stops cancels its calls in flight) is no fault to
        print: socketserver writes a traceback to stderr, which the tests read as the command's own (CI at
        c6000de: a ConnectionResetError there failed a test that asserts no traceback)."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    def shutdown_request(self, request):  # once a connection is done, in its own thread
        try:
            super().shutdown_request(request)
        finally:
            with self.idle:
                self.open_connections -= 1
                self.idle.notify_all()


class FaultServer:
    def __init__(self, reply: Reply | Callable[[dict], Reply] = "ok", latency: float = 0.0):
        self.reply = reply
        self.latency = latency
        self.script: list[Fault] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self.down = False
        self._httpd = _CountingServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        # shutdown() waits for serve_forever's next poll: at the default 0.5 s that was half a second at the end of
        # every test using this server (150 s over the suite)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(SHUTDOWN_POLL,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def count(self) -> int:
        return len(self.requests)

    def __enter__(self) -> "FaultServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if not self.down:
            self._httpd.shutdown()
            self._httpd.server_close()

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Wait until no connection is open or waiting to be accepted: every request its clients sent (a client since
        killed included) has been read and answered. A client keeping a connection alive keeps it from being idle.
        Raises TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._httpd.idle:
            while self._httpd.open_connections or select.select([self._httpd.socket], [], [], 0)[0]:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self._httpd.open_connections} connections still open after {timeout} s")
                self._httpd.idle.wait(min(left, 0.05))  # a connection waiting to be accepted notifies nothing

    def go_down(self) -> None:
        """As a crashed server: new connections are refused, and a request on a kept-alive one is dropped unanswered.
        Safe to call from a reply function (the listener is closed from another thread)."""
        self.down = True

        def stop():
            self._httpd.shutdown()
            self._httpd.server_close()

        threading.Thread(target=stop, daemon=True).start()

    def _next(self, body: dict, headers: dict) -> Fault | None:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            return self.script.pop(0) if self.script else None

    def completion(self, body: dict) -> bytes:
        n = body.get("n") or 1
        replies = [self.reply(body) if callable(self.reply) else self.reply for _ in range(n)]  # one per choice
        fields = [dict(r) if isinstance(r, dict) else {"content": r} for r in replies]
        finish = [f.pop("finish_reason", "stop") for f in fields]
        logprobs = [f.pop("logprobs", None) for f in fields]
        reasoning_tokens = [f.pop("reasoning_tokens", None) for f in fields]
        usage = {"prompt_tokens": 10, "completion_tokens": 5 * n, "total_tokens": 10 + 5 * n}
        if any(t is not None for t in reasoning_tokens):
            usage["completion_tokens_details"] = {"reasoning_tokens": sum(t or 0 for t in reasoning_tokens)}
        return json.dumps(
            {
                "id": f"cmpl-{self.count}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "fake"),
                "choices": [
                    {
                        "index": i,
                        "message": {"role": "assistant", **f},
                        "finish_reason": finish[i],
                        **({"logprobs": logprobs[i]} if logprobs[i] is not None else {}),
                    }
                    for i, f in enumerate(fields)
                ],
                "usage": usage,
            }
        ).encode()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                self._send(200, json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}).encode())

            def do_POST(self):
                if server.down:  # gone: the connection closes without an answer
                    self.close_connection = True
                    return
                try:
                    self._answer()
                except (BrokenPipeError, ConnectionResetError):  # the client went away (timeout, kill): expected
                    pass

            def _answer(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                fault = server._next(body, {k.lower(): v for k, v in self.headers.items()}) or Fault()
                time.sleep(fault.delay or server.latency)
                payload = fault.body if fault.body is not None else server.completion(body)
                if fault.status != 200 and fault.body is None:
                    # Like some gateways, quote the credentials back: the client must keep them out of its errors.
                    message = f"injected {fault.status}; you sent {self.headers.get('Authorization', 'no key')}"
                    payload = json.dumps({"error": {"message": message, "type": "fault"}}).encode()
                if fault.cut_connection:
                    self.send_response(fault.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload[: len(payload) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self._send(fault.status, payload, fault.headers)

            def _send(self, status: int, payload: bytes, headers: dict | None = None):
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout): expected
                    pass

        return Handler


def example_instance(schema: dict[str, Any], index: int = 0) -> Any:
    """A small valid instance of a bounded schema: what a model under structured outputs could answer. The i-th item
    of an array takes the i-th value of an enum (a batched verdict per criterion id, each id once)."""
    if "enum" in schema:
        return schema["enum"][index % len(schema["enum"])]
    kind = schema.get("type")
    if kind == "object":
        return {name: example_instance(sub, index) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        count = min(max(1, schema.get("minItems", 1)), schema["maxItems"])
        return [example_instance(schema["items"], i) for i in range(count)]
    if kind in ("integer", "number"):
        return schema["maximum"] if schema["maximum"] != 0 else schema["minimum"]
    if kind == "boolean":
        return True
    return "canned text"[: schema.get("maxLength", 100)]


def schema_reply(body: dict) -> str:
    """Reply with a valid instance of the request's JSON schema, or plain text when there is none; the text
    depends on the request, so distinct requests get distinct answers."""
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        return json.dumps(example_instance(response_format["json_schema"]["schema"]))
    return f"answer to: {body['messages'][-1]['content'][-60:]}"
