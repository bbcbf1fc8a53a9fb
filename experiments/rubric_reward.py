"""The rubric reward for verl (and OpenRLHF) from a running `rubricrl reward serve`, standard library only: it runs in
the engine's environment, which cannot hold rubricrl's (verl 0.9 pins transformers < 5.11).

verl (custom_reward_function.path=experiments/rubric_reward.py): `compute_score(data_source, solution_str, ground_truth,
extra_info=None)`, verl's documented signature, one completion a call (reward managers `naive`, `dapo`, `prime`);
`compute_score_batch`, one request a batch (reward_model.reward_manager=batch,
custom_reward_function.name=compute_score_batch); `compute_score_async` for the reward loop
(reward_model.use_reward_loop). `ground_truth` is the rubric row id (`rubricrl export verl`). Each returns {"score":
reward, "rubric_scored": 1.0 or 0.0} (verl logs keys beyond "score"); one the service could not score gets its
--unscored-reward (0.0 by default) and rubric_scored 0.0. OpenRLHF (v0.10.2 and later: `--reward.remote_url
experiments/rubric_reward.py --data.label_key id`; up to v0.10.1: `--remote_rm_url ... --label_key id`):
`reward_func(queries, prompts, labels)` forwards the request with the token, which OpenRLHF's client cannot send
(without it the service must be on 127.0.0.1).

Environment: RUBRICRL_REWARD_URL (default http://127.0.0.1:8760); RUBRICRL_REWARD_TOKEN (bearer token, if any);
RUBRICRL_REWARD_TIMEOUT (seconds a request, default 900: a batch waits for its judge); RUBRICRL_REWARD_RETRIES
(default 3, with backoff, on a refused connection or a 503 such as a restarting judge); RUBRICRL_REWARD_CHUNK
(completions a request, default 1024; chunks go concurrently). A service that does not answer, or refuses, raises
RewardServiceError naming the URL and reason: training stops rather than learn from missing rewards.
"""

import asyncio
import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

DEFAULT_URL = "http://127.0.0.1:8760"


class RewardServiceError(RuntimeError):
    """The reward service did not answer, or refused the request; the message says which and why."""


def _settings() -> dict:
    return {
        "url": os.environ.get("RUBRICRL_REWARD_URL", DEFAULT_URL).rstrip("/"),
        "token": os.environ.get("RUBRICRL_REWARD_TOKEN") or None,
        "timeout": float(os.environ.get("RUBRICRL_REWARD_TIMEOUT", "900")),
        "retries": int(os.environ.get("RUBRICRL_REWARD_RETRIES", "3")),
        "chunk": max(1, int(os.environ.get("RUBRICRL_REWARD_CHUNK", "1024"))),
    }


def post(payload: dict) -> dict:
    """POST `payload` to the service's /get_reward; its JSON answer. Retries what may pass (no connection, 502-504)
    with backoff; a 4xx is raised at once with the service's message."""
    settings = _settings()
    url = settings["url"] + "/get_reward"
    headers = {"Content-Type": "application/json"}
    if settings["token"]:
        headers["Authorization"] = "Bearer " + settings["token"]
    data = json.dumps(payload).encode()
    for attempt in range(settings["retries"] + 1):
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=settings["timeout"]) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as error:
            try:
                message = json.loads(error.read()).get("error") or error.reason
            except ValueError:
                message = error.reason
            reason = f"HTTP {error.code}: {message}"
            if error.code not in (502, 503, 504):
                raise RewardServiceError(f"rubric reward service {url} refused the request: {reason}") from None
        except (urllib.error.URLError, OSError) as error:  # refused, reset, timed out
            if isinstance(error, TimeoutError) or isinstance(getattr(error, "reason", None), TimeoutError):
                # the service may still be grading it: sending it again would pay the judge twice
                raise RewardServiceError(
                    f"rubric reward service {url} did not answer within "
                    f"{settings['timeout']:g} s (RUBRICRL_REWARD_TIMEOUT)"
                ) from None
            reason = str(getattr(error, "reason", error))
        if attempt < settings["retries"]:
            time.sleep(min(30.0, 2.0**attempt))
    raise RewardServiceError(
        f"rubric reward service {url} did not answer after {settings['retries'] + 1} tries "
        f"({reason}); is `rubricrl reward serve` running there (RUBRICRL_REWARD_URL)?"
    )


def rewards_for(responses: list, labels: list) -> list[dict]:
    """{"score", "rubric_scored"} for each response against the rubric row its label names, in order; a batch
    larger than RUBRICRL_REWARD_CHUNK goes as concurrent requests."""
    size = _settings()["chunk"]
    chunks = [
        (responses[k : k + size], [str(label) for label in labels[k : k + size]])
        for k in range(0, len(responses), size)
    ]
    with ThreadPoolExecutor(max_workers=min(8, len(chunks) or 1)) as pool:
        answers = list(pool.map(lambda chunk: post({"responses": chunk[0], "labels": chunk[1]}), chunks))
    out = []
    for (sent, _), answer in zip(chunks, answers):
        rewards, scored = answer.get("rewards"), answer.get("scored") or [True] * len(sent)
        if not isinstance(rewards, list) or len(rewards) != len(sent):
            raise RewardServiceError(
                f"the reward service answered {len(rewards) if isinstance(rewards, list) else 0} "
                f"rewards for {len(sent)} completions"
            )
        out += [{"score": float(r), "rubric_scored": 1.0 if s else 0.0} for r, s in zip(rewards, scored)]
    return out


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    """verl's custom reward function: one completion, its rubric row id in `ground_truth`."""
    return rewards_for([solution_str], [ground_truth])[0]


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos=None, **kwargs) -> list[dict]:
    """verl's `batch` reward manager: the whole batch in one request (or RUBRICRL_REWARD_CHUNK-sized ones)."""
    return rewards_for(list(solution_strs), list(ground_truths))


async def compute_score_async(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    """compute_score for verl's reward loop, without holding its event loop while the judge works."""
    return await asyncio.to_thread(compute_score, data_source, solution_str, ground_truth, extra_info)


def reward_func(queries, prompts, labels, **kwargs) -> dict:
    """OpenRLHF's reward function file (`--reward.remote_url this file`; up to v0.10.1 `--remote_rm_url`): its request
    forwarded with the token."""
    answer = post({"query": list(queries), "prompts": list(prompts), "labels": [str(label) for label in labels]})
    result = {"rewards": answer["rewards"], "scores": answer["scores"], "extra_logs": answer.get("extra_logs", {})}
    try:  # OpenRLHF's reward function template returns tensors (its experience maker concatenates them); torch is
        import torch  # there in OpenRLHF's environment, and only there: this file stays standard-library otherwise
    except ImportError:
        return result
    return {
        "rewards": torch.tensor(result["rewards"], dtype=torch.float32),
        "scores": torch.tensor(result["scores"], dtype=torch.float32),
        "extra_logs": {k: torch.tensor(v, dtype=torch.float32) for k, v in result["extra_logs"].items()},
    }
