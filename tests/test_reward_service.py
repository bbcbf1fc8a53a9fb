"""`rubricrl reward serve`, the verl/OpenRLHF reward function file and `rubricrl export verl`, as an engine meets
them: the service (a real `rubricrl` process) against the scripted judge of tests/fault_server.py agrees with
`rubricrl grade` on the same responses; the stdlib function in verl's call shapes gets the same rewards; bad
requests are 4xx with a message and never stop the service; no token or API key reaches an answer or the log."""

import ast
import asyncio
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from commands.main import main
from engines.openrlhf_query import split_response
from engines.service import RewardService, serve
from grading.dataset import load_rubric_rows
from grading.grader import Grader, GradingConfig
from rubricrl.llm import LLMClient, Role
from rubricrl.serving.discovery import free_port
from tests.fault_server import FaultServer
from tests.helpers import SECRET

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "test-token-0123456789abcdef"
RUBRICS = [
    {
        "id": "a",
        "question": "I have a mild headache. What should I do?",
        "rubrics": [
            {"criterion": "Advises drinking water.", "points": 5},
            {"criterion": "Mentions seeing a doctor if it persists.", "points": 3},
            {"criterion": "Recommends an unsafe dose.", "points": -6},
        ],
    },
    {
        "id": "b",
        "question": "Is a fever of 38 C in an adult dangerous?",
        "rubrics": [
            {"criterion": "Says when to seek care.", "points": 5},
            {"criterion": "Suggests fluids and rest.", "points": 3},
        ],
    },
]
# (row id, response): every combination of criteria met and not, a duplicate, and one the judge fails on.
RESPONSES = [
    ("a", "Drink water and see a doctor if it persists."),
    ("a", "Drink water."),
    ("a", "Take an unsafe dose."),
    ("a", "Drink water."),
    ("b", "Seek care if it rises; take fluids and rest."),
    ("b", "Rest."),
    ("b", "No idea. JUDGE-FAILS"),
]
KEYWORDS = ["water", "doctor", "unsafe", "care", "rest"]


def keyword_judge(body: dict) -> str:
    """A deterministic judge: a criterion is met when it and the response share a keyword; it answers garbage
    on a response containing JUDGE-FAILS."""
    content = body["messages"][-1]["content"]
    response = content.split("]]\n", 1)[1].split("\n[[end of response", 1)[0].lower()
    criterion = content.split("points):", 1)[-1].lower()
    if "judge-fails" in response:
        return "garbage"
    met = any(k in criterion and k in response for k in KEYWORDS)
    return json.dumps({"explanation": "scripted", "criteria_met": met})


def chatml(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def write_lines(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def post(url: str, body, token: str | None = TOKEN, raw: bytes | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    data = raw if raw is not None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def load_client_module():
    spec = importlib.util.spec_from_file_location("rubric_reward", ROOT / "experiments" / "rubric_reward.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def judge():
    with FaultServer(reply=keyword_judge) as server:
        yield server


@pytest.fixture(scope="module")
def rubrics(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "rubrics.jsonl"
    write_lines(path, RUBRICS)
    return path


@pytest.fixture(scope="module")
def service(judge, rubrics, tmp_path_factory):
    """`rubricrl reward serve` in a child process on a free port, with a token and a judge API key in its
    environment; stopped with SIGTERM at the end, which must end it cleanly (exit 0) with nothing secret logged."""
    home = tmp_path_factory.mktemp("home")
    env = {
        **os.environ,
        "RUBRICRL_HOME": str(home),
        "RUBRICRL_REWARD_TOKEN": TOKEN,
        "OPENAI_API_KEY": SECRET,
        "OMP_NUM_THREADS": "1",
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "commands",
            "reward",
            "serve",
            "--rubrics",
            str(rubrics),
            "--port",
            "0",
            "--base-url",
            judge.base_url,
            "--model",
            "fake",
            "--max-batch",
            "50",
            "--max-body-mb",
            "0.01",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    try:
        url = None
        for _ in range(600):  # 60 s to start
            found = [re.search(r"listening on (\S+)", line) for line in lines]
            if any(found) or process.poll() is not None:
                url = next((m.group(1) for m in found if m), None)
                break
            threading.Event().wait(0.1)
        assert url, f"the service did not start: {process.poll()} {process.stderr.read() if process.poll() else ''}"
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        stderr = process.stderr.read()
        assert code == 0, stderr[-2000:]
        assert "SIGTERM: stopping" in stderr and "stopped; served" in stderr
        assert TOKEN not in stderr and SECRET not in stderr and TOKEN not in "".join(lines)


def test_rewards_equal_grade_and_the_openrlhf_query_is_split(service, judge, rubrics, tmp_path, monkeypatch):
    """OpenRLHF's request (prompt + response + end-of-sequence token as one query) gets the rewards `rubricrl grade`
    gives the same responses; the one the judge failed on gets 0.0, is marked unscored and counted."""
    questions = {row["id"]: row["question"] for row in RUBRICS}
    status, answer = post(
        service + "/get_reward",
        {
            "query": [chatml(questions[i]) + r + "<|im_end|>" for i, r in RESPONSES],
            "prompts": [chatml(questions[i]) for i, _ in RESPONSES],
            "labels": [i for i, _ in RESPONSES],
        },
    )
    assert status == 200, answer

    responses = tmp_path / "responses.jsonl"
    write_lines(responses, [{"id": i, "response": r} for i, r in RESPONSES])
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))
    output = tmp_path / "graded.jsonl"
    assert (
        main(
            [
                "grade",
                "--rubrics",
                str(rubrics),
                "--responses",
                str(responses),
                "--output",
                str(output),
                "--base-url",
                judge.base_url,
                "--model",
                "fake",
                "--max-failure-rate",
                "1",
            ]
        )
        == 0
    )
    graded = [json.loads(line)["reward"] for line in output.read_text().splitlines()]

    assert graded[-1] is None and all(g is not None for g in graded[:-1])
    assert answer["rewards"] == [0.0 if g is None else g for g in graded]
    assert answer["scored"] == [g is not None for g in graded]
    assert answer["scores"] == answer["rewards"]
    assert answer["rewards"][:3] == [1.0, 5 / 8, 0.0] and answer["rewards"][4] == 1.0  # the judge's arithmetic
    logs = answer["extra_logs"]  # one value per completion, which OpenRLHF up to v0.9 concatenates over samples
    assert logs["rubric/unscored"] == [0.0] * 6 + [1.0] and logs["rubric/unscored_rate"] == [pytest.approx(1 / 7)] * 7
    assert all(len(v) == 7 and all(isinstance(x, float) for x in v) for v in logs.values())
    # The judge saw the answers without the chat template's tokens, and got the API key.
    judged = [m["messages"][-1]["content"] for m in judge.requests]
    assert not any("<|im_end|>\n[[end of response" in c for c in judged)
    assert any(h.get("authorization") == f"Bearer {SECRET}" for h in judge.headers)

    status, stats = _get(service + "/stats")
    assert status == 200 and stats["unscored"] >= 1 and stats["rows"] == 2 and stats["judge"]["judge_model"] == "fake"
    assert SECRET not in json.dumps(stats) and TOKEN not in json.dumps(stats)


def test_the_verl_function_in_verls_call_shapes(service, monkeypatch):
    """experiments/rubric_reward.py (stdlib only) as verl calls it: one completion (naive/dapo managers), a batch
    (batch manager, split into chunks), as a coroutine (reward loop), and as OpenRLHF's reward_func file."""
    monkeypatch.setenv("RUBRICRL_REWARD_URL", service)
    monkeypatch.setenv("RUBRICRL_REWARD_TOKEN", TOKEN)
    monkeypatch.setenv("RUBRICRL_REWARD_CHUNK", "3")  # 7 completions: 3 concurrent requests
    reward = load_client_module()
    tree = ast.parse((ROOT / "experiments" / "rubric_reward.py").read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    # it runs in verl's environment: the standard library, and torch only where OpenRLHF's environment has it
    assert imported - {"torch"} <= sys.stdlib_module_names, imported - sys.stdlib_module_names

    one = reward.compute_score(
        data_source="rubricrl",
        solution_str="Drink water.",
        ground_truth="a",
        extra_info={"index": 0, "rollout_reward_scores": {}},
    )
    assert one == {"score": 5 / 8, "rubric_scored": 1.0}
    batch = reward.compute_score_batch(
        data_sources=["rubricrl"] * len(RESPONSES),
        solution_strs=[r for _, r in RESPONSES],
        ground_truths=[i for i, _ in RESPONSES],
        extra_infos=[{} for _ in RESPONSES],
    )
    assert [b["score"] for b in batch] == [1.0, 5 / 8, 0.0, 5 / 8, 1.0, 3 / 8, 0.0]
    assert [b["rubric_scored"] for b in batch] == [1.0] * 6 + [0.0]
    assert asyncio.run(reward.compute_score_async("rubricrl", "Rest.", "b", None)) == {
        "score": 3 / 8,
        "rubric_scored": 1.0,
    }
    openrlhf = reward.reward_func([chatml("q") + "Drink water."], [chatml("q")], ["a"])
    assert openrlhf["rewards"].tolist() == [5 / 8] and "rubric/unscored" in openrlhf["extra_logs"]  # tensors, as
    # OpenRLHF v0.9.0 (experience_maker.py) concatenates each extra_logs tensor over its samples
    import torch  # here, not at collection

    assert all(torch.cat([t, t]).shape == (2,) for t in openrlhf["extra_logs"].values())
    assert openrlhf["rewards"].dtype.is_floating_point  # OpenRLHF's reward-function template returns

    monkeypatch.setenv("RUBRICRL_REWARD_TOKEN", "wrong-token-0123456789")
    with pytest.raises(reward.RewardServiceError, match="refused the request: HTTP 401: wrong bearer token") as error:
        reward.compute_score("rubricrl", "Rest.", "b")
    assert TOKEN not in str(error.value)
    monkeypatch.setenv("RUBRICRL_REWARD_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("RUBRICRL_REWARD_RETRIES", "1")
    with pytest.raises(reward.RewardServiceError, match=r"did not answer after 2 tries .*reward serve"):
        reward.compute_score("rubricrl", "Rest.", "b")


def test_bad_requests_are_4xx_with_a_message(service):
    url = service + "/get_reward"
    ok = {"responses": ["Rest."], "labels": ["b"]}
    cases = [
        (post(url, ok, token=None), 401, "missing bearer token"),
        (post(url, ok, token="x" * 26), 401, "wrong bearer token"),
        (post(url, {"responses": ["Rest.", "Rest."], "labels": ["b", "nope"]}), 400, "unknown label(s) 'nope'"),
        (post(url, None, raw=b'{"labels": ["b"], "responses": [tru'), 400, "malformed JSON body"),
        (post(url, [1, 2]), 400, "must be a JSON object"),
        (post(url, {"labels": ["b"]}), 400, "needs 'query'"),
        (post(url, {"responses": ["Rest.", "Rest."], "labels": ["b"]}), 400, "2 completions but 1 labels"),
        (post(url, {"responses": [3], "labels": ["b"]}), 400, "'responses'[0] must be a string"),
        (post(url, {"query": ["x"], "prompts": [], "labels": ["b"]}), 400, "1 queries but 0 prompts"),
        (post(url, {"responses": ["r"] * 51, "labels": ["b"] * 51}), 400, "above the service's --max-batch 50"),
        (post(url, {"responses": ["r" * 20000], "labels": ["b"]}), 413, "request body over 10485 bytes"),
        (post(service + "/nowhere", ok), 404, "this service answers POST /get_reward"),
    ]
    for (status, answer), expected_status, expected in cases:
        assert status == expected_status and expected in answer["error"], (expected, status, answer)
        assert TOKEN not in answer["error"]
    status, answer = post(url, ok)  # still serving
    assert status == 200 and answer["rewards"] == [3 / 8] and answer["scored"] == [True]
    assert _get(service + "/health", token=None) == (200, {"status": "ok"})
    status, stats = _get(service + "/stats")
    assert stats["rejected"]["400"] >= 8 and stats["rejected"]["401"] >= 2 and stats["rejected"]["413"] >= 1


def _get(url: str, token: str | None = TOKEN) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize(
    "token, expected",
    [(None, "needs a bearer token; set RUBRICRL_REWARD_TOKEN"), ("short", "RUBRICRL_REWARD_TOKEN is 5 characters")],
)
def test_listening_beyond_loopback_needs_a_token(token, expected, judge, rubrics, monkeypatch, capsys):
    if token is None:
        monkeypatch.delenv("RUBRICRL_REWARD_TOKEN", raising=False)
    else:
        monkeypatch.setenv("RUBRICRL_REWARD_TOKEN", token)
    assert (
        main(
            [
                "reward",
                "serve",
                "--rubrics",
                str(rubrics),
                "--host",
                "0.0.0.0",
                "--port",
                "0",
                "--base-url",
                judge.base_url,
                "--model",
                "fake",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0] and "listening" not in err[0]


def test_a_judge_that_is_down_is_503_and_a_prompt_missing_from_its_query_is_unscored(rubrics):
    """In-process: a query whose prompt was cut by the engine is unscored and counted; a judge that does not answer
    makes the request 503 (a whole batch of zeros would train on nothing), and the service keeps running."""
    rows = load_rubric_rows(rubrics)

    async def scenario():
        with FaultServer(reply=keyword_judge) as judge:
            role = Role(base_url=judge.base_url, model="fake", temperature=0.0)
            async with LLMClient({"judge": role}, cache=None, max_retries=0, timeout=5) as client:
                service = RewardService(rows, Grader(client, GradingConfig()), source=str(rubrics), log=lambda _: None)
                stop, ready = asyncio.Event(), asyncio.Future()
                task = asyncio.create_task(serve(service, "127.0.0.1", 0, stop=stop, ready=ready.set_result))
                url = await asyncio.wait_for(ready, 30) + "/get_reward"
                body = {
                    "query": ["<s>cut prompt Drink water.", chatml("q") + "Drink water.<|im_end|>"],
                    "prompts": [chatml("q"), chatml("q")],
                    "labels": ["a", "a"],
                }
                first = await asyncio.to_thread(post, url, body, None)
                judge.go_down()
                await asyncio.sleep(0.2)
                second = await asyncio.to_thread(post, url, {"responses": ["Rest."], "labels": ["b"]}, None)
                stop.set()
                await task
                return first, second, service.totals

    (s1, first), (s2, second), totals = asyncio.run(scenario())
    assert s1 == 200 and first["rewards"] == [0.0, 5 / 8] and first["scored"] == [False, True]
    assert first["extra_logs"]["rubric/prompt_not_in_query"] == [1.0, 0.0]
    assert s2 == 503 and "the judge (fake) does not answer" in second["error"]
    assert totals.prompt_not_in_query == 1 and totals.judge_down == 1


def test_a_judge_that_cannot_be_asked_is_500_naming_why(rubrics, monkeypatch):
    """A judge endpoint that needs an API key nobody set: the request is a 500 saying so (not a judge that is down),
    and the service keeps running."""
    rows = load_rubric_rows(rubrics)
    monkeypatch.delenv("RUBRICRL_TEST_UNSET_KEY", raising=False)

    async def scenario():
        role = Role(base_url="http://judge.invalid/v1", model="fake", api_key_env="RUBRICRL_TEST_UNSET_KEY")
        async with LLMClient({"judge": role}, cache=None, max_retries=0, timeout=5) as client:
            service = RewardService(rows, Grader(client, GradingConfig()), source=str(rubrics), log=lambda _: None)
            stop, ready = asyncio.Event(), asyncio.Future()
            task = asyncio.create_task(serve(service, "127.0.0.1", 0, stop=stop, ready=ready.set_result))
            url = await asyncio.wait_for(ready, 30) + "/get_reward"
            answer = await asyncio.to_thread(post, url, {"responses": ["Rest."], "labels": ["b"]}, None)
            stop.set()
            await task
            return answer, service.totals

    (status, body), totals = asyncio.run(scenario())
    assert status == 500 and "needs an API key" in body["error"] and "RUBRICRL_TEST_UNSET_KEY" in body["error"]
    assert totals.judge_down == 0


def test_split_response_strips_end_of_sequence_tokens():
    assert split_response("P: hi\nA: Hello.<|im_end|>", "P: hi\nA: ", ["<|im_end|>"]) == "Hello."
    assert split_response("<s>P Hello.</s></s>\n", "P ", ["</s>"]) == "Hello."
    assert split_response("other", "P ", ["</s>"]) is None


def test_a_prompt_that_opens_the_reasoning_gives_its_delimiter_back_to_the_response():
    """R1 distills and Qwen3 thinking-2507 end the templated prompt with <think>: a response cut off before </think>
    must read as reasoning that never closed (no answer, no judge call), not as an answer."""
    from types import SimpleNamespace

    service = SimpleNamespace(grader=SimpleNamespace(config=GradingConfig()))
    opened = "<|im_start|>assistant\n<think>\n"
    assert RewardService._as_written(service, "Let me think", opened) == "<think>Let me think"
    assert RewardService._as_written(service, "Hello.", "<|im_start|>assistant\n") == "Hello."
    assert RewardService._as_written(service, None, opened) is None


def test_export_verl_writes_verls_rl_parquet(service, rubrics, tmp_path, monkeypatch):
    """The parquet has verl's columns (as examples/data_preprocess/gsm8k.py writes them), and its ground truths
    are labels the service knows: verl's reward function scores its rows end to end."""
    output = tmp_path / "verl" / "train.parquet"
    assert (
        main(["export", "verl", "--rubrics", str(rubrics), "--output", str(output), "--system-prompt", "Be brief."])
        == 0
    )
    rows = pq.read_table(output).to_pylist()
    assert [r["data_source"] for r in rows] == ["rubricrl", "rubricrl"] and rows[0]["ability"] == "rubric"
    assert rows[0]["prompt"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": RUBRICS[0]["question"]},
    ]
    assert rows[1]["reward_model"] == {"style": "model", "ground_truth": "b"}
    assert rows[1]["extra_info"] == {"split": "train", "index": 1, "id": "b"}

    monkeypatch.setenv("RUBRICRL_REWARD_URL", service)
    monkeypatch.setenv("RUBRICRL_REWARD_TOKEN", TOKEN)
    scores = load_client_module().compute_score_batch(
        [r["data_source"] for r in rows],
        ["Drink water.", "Rest."],
        [r["reward_model"]["ground_truth"] for r in rows],
        [r["extra_info"] for r in rows],
    )
    assert [s["score"] for s in scores] == [5 / 8, 3 / 8]
    assert main(["export", "verl", "--rubrics", str(rubrics), "--output", str(tmp_path / "x.jsonl")]) == 2


def test_export_openrlhf_puts_prompt_and_label_at_the_top_level(service, rubrics, tmp_path, monkeypatch):
    """OpenRLHF reads `data[input_key]` and `data[label_key]` of each row (openrlhf/datasets/prompts_dataset.py):
    loaded as it loads a JSONL, the rows give the prompt messages and a label its reward function scores with."""
    import datasets

    output = tmp_path / "openrlhf" / "train.jsonl"
    assert main(["export", "openrlhf", "--rubrics", str(rubrics), "--output", str(output)]) == 0
    data = datasets.load_dataset("json", data_files=str(output), split="train")
    input_key, label_key = "prompt", "id"  # --data.input_key prompt --data.label_key id
    assert data[0][input_key] == [{"role": "user", "content": RUBRICS[0]["question"]}]
    labels = [row[label_key] for row in data]
    assert labels == ["a", "b"]
    monkeypatch.setenv("RUBRICRL_REWARD_URL", service)
    monkeypatch.setenv("RUBRICRL_REWARD_TOKEN", TOKEN)
    answer = load_client_module().reward_func(
        [chatml(RUBRICS[0]["question"]) + "Drink water."], [chatml(RUBRICS[0]["question"])], labels[:1]
    )
    assert answer["rewards"].tolist() == [5 / 8]
    assert main(["export", "openrlhf", "--rubrics", str(rubrics), "--output", str(tmp_path / "x.parquet")]) == 2
