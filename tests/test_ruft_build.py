"""`rubricrl ruft build` against a scripted endpoint (canned candidates and verdicts, exact request counts): the
selection rule, the output folder and its dataset, resume after SIGKILL, bad input before any call."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commands.main import main
from grading.select import Candidate, select
from rubricrl.llm import ResponseCache
from tests.fault_server import FaultServer

ROOT = Path(__file__).resolve().parents[1]
# Candidate answers come round in this order; the judge decides by keyword. With the rubric below they score
# 0.5, 1.0, -0.5, 1.0 (the last ties with the second and is longer).
ANSWERS = ["Drink water.", "Drink water and rest.", "I cannot help.", "Drink water, rest, and then rest more."]
RUBRIC = [
    {"criterion": "Advises hydration.", "points": 5},
    {"criterion": "Recommends sleep.", "points": 5},
    {"criterion": "Declines to answer.", "points": -5},
]
KEYWORDS = {"hydration": "water", "sleep": "rest", "Declines": "cannot"}


def verdict(body: dict) -> str:
    """The scripted judge: a criterion is met when its keyword is in the quoted response."""
    content = body["messages"][-1]["content"]
    criterion = content.rsplit("points):", 1)[1]
    response = content.split("]]\n", 1)[1].rsplit("\n[[end of response", 1)[0]
    met = next(word in response for key, word in KEYWORDS.items() if key in criterion)
    return json.dumps({"explanation": "scripted", "criteria_met": met})


class Script:
    """Candidates: ANSWERS in turn, one per sample; verdicts by keyword."""

    def __init__(self):
        self.answered = 0

    def __call__(self, body):
        if body.get("response_format"):
            return verdict(body)
        self.answered += 1
        return ANSWERS[(self.answered - 1) % len(ANSWERS)]


def rubrics(path: Path, n: int = 2) -> Path:
    rows = [
        {
            "id": f"r{i}",
            "prompt": [{"role": "user", "content": f"I have a cold ({i}). What should I do?"}],
            "rubrics": RUBRIC,
        }
        for i in range(n)
    ]
    rows[0]["prompt"] = [
        {"role": "user", "content": "I have a cold."},
        {"role": "assistant", "content": "Fever?"},
        {"role": "user", "content": "No fever. What should I do?"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def build(server, tmp_path, input_path, *extra) -> int:
    return main(
        [
            "ruft",
            "build",
            "--rubrics",
            str(input_path),
            "--output-dir",
            str(tmp_path / "out"),
            "--base-url",
            server.base_url,
            "--model",
            "fake",
            "--threshold",
            "0.5",
            "--candidates",
            "policy=4",
            "--self_judging",  # one canned server answers and judges
            *extra,
        ]
    )


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


# --- selection, by hand


def test_best_at_or_above_tau_is_kept_ties_go_to_the_shorter_then_the_earlier():
    cands = [Candidate(0, "aaaa", 0.9), Candidate(1, "aa", 0.9), Candidate(2, "bb", 0.9), Candidate(3, "c", 0.4)]
    assert [c.index for c in select(cands, threshold=0.5)] == [1]
    assert [c.index for c in select(cands, threshold=0.5, keep=3)] == [1, 2, 0]
    assert [c.index for c in select(cands, threshold=0.4, keep=9)] == [1, 2, 0, 3]
    assert select(cands, threshold=0.95) == []  # nothing reaches tau: nothing kept (the query is listed apart)


def test_a_text_sampled_twice_is_kept_once():
    cands = [
        Candidate(0, "rest", 0.9),
        Candidate(1, "fluids", 0.8),
        Candidate(2, " rest\n", 0.7),
        Candidate(3, "rest", 0.9),
    ]
    assert [c.index for c in select(cands, threshold=0.5, keep=3)] == [0, 1]  # 3 and 2 repeat 0's text


def test_unscored_and_flagged_candidates_are_never_kept():
    cands = [Candidate(0, "judge failed", None), Candidate(1, "flagged", 1.0, flagged=True), Candidate(2, "ok", 0.6)]
    assert [c.index for c in select(cands, threshold=0.0, keep=3)] == [2]
    assert select(cands[:2], threshold=0.0) == []


# --- the command


def test_build_writes_candidates_and_an_sft_dataset_of_the_best_answers(tmp_path, home, capsys):
    import datasets

    with FaultServer(reply=Script()) as server:
        assert build(server, tmp_path, rubrics(tmp_path / "rubrics.jsonl")) == 0
        # per query: one n=4 candidate call, then 4 candidates x 3 criteria judged one by one
        assert sorted(r.get("n", 1) for r in server.requests if not r.get("response_format")) == [4, 4]
        assert sum(1 for r in server.requests if r.get("response_format")) == 2 * 4 * 3
    out = tmp_path / "out"
    candidates = [json.loads(line) for line in (out / "candidates.jsonl").read_text().splitlines()]
    assert len(candidates) == 8 and {c["response"] for c in candidates} == set(ANSWERS)
    by_text = {c["response"]: c["score"] for c in candidates}
    assert by_text == {ANSWERS[0]: 0.5, ANSWERS[1]: 1.0, ANSWERS[2]: -0.5, ANSWERS[3]: 1.0}
    sft = datasets.load_from_disk(str(out / "sft"))
    assert len(sft) == 2 and set(sft["id"]) == {"r0", "r1"}
    for row in sft:
        assert row["completion"] == [{"role": "assistant", "content": ANSWERS[1]}]  # best, and shorter of the tie
        assert (
            row["score"] == 1.0 >= row["threshold"] == 0.5 and row["k"] == 4 and row["grading_mode"] == "per_criterion"
        )
    assert [m["role"] for m in sft.filter(lambda r: r["id"] == "r0")[0]["prompt"]] == ["user", "assistant", "user"]
    assert datasets.load_dataset("parquet", data_files=str(out / "sft.parquet"), split="train").num_rows == 2
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["queries_kept"] == 2 and manifest["counts"]["candidates"] == 8
    assert manifest["config"]["ruft"]["threshold"] == 0.5 and manifest["scores"]["kept"]["mean"] == 1.0
    assert (out / "scores.png").stat().st_size > 0 and (out / "config.yaml").exists()
    assert "kept: 2 of 2 queries (100% retained)" in capsys.readouterr().out


def test_the_gpu_preset_builds_as_shipped_with_a_canned_server_and_short_answers(tmp_path, home):
    """configs/ruft/qwen3-gpu.yaml runs `ruft build` with its own settings, its endpoints a canned server and its
    answers short: K = 8 candidates a query from its two candidate roles, graded per criterion, the best at or above
    its tau kept."""
    preset = ROOT / "configs" / "ruft" / "qwen3-gpu.yaml"
    argv = ["ruft", "build", "--config", str(preset), "--rubrics", str(rubrics(tmp_path / "rubrics.jsonl"))]
    argv += ["--output-dir", str(tmp_path / "out"), "--defaults", "max_tokens=64"]
    with FaultServer(reply=Script()) as server:
        assert main([*argv, "--base-url", server.base_url, "--model", "fake", "--self_judging"]) == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["config"]["ruft"]["candidates"] == {"policy": 4, "strong": 4}
    assert manifest["config"]["ruft"]["threshold"] == 0.6 and manifest["counts"]["candidates"] == 16
    assert manifest["counts"]["queries_kept"] == 2 and manifest["scores"]["kept"]["mean"] == 1.0


def test_a_judge_grading_candidates_of_its_own_model_is_refused_before_any_call(tmp_path, home, capsys):
    """The candidates' role and the judge resolve to one model at one endpoint: one line naming both and the flag,
    and no request. A judge of its own (another endpoint) builds."""
    argv = ["ruft", "build", "--rubrics", str(rubrics(tmp_path / "rubrics.jsonl")), "--output-dir", str(tmp_path / "o")]
    argv += ["--threshold", "0.5", "--candidates", "policy=4"]
    with FaultServer(reply=Script()) as server:
        assert main([*argv, "--base-url", server.base_url, "--model", "fake"]) == 2
        assert server.count == 0
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "roles 'policy' and 'judge' both resolve to fake at" in error
    assert "--self_judging" in error
    with FaultServer(reply=Script()) as server, FaultServer(reply=Script()) as judge:
        own = ["--roles", f"judge.base_url={judge.base_url}", "judge.model=another"]
        assert main([*argv, "--base-url", server.base_url, "--model", "fake", *own]) == 0
        assert judge.count == 2 * 4 * 3 and all(body["model"] == "another" for body in judge.requests)


def test_a_judge_of_the_candidates_model_at_a_server_of_its_own_is_refused(tmp_path, home, capsys):
    """--base-url/--model for every role and a server of its own for the judge: the judge still names the
    candidates' model, so one line naming both servers, and no request to either."""
    argv = ["ruft", "build", "--rubrics", str(rubrics(tmp_path / "rubrics.jsonl")), "--output-dir", str(tmp_path / "o")]
    argv += ["--threshold", "0.5", "--candidates", "policy=4"]
    with FaultServer(reply=Script()) as server, FaultServer(reply=Script()) as judge:
        own = ["--roles", f"judge.base_url={judge.base_url}"]
        assert main([*argv, "--base-url", server.base_url, "--model", "fake", *own]) == 2
        assert server.count == 0 and judge.count == 0
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and f"fake at {server.base_url} and fake at {judge.base_url}" in error
    assert "--self_judging" in error


def test_a_probability_judge_scores_candidates_by_each_criterions_share_of_its_points(tmp_path, home):
    import math

    script = Script()

    def reply(body):
        if not body.get("logprobs"):
            return script(body)  # a candidate
        p = 0.8 if json.loads(verdict(body))["criteria_met"] else 0.3  # P(yes) of the scripted verdict
        top = [{"token": "Yes", "logprob": math.log(p)}, {"token": "No", "logprob": math.log(1 - p)}]
        return {"content": "Yes", "logprobs": {"content": [{**top[0], "top_logprobs": top}]}}

    with FaultServer(reply=reply) as server:
        assert build(server, tmp_path, rubrics(tmp_path / "rubrics.jsonl"), "--verdict-format", "probability") == 0
    candidates = [json.loads(line) for line in (tmp_path / "out" / "candidates.jsonl").read_text().splitlines()]
    by_text = {c["response"]: round(c["score"], 6) for c in candidates}  # (5 P1 + 5 P2 - 5 P3) / 10
    assert by_text == {ANSWERS[0]: 0.4, ANSWERS[1]: 0.65, ANSWERS[2]: -0.1, ANSWERS[3]: 0.65}
    assert candidates[0]["verdicts"][0]["probability"] == pytest.approx(0.8)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["judge"]["verdict_format"] == "probability"
    kept = [json.loads(line) for line in (tmp_path / "out" / "sft.jsonl").read_text().splitlines()]
    assert [k["completion"][0]["content"] for k in kept] == [ANSWERS[1]] * 2  # above 0.5, the shorter of the tie


def test_queries_below_tau_are_listed_and_an_empty_selection_still_writes_a_dataset(tmp_path, home):
    import datasets

    half_right = lambda body: verdict(body) if body.get("response_format") else ANSWERS[0]  # noqa: E731 (0.5)
    with FaultServer(reply=half_right) as server:
        assert build(server, tmp_path, rubrics(tmp_path / "rubrics.jsonl"), "--threshold", "0.6") == 0
    out = tmp_path / "out"
    below = [json.loads(line) for line in (out / "below_threshold.jsonl").read_text().splitlines()]
    assert sorted(b["id"] for b in below) == ["r0", "r1"] and {b["best_eligible_score"] for b in below} == {0.5}
    assert len(datasets.load_from_disk(str(out / "sft"))) == 0


def test_a_judge_that_fails_leaves_candidates_unscored_and_never_kept(tmp_path, home):
    answers = iter(["Drink water and rest.", "FAIL: rest."] * 2)

    def judge_fails_on_one(body):
        if not body.get("response_format"):
            return next(answers)
        return "not JSON at all" if "FAIL" in body["messages"][-1]["content"] else verdict(body)

    with FaultServer(reply=judge_fails_on_one) as server:
        assert build(server, tmp_path, rubrics(tmp_path / "rubrics.jsonl", 1), "--candidates", "policy=2") == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["counts"]["unscored_candidates"] == 1 and manifest["counts"]["sft_rows"] == 1
    assert manifest["counts"]["judge_failure_rate"] == 0.5
    sft = [json.loads(line) for line in (tmp_path / "out" / "sft.jsonl").read_text().splitlines()]
    assert [row["completion"][0]["content"] for row in sft] == ["Drink water and rest."]


def test_a_query_the_judge_scored_nothing_of_is_failed_and_retried_not_finished(tmp_path, home, capsys):
    def failing_judge(body):
        return "not JSON at all" if body.get("response_format") else "Drink water and rest."

    path = rubrics(tmp_path / "rubrics.jsonl", 1)
    with FaultServer(reply=failing_judge) as server:
        assert build(server, tmp_path, path, "--candidates", "policy=2") == 1
    assert "the judge failed on every candidate" in capsys.readouterr().out
    assert not (tmp_path / "out" / "queries.jsonl").read_text()  # not done: the next run grades it again
    with FaultServer(reply=Script()) as server:
        assert build(server, tmp_path, path, "--candidates", "policy=2") == 0
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]["finished_queries"] == 1


@pytest.mark.parametrize(
    "extra, content, message",
    [
        (["--candidates", "policy=0"], None, "at least one role must sample answers (K >= 1)"),
        (["--candidates", "policy=-1"], None, "K per role must be an integer >= 0"),
        (["--threshold", "1.5"], None, "threshold must be within the score range [0, 1]"),
        (["--threshold", "none"], None, "threshold (tau) is required"),
        (
            [],
            '{"id": "a", "prompt": "Q?", "rubrics": [{"criterion": "Bad.", "points": -3}]}\n',
            "no criterion with positive points",
        ),
        ([], '{"id": "a", "rubrics": [{"criterion": "x", "points": 3}]}\n', "line 1: no 'prompt' or 'question' key"),
        (["--temprature", "1"], None, "unrecognized arguments: --temprature"),
    ],
)
def test_bad_input_is_one_line_before_any_call(tmp_path, home, capsys, extra, content, message):
    path = rubrics(tmp_path / "rubrics.jsonl")
    if content is not None:
        path.write_text(content)
    with FaultServer(reply=Script()) as server:
        try:
            code = build(server, tmp_path, path, *extra)
        except SystemExit as exit:  # argparse's own errors
            code = exit.code
        assert code == 2 and server.count == 0
    assert message in capsys.readouterr().err


KILLED_RUN = """
import sys
from commands.main import main
main(["ruft", "build", "--rubrics", sys.argv[1], "--output-dir", sys.argv[2], "--base-url", sys.argv[3],
      "--model", "fake", "--threshold", "0.5", "--candidates", "policy=4", "--concurrency", "4", "--self_judging"])
"""


@pytest.mark.slow  # a subprocess SIGKILLed mid-run: out of make test-fast
def test_sigkill_then_rerun_finishes_without_repeating_a_finished_call(tmp_path, home):
    input_path = rubrics(tmp_path / "rubrics.jsonl", 40)
    out = tmp_path / "out"
    with FaultServer(reply=Script(), latency=0.01) as server:
        env = {**os.environ, "RUBRICRL_HOME": str(home)}
        killed = subprocess.Popen(
            [sys.executable, "-c", KILLED_RUN, str(input_path), str(out), server.base_url],
            cwd=ROOT,
            env=env,
            stderr=subprocess.DEVNULL,
        )
        done = lambda: len((out / "queries.jsonl").read_text().splitlines()) if (out / "queries.jsonl").exists() else 0  # noqa: E731
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and done() < 10:
            time.sleep(0.05)
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        server.wait_idle(timeout=30)  # every request the killed process had sent is read and answered
        done_before = done()
        assert 10 <= done_before < 40 and not (out / "manifest.json").exists()
        cache = ResponseCache(home / "cache" / "responses")
        cached_before, sent_before = len(cache), server.count
        lines = input_path.read_text().splitlines()  # the rerun reads the rows in another order
        input_path.write_text("\n".join(reversed(lines)) + "\n")
        assert build(server, tmp_path, input_path, "--concurrency", "4") == 0
        samples_asked = sum(r.get("n", 1) for r in server.requests[sent_before:])
        assert samples_asked == len(cache) - cached_before  # every call of the rerun was a new one
        cache.close()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["done_before"] == done_before and manifest["counts"]["finished_queries"] == 40
    sft = [json.loads(line) for line in (out / "sft.jsonl").read_text().splitlines()]
    import datasets

    rows = datasets.load_from_disk(str(out / "sft"))
    assert sorted(rows["id"]) == sorted(f"r{i}" for i in range(40))  # each query once, whatever was appended twice
    assert len(sft) >= 40


def test_publish_dry_run_of_a_build_states_k_tau_models_and_the_rule(tmp_path, home):
    import datasets

    with FaultServer(reply=Script()) as server:
        assert build(server, tmp_path, rubrics(tmp_path / "rubrics.jsonl")) == 0
    assert main(["publish", str(tmp_path / "out"), "--repo-id", "me/ruft-sft", "--dry-run", str(tmp_path / "hub")]) == 0
    card = (tmp_path / "hub" / "README.md").read_text()
    assert "| candidates per query (K) | 4 (policy: 4) |" in card and "| threshold (tau) | 0.5 |" in card
    assert "ties go to the shorter answer" in card and "policy `fake`" in card
    loaded = datasets.load_dataset(str(tmp_path / "hub"), split="train")
    assert loaded.num_rows == 2 and loaded[0]["completion"][0]["role"] == "assistant"


def test_answers_cut_off_at_max_tokens_are_not_kept_unless_asked():
    cands = [Candidate(0, "cut off mid-sent", 1.0, truncated=True), Candidate(1, "complete", 0.6)]
    assert [c.index for c in select(cands, threshold=0.5)] == [1]
    assert [c.index for c in select(cands, threshold=0.5, truncated_ok=True)] == [0]


def test_blank_answers_are_never_kept():
    assert select([Candidate(0, "  ", 0.0), Candidate(1, "An answer.", 0.0)], threshold=0.0) == [
        Candidate(1, "An answer.", 0.0)
    ]


def test_an_unexpected_error_in_one_query_is_recorded_and_the_others_finish(tmp_path, home, monkeypatch, capsys):
    from ruft import build as ruft_build

    original = ruft_build.sample_and_grade

    async def broken_for_r0(client, grader, roles, conversation, rubric, reference=None):
        if "I have a cold." in conversation[0]["content"]:
            raise KeyError("boom")
        return await original(client, grader, roles, conversation, rubric, reference)

    monkeypatch.setattr(ruft_build, "sample_and_grade", broken_for_r0)
    with FaultServer(reply=Script()) as server:
        assert build(server, tmp_path, rubrics(tmp_path / "rubrics.jsonl")) == 1
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert errors == [{"id": "r0", "stage": "sample and grade", "error": "KeyError: 'boom'"}]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["counts"]["failed"] == {"sample and grade": 1} and manifest["counts"]["finished_queries"] == 1
    printed = capsys.readouterr().out  # the summary says why, where every error is, and where the output went
    assert "first error: r0 at sample and grade: KeyError: 'boom'" in printed
    assert f"every error: {tmp_path / 'out' / 'errors.jsonl'}" in printed and f"output: {tmp_path / 'out'}" in printed


def test_a_rerun_removes_what_says_finished_until_it_finishes_itself(tmp_path, home, monkeypatch):
    with FaultServer(reply=Script()) as server:
        assert build(server, tmp_path, rubrics(tmp_path / "rubrics.jsonl")) == 0
        out = tmp_path / "out"
        assert (out / "manifest.json").exists() and (out / "sft").exists()

        async def killed(self, rows, total):
            raise RuntimeError("killed mid-run")

        monkeypatch.setattr("ruft.build.Builder.run", killed)
        with pytest.raises(RuntimeError):
            build(server, tmp_path, rubrics(tmp_path / "rubrics.jsonl", 3))
    assert not (out / "manifest.json").exists() and not (out / "sft").exists() and not (out / "sft.parquet").exists()


def test_the_judge_failure_rate_counts_ratings_too(tmp_path, home):
    answers = iter(["Drink water.", "FAIL"] * 2)

    def judge_fails_on_one(body):
        if not body.get("response_format"):
            return next(answers)
        if "FAIL" in body["messages"][-1]["content"]:
            return "no rating here"
        return json.dumps({"explanation": "fine", "rating": 8})

    with FaultServer(reply=judge_fails_on_one) as server:
        assert (
            build(
                server,
                tmp_path,
                rubrics(tmp_path / "rubrics.jsonl", 1),
                "--mode",
                "implicit",
                "--candidates",
                "policy=2",
            )
            == 0
        )
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["counts"]["judge_failure_rate"] == 0.5 and manifest["counts"]["unscored_candidates"] == 1


def test_a_role_of_the_file_can_be_left_out_from_the_command_line(tmp_path, home):
    config = tmp_path / "ruft.yaml"
    config.write_text("ruft: {candidates: {strong: 3}, threshold: 0.5}\n")
    with FaultServer(reply=Script()) as server:
        assert (
            build(
                server,
                tmp_path,
                rubrics(tmp_path / "rubrics.jsonl", 1),
                "--config",
                str(config),
                "--candidates",
                "strong=0",
                "policy=2",
            )
            == 0
        )
        assert [r.get("n", 1) for r in server.requests if not r.get("response_format")] == [2]
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["config"]["ruft"]["candidates"] == {"policy": 2}


def test_a_rerun_with_another_threshold_is_refused_unless_forced_and_then_both_are_recorded(tmp_path, home, capsys):
    out = tmp_path / "out"
    with FaultServer(reply=Script()) as server:
        assert build(server, tmp_path, rubrics(tmp_path / "rubrics.jsonl", 1)) == 0
        capsys.readouterr()
        sent = server.count
        assert build(server, tmp_path, rubrics(tmp_path / "rubrics.jsonl", 2), "--threshold", "0.7") == 2
        assert server.count == sent  # refused before any call
        err = capsys.readouterr().err
        assert "ruft.threshold 0.5 -> 0.7" in err and "--allow-changed-settings" in err and "--output-dir" in err
        assert (
            build(
                server,
                tmp_path,
                rubrics(tmp_path / "rubrics.jsonl", 2),
                "--threshold",
                "0.7",
                "--allow-changed-settings",
            )
            == 0
        )
        assert (
            build(server, tmp_path, rubrics(tmp_path / "rubrics.jsonl", 2), "--threshold", "0.7", "--concurrency", "2")
            == 0
        )  # the latest settings, and one that changes no row: a plain resume
    manifest = json.loads((out / "manifest.json").read_text())
    old, new = manifest["fingerprints"]
    assert (old["rows"], new["rows"]) == (1, 1) and old["settings"]["ruft.threshold"] == 0.5
    queries = {q["id"]: q["fingerprint"] for q in map(json.loads, (out / "queries.jsonl").read_text().splitlines())}
    assert queries == {"r0": old["id"], "r1": new["id"]}
    # usage adds up over the three runs (the last one made no call)
    assert [run["usage"]["policy"]["requests"] for run in manifest["runs"]] == [1, 1, 0]
    assert manifest["usage"]["policy"]["requests"] == 2 and manifest["usage"]["judge"]["requests"] == 2 * 4 * 3
    assert main(["publish", str(out), "--repo-id", "me/mixed-sft", "--dry-run", str(tmp_path / "hub")]) == 0
    card = (tmp_path / "hub" / "README.md").read_text()
    assert "**mixed settings**" in card and f"`{new['id']}` (1 queries): changed: ruft.threshold 0.5 -> 0.7" in card
    assert "The table gives the latest settings" in card and "| threshold (tau) | 0.7 |" in card


def test_rows_no_candidate_could_be_scored_on_are_refused_or_left_out_and_listed(tmp_path, home, capsys):
    path = rubrics(tmp_path / "rubrics.jsonl", 4)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows[2:]:  # penalties only: every candidate would be unscored
        row["rubrics"] = [c for c in RUBRIC if c["points"] < 0]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with FaultServer(reply=Script()) as server:
        assert build(server, tmp_path, path, "--candidates", "policy=2") == 2 and server.count == 0
    err = capsys.readouterr().err.strip()
    assert (
        f"{path}: line 3: id 'r2': no criterion with positive points" in err and "(2 of 4 rows cannot be scored)" in err
    )
    assert "--skip-bad-rows" in err and len(err.splitlines()) == 1 and not (tmp_path / "out").exists()
    with FaultServer(reply=Script()) as server:
        assert build(server, tmp_path, path, "--candidates", "policy=2", "--skip-bad-rows") == 0
    out = tmp_path / "out"
    rejected = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
    assert [(r["location"], r["row"]["id"]) for r in rejected] == [(f"{path}: line 3", "r2"), (f"{path}: line 4", "r3")]
    assert "all penalties" in rejected[0]["reason"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["rejected_rows"] == 2 and manifest["counts"]["queries"] == 2
    assert manifest["counts"]["finished_queries"] == 2 and manifest["counts"]["unscored_candidates"] == 0
    assert {json.loads(line)["id"] for line in (out / "candidates.jsonl").read_text().splitlines()} == {"r0", "r1"}
    captured = capsys.readouterr()
    assert "left out 2 rows" in captured.err and "2 bad rows left out" in captured.out


def test_grading_settings_newer_than_a_build_leave_its_fingerprint_alone_until_set(tmp_path):
    from grading.grader import GradingConfig
    from ruft.build import BuildArgs, build_settings
    from ruft.config import RuftConfig

    def grading_of(**settings):
        args = BuildArgs(rubrics=tmp_path / "r.jsonl", output_dir=tmp_path / "out")
        return build_settings(args, RuftConfig(threshold=0.5), GradingConfig(**settings), {})["grading"]

    assert not {"verdict_format", "reask_undecided"} & set(grading_of())  # what a build before them recorded
    assert grading_of(verdict_format="verdict_only", reask_undecided=2) == {
        **grading_of(),
        "verdict_format": "verdict_only",
        "reask_undecided": 2,
    }
