"""The rubric reward as an HTTP service, for RL engines that cannot share our environment (verl, OpenRLHF), in
OpenRLHF's remote reward protocol (openrlhf/utils/agent.py posts it, openrlhf/cli/serve_rm.py answers it):

    POST /get_reward  {"query": [prompt + response, ...], "prompts": [prompt, ...], "labels": [row id, ...]}
                   -> {"rewards": [...], "scores": [...], "extra_logs": {name: [one per completion]}, "scored": [...]}

`query` holds prompt and response decoded together (special tokens kept), `prompts` the templated prompts: the
response is what follows, less trailing end-of-sequence tokens (else the integrity check vetoes `<|im_end|>`).
`labels` are rubric row ids (OpenRLHF v0.10.2+: `--data.label_key id`; up to v0.10.1: `--label_key id`); clients
with the response alone (our verl function) send `"responses"` instead. The row gives rubric, judge conversation
and reference answer, as `rubricrl grade` reads them; the grading is grading/batch.py's `grade_batch`
(`grading:` settings, dedup, deadline).

An unscorable completion (judge failed on too many criteria, deadline missed, prompt not in its query) gets
`unscored_reward` (0.0, as verl-rubric and RuscaRL score a judge failure), as the engines' reward tensors have no
"missing"; `scored` says which were scored, and the unscored count, in `extra_logs` and GET /stats, shows a quietly
failing judge on the training dashboard. A request the judge answered none of gets 503: a batch of zeros trains on
nothing, and the engine's retry (OpenRLHF) or error (our verl function) is the right response to a judge that is down.

Judge calls cost money: it listens on 127.0.0.1 unless told otherwise, elsewhere only with a bearer token (env
TOKEN_ENV, refused at start-up without one; compared in constant time). Bodies and batches are bounded; errors are
4xx JSON `{"error": message}`; no token or API key is logged or answered.
"""

import asyncio
import hmac
import json
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from engines.openrlhf_query import DEFAULT_EOS, split_response
from engines.service_access import TOKEN_ENV, ServiceError
from grading.batch import as_conversation, grade_batch
from grading.dataset import RubricRow
from grading.grader import Grader
from grading.rubric import rubric_from_items
from rubricrl.errors import UserError


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Totals:
    """What the service has done since it started (GET /stats)."""

    requests: int = 0
    completions: int = 0
    unscored: int = 0
    prompt_not_in_query: int = 0
    judge_down: int = 0
    """Requests answered 503 because the judge did not answer at all."""
    verdicts: int = 0
    failed_verdicts: int = 0
    seconds: float = 0.0
    rejected: Counter = field(default_factory=Counter)
    """4xx/5xx answers by status."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "completions": self.completions,
            "unscored": self.unscored,
            "unscored_rate": self.unscored / self.completions if self.completions else 0.0,
            "prompt_not_in_query": self.prompt_not_in_query,
            "judge_down": self.judge_down,
            "judge_failure_rate": self.failed_verdicts / self.verdicts if self.verdicts else 0.0,
            "grading_seconds": round(self.seconds, 3),
            "rejected": {str(k): v for k, v in sorted(self.rejected.items())},
        }


class RewardService:
    """The rubric reward over HTTP for the rows of one rubric dataset, graded by `grader` (its client must be open
    for as long as the service runs)."""

    def __init__(
        self,
        rows: dict[str, RubricRow],
        grader: Grader,
        *,
        token: str | None = None,
        unscored_reward: float = 0.0,
        max_batch: int = 8192,
        max_body: int = 256 << 20,
        deadline: float | None = None,
        eos: list[str] | None = None,
        source: str = "the rubric dataset",
        log: Callable[[str], None] | None = None,
    ):
        self.rows = rows
        self.grader = grader
        self.token = token
        self.unscored_reward = unscored_reward
        self.max_batch = max_batch
        self.max_body = max_body
        self.deadline = deadline
        self.eos = DEFAULT_EOS if eos is None else eos
        self.source = source
        self.log = log or (lambda line: print(f"[reward serve] {line}", file=sys.stderr, flush=True))
        self.totals = Totals()
        # Each row's criteria as the training reward reads them from a `rubrics` column (the row's example tags left
        # out), made once.
        self.rubrics = {
            row_id: rubric_from_items(
                [
                    {"criterion": c.text, "points": c.points, "tags": list(c.tags), "category": c.category}
                    | {"rule": c.rule}
                    for c in row.rubric.criteria
                ],
                f"row {row_id}",
            )
            for row_id, row in rows.items()
        }
        self.has_references = any(row.reference for row in rows.values())

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body, middlewares=[self._errors])
        app.router.add_post("/get_reward", self._get_reward)
        app.router.add_get("/health", self._health)
        app.router.add_get("/stats", self._stats)
        return app

    # --- handlers -------------------------------------------------------------------------------------------------

    @web.middleware
    async def _errors(self, request: web.Request, handler) -> web.StreamResponse:
        """Every refusal as JSON with a message; nothing escapes as a crash. Messages never quote headers."""
        try:
            if request.path != "/health":
                self._authorize(request)
            return await handler(request)
        except BadRequest as bad:
            return self._refuse(request, bad.status, str(bad))
        except web.HTTPRequestEntityTooLarge:
            return self._refuse(
                request,
                413,
                f"request body over {self.max_body} bytes (the service's --max-body-mb "
                f"{self.max_body / 2**20:g}): send fewer completions per request",
            )
        except web.HTTPException as http:  # aiohttp's own: 404, 405, ...
            if http.status < 400:
                raise
            return self._refuse(
                request,
                http.status,
                f"{http.reason}: {request.method} {request.path} (this service "
                "answers POST /get_reward, GET /health, GET /stats)",
            )
        except asyncio.CancelledError:
            raise
        except UserError as error:  # curated one-line messages (a judge setting, an API key's env var by name)
            return self._refuse(request, 500, f"grading failed: {error}")
        except Exception:
            self.log(f"internal error on {request.method} {request.path}:\n{traceback.format_exc(limit=8)}")
            return self._refuse(request, 500, "internal error while grading (the service's log has the details)")

    def _authorize(self, request: web.Request) -> None:
        if self.token is None:
            return
        given = request.headers.get("Authorization", "")
        scheme, _, credential = given.partition(" ")
        if not given or scheme.lower() != "bearer":
            raise BadRequest(401, f"missing bearer token: send `Authorization: Bearer <the value of {TOKEN_ENV}>`")
        if not hmac.compare_digest(credential.strip().encode(), self.token.encode()):
            raise BadRequest(401, f"wrong bearer token (it must equal the service's {TOKEN_ENV})")

    def _refuse(self, request: web.Request, status: int, message: str) -> web.Response:
        self.totals.rejected[status] += 1
        self.log(f"{status} {request.method} {request.path}: {message}")
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return web.json_response({"error": message}, status=status, headers=headers)

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                **self.totals.as_dict(),
                "judge_calls": self.judge_calls(),
                "rows": len(self.rows),
                "max_batch": self.max_batch,
                "max_body": self.max_body,
                "unscored_reward": self.unscored_reward,
                "judge": self.grader.metadata,
            }
        )

    async def _get_reward(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise BadRequest(400, f"malformed JSON body: {error}") from None
        labels, responses = self._parse(body)
        self.totals.requests += 1
        rewards, scored, logs = await self.grade(labels, responses)
        return web.json_response({"rewards": rewards, "scores": rewards, "scored": scored, "extra_logs": logs})

    def _parse(self, body: Any) -> tuple[list[str], list[str | None]]:
        """(labels, responses) of a request, checked; a response is None where its prompt is not in its query."""
        if not isinstance(body, dict):
            raise BadRequest(
                400,
                f"the body must be a JSON object with 'labels' and 'query' + 'prompts' (or "
                f"'responses'), got {type(body).__name__}",
            )
        labels = self._strings(body, "labels", ints=True)
        n = len(labels)
        if n > self.max_batch:
            raise BadRequest(
                400,
                f"{n} completions in one request, above the service's --max-batch {self.max_batch}: split the batch",
            )
        if "responses" in body:
            if "query" in body:
                raise BadRequest(400, "give 'responses' or 'query' + 'prompts', not both")
            responses: list[str | None] = self._strings(body, "responses")
        else:
            if "query" not in body:
                raise BadRequest(400, "the body needs 'query' (prompt + response) and 'prompts', or 'responses'")
            queries, prompts = self._strings(body, "query"), self._strings(body, "prompts")
            if len(prompts) != len(queries):
                raise BadRequest(400, f"{len(queries)} queries but {len(prompts)} prompts")
            responses = [self._as_written(split_response(q, p, self.eos), p) for q, p in zip(queries, prompts)]
        if len(responses) != n:
            raise BadRequest(400, f"{len(responses)} completions but {n} labels: one label (row id) per completion")
        unknown = list(dict.fromkeys(label for label in labels if label not in self.rows))
        if unknown:
            listed = ", ".join(repr(label[:80]) for label in unknown[:3]) + (", ..." if len(unknown) > 3 else "")
            like = ", ".join(repr(i) for i in list(self.rows)[:2])
            raise BadRequest(
                400,
                f"unknown label(s) {listed} ({len(unknown)} distinct): a label is the id of a row of "
                f"{self.source} (its ids are like {like})",
            )
        return labels, responses

    def _as_written(self, response: str | None, prompt: str) -> str | None:
        """A templated prompt that opens the reasoning (DeepSeek-R1 distills, Qwen3 thinking-2507 end it with
        `<think>`) leaves the opening delimiter out of the response: it is put back, so that a response cut off
        before closing its reasoning has no answer instead of having its reasoning judged. (A client that sends
        `responses` alone cannot say: set grading.reasoning_starts_open for such a policy.)"""
        delimiters = self.grader.config.reasoning_delimiters
        if response is None or not delimiters or not prompt.rstrip().endswith(delimiters[0]):
            return response
        return delimiters[0] + response

    def _strings(self, body: dict, key: str, ints: bool = False) -> list[str]:
        values = body.get(key)
        if not isinstance(values, list):
            raise BadRequest(400, f"'{key}' must be a list, got {type(values).__name__ if key in body else 'nothing'}")
        if len(values) > self.max_batch:
            raise BadRequest(
                400,
                f"{len(values)} items in '{key}', above the service's --max-batch {self.max_batch}: split the batch",
            )
        out = []
        for i, value in enumerate(values):
            if ints and isinstance(value, int) and not isinstance(value, bool):
                value = str(value)  # an integer id, as the rubric reader reads it
            if not isinstance(value, str):
                raise BadRequest(400, f"'{key}'[{i}] must be a string, got {type(value).__name__}")
            out.append(value)
        return out

    def judge_calls(self) -> int:
        """Requests the judge client has sent (cache hits are not calls); per-request counts overlap under
        concurrency, so the total is read from the client."""
        return sum(usage.requests for usage in self.grader.client.usage.values())

    # --- grading --------------------------------------------------------------------------------------------------

    async def grade(self, labels: list[str], responses: list[str | None]) -> tuple[list[float], list[bool], dict]:
        """(rewards, scored, extra_logs) for completions of known rows; a response None is unscored."""
        todo = [i for i, r in enumerate(responses) if r is not None]
        rows = [self.rows[labels[i]] for i in todo]
        started = time.monotonic()
        batch = (
            await grade_batch(
                self.grader,
                [as_conversation(row.conversation) for row in rows],
                [responses[i] for i in todo],
                [self.rubrics[row.id] for row in rows],
                references=[row.reference for row in rows] if self.has_references else None,
                deadline=self.deadline,
            )
            if todo
            else None
        )
        graded, stats = (batch.scores, batch.stats) if batch is not None else ([], None)
        totals = self.totals
        totals.seconds += time.monotonic() - started
        if stats is not None:
            totals.verdicts += stats.verdicts
            totals.failed_verdicts += stats.failed_verdicts
            if stats.error:  # a setting the judge cannot be asked with (a missing API key): said as it is
                raise BadRequest(500, f"grading failed: {stats.error}")
            # grade_batch's sign of an unreachable judge: nothing asked got a verdict, and no call was answered
            if (
                stats.judge_calls == 0
                and stats.verdicts
                and stats.failed_verdicts == stats.verdicts
                and stats.unscored == stats.completions
            ):
                totals.judge_down += 1
                raise BadRequest(
                    503,
                    f"the judge ({self.grader.metadata['judge_model']}) does not answer: no "
                    "completion could be graded; check its server (the service keeps running)",
                )
        rewards: list[float] = [self.unscored_reward] * len(responses)
        scored = [False] * len(responses)
        for i, reward in zip(todo, graded):
            if reward is not None:
                rewards[i], scored[i] = float(reward), True
        unscored = scored.count(False)
        totals.completions += len(responses)
        totals.unscored += unscored
        totals.prompt_not_in_query += len(responses) - len(todo)
        n = len(responses) or 1
        # Fixed keys, one value per completion: OpenRLHF up to v0.9 concatenates each value over its samples
        # (experience_maker.py; a single number fails there), later releases average them. The mean of each list is
        # the batch's figure: an indicator per completion, or the batch's rate repeated.
        batch = {
            "rubric/unscored_rate": unscored / n,
            "rubric/judge_failure_rate": stats.failed_verdicts / stats.verdicts if stats and stats.verdicts else 0.0,
            "rubric/timed_out_rate": stats.timed_out / n if stats else 0.0,
            "rubric/integrity_flag_rate": stats.flagged / n if stats else 0.0,
            "rubric/judge_latency_s": stats.seconds if stats else 0.0,
        }
        asked = set(todo)
        logs = {
            "rubric/unscored": [0.0 if s else 1.0 for s in scored],
            "rubric/prompt_not_in_query": [0.0 if i in asked else 1.0 for i in range(len(responses))],
            **{name: [value] * len(responses) for name, value in batch.items()},
        }
        return rewards, scored, logs


async def serve(
    service: RewardService,
    host: str,
    port: int,
    *,
    stop: asyncio.Event,
    ready: Callable[[str], None] | None = None,
    shutdown_timeout: float = 60.0,
) -> None:
    """Run `service` on host:port until `stop` is set; `ready(url)` once it listens (port 0: a free port). Requests
    in flight get `shutdown_timeout` seconds to finish."""
    runner = web.AppRunner(service.app(), access_log=None, handle_signals=False, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, reuse_address=True)
        try:
            await site.start()
        except OSError as error:
            raise ServiceError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
        bound = runner.addresses[0][1]  # with port 0, the one the system chose
        url = f"http://{host if ':' not in host else f'[{host}]'}:{bound}"
        if ready is not None:
            ready(url)
        await stop.wait()
    finally:
        await runner.cleanup()
