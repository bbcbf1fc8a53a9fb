"""A policy that thinks is judged on its answer: at every entry point (grade, eval, ruft build, the RuRL reward,
synthesis's reference and contrast responses) a `<think>…</think>` answer scores as its bare answer, the judge never
sees the reasoning, and an answer cut off while reasoning scores 0 without a judge call. Against the scripted judge
of tests/fault_server.py, which decides by keyword and so would pay for a keyword hidden in the reasoning."""

import json

import pytest

from commands.main import main
from grading.grader import Grader, GradingConfig
from grading.rubric import rubric_from_items
from rubricrl.llm import LLMClient, Role
from rubricrl.llm.reasoning import ReasoningNeverClosed, split_reasoning
from rurl.reward.rubric_reward import rubric_reward
from tests.fault_server import FaultServer, schema_reply
from tests.helpers import run

# The judge meets "Mentions seeing a doctor" only when it reads "doctor": the reasoning says it, the answer does not.
REASONING = "The user may need a doctor if this persists, but first: water."
ANSWER = "Drink a glass of water and rest."
THOUGHT = f"<think>\n{REASONING}\n</think>\n\n{ANSWER}"
CUT_OFF = f"<think>\n{REASONING} Let me also consider"
RUBRIC_ITEMS = [
    {"criterion": "Advises drinking water.", "points": 5},
    {"criterion": "Mentions seeing a doctor.", "points": 5},
]
KEYWORDS = {"water": "water", "doctor": "doctor"}


def quoted_response(body: dict) -> str:
    content = body["messages"][-1]["content"]
    return content.split("]]\n", 1)[1].rsplit("\n[[end of response", 1)[0]


def judge(body: dict) -> str:
    """Per criterion: met when the criterion's keyword is in the quoted response."""
    criterion = body["messages"][-1]["content"].rsplit("points):", 1)[1]
    met = next(word in quoted_response(body) for key, word in KEYWORDS.items() if key in criterion)
    return json.dumps({"explanation": "scripted", "criteria_met": met})


def policy_and_judge(answer: str):
    """One server for both roles: judge requests carry a response format, policy requests get `answer`."""
    return lambda body: judge(body) if body.get("response_format") else answer


def judged_texts(server) -> list[str]:
    return [quoted_response(r) for r in server.requests if r.get("response_format")]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))


def test_the_split_follows_the_chat_templates():
    assert split_reasoning(THOUGHT).answer == ANSWER and split_reasoning(THOUGHT).reasoning == REASONING
    # the template opened the reasoning in the prompt: the completion holds only the closing delimiter
    assert split_reasoning(f"{REASONING}</think>{ANSWER}").answer == ANSWER
    assert split_reasoning(ANSWER).answer == ANSWER and split_reasoning(ANSWER).reasoning == ""
    assert split_reasoning(CUT_OFF).unclosed
    assert split_reasoning(REASONING, starts_open=True).unclosed  # opened by the template, never closed
    assert split_reasoning(THOUGHT, []).answer == THOUGHT  # no delimiters: all answer
    assert split_reasoning("[R]why[/R] so", ["[R]", "[/R]"]).answer == "so"
    # an answer that talks about the tags is not reasoning
    assert split_reasoning("Use <think> tags like this.").answer == "Use <think> tags like this."


def grade(server, response: str, **config):
    async def go():
        async with LLMClient({"judge": Role(base_url=server.base_url, model="judge")}) as client:
            rubric = rubric_from_items(RUBRIC_ITEMS, "test")
            return await Grader(client, GradingConfig(**config)).grade(
                [{"role": "user", "content": "Headache?"}], response, rubric
            )

    return run(go())


def test_the_grader_judges_the_answer_alone_and_no_answer_gets_0_without_a_call():
    with FaultServer(reply=judge) as server:
        thought, bare = grade(server, THOUGHT), grade(server, ANSWER)
        assert thought.score == bare.score == 0.5  # water met, doctor (only in the reasoning) not
        assert all(REASONING not in text for text in judged_texts(server))
        calls = server.count
        cut = grade(server, CUT_OFF)
        assert server.count == calls  # no judge call
        assert cut.score == cut.reward == 0.0 and "reasoning never closed" in cut.no_answer
        assert cut.to_record(())["no_answer"] == cut.no_answer
        # without delimiters the whole text is judged: the reasoning's "doctor" pays
        assert grade(server, THOUGHT, reasoning_delimiters=[]).score == 1.0


def write_lines(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_grade_and_eval_score_a_thought_answer_as_its_bare_answer(tmp_path, home, capsys):
    rubrics = write_lines(
        tmp_path / "rubrics.jsonl",
        [{"id": i, "question": "Headache?", "rubrics": RUBRIC_ITEMS} for i in ("thought", "bare", "cut")],
    )
    responses = write_lines(
        tmp_path / "responses.jsonl",
        [
            {"id": "thought", "response": THOUGHT},
            {"id": "bare", "response": ANSWER},
            {"id": "cut", "response": CUT_OFF},
        ],
    )
    with FaultServer(reply=judge) as server:
        assert (
            main(
                [
                    "grade",
                    "--rubrics",
                    str(rubrics),
                    "--responses",
                    str(responses),
                    "--output",
                    str(tmp_path / "graded.jsonl"),
                    "--base-url",
                    server.base_url,
                    "--model",
                    "fake",
                ]
            )
            == 0
        )
        # 2 calls: the thought answer and the bare one are one text to the judge (graded once), the cut one none
        assert server.count == 2 and all(REASONING not in text for text in judged_texts(server))
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "graded.jsonl").read_text().splitlines())}
    assert records["thought"]["score"] == records["bare"]["score"] == 0.5
    assert records["thought"]["response"] == THOUGHT  # the record keeps what the policy wrote
    assert records["cut"]["score"] == 0.0 and records["cut"]["no_answer"]
    assert "1 without an answer (reasoning never closed)" in capsys.readouterr().out
    # eval with a policy that thinks: its answer is judged, the unanswered one counts 0 in the report
    with FaultServer(reply=policy_and_judge(THOUGHT)) as server:
        assert (
            main(
                [
                    "eval",
                    "--rubrics",
                    str(rubrics),
                    "--output-dir",
                    str(tmp_path / "eval"),
                    "--base-url",
                    server.base_url,
                    "--model",
                    "fake",
                    "--self_judging",
                ]
            )
            == 0
        )
        assert all(REASONING not in text for text in judged_texts(server))
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert report["metrics"]["overall_score"] == 0.5 and report["no_answer"] == 0


def test_ruft_build_selects_on_the_answer_and_keeps_what_sft_completion_says(tmp_path, home):
    rubrics = write_lines(tmp_path / "rubrics.jsonl", [{"id": "r0", "question": "Headache?", "rubrics": RUBRIC_ITEMS}])
    answers = iter([THOUGHT, CUT_OFF] * 4)

    def reply(body):
        return judge(body) if body.get("response_format") else next(answers)

    for completion, expected in (("whole", THOUGHT), ("answer", ANSWER)):
        with FaultServer(reply=reply) as server:
            out = tmp_path / completion
            assert (
                main(
                    [
                        "ruft",
                        "build",
                        "--rubrics",
                        str(rubrics),
                        "--output-dir",
                        str(out),
                        "--base-url",
                        server.base_url,
                        "--model",
                        "fake",
                        "--threshold",
                        "0.5",
                        "--candidates",
                        "policy=2",
                        "--sft-completion",
                        completion,
                        "--self_judging",
                    ]
                )
                == 0
            )
            assert all(REASONING not in text for text in judged_texts(server))
        candidates = [json.loads(line) for line in (out / "candidates.jsonl").read_text().splitlines()]
        assert sorted((c["score"], bool(c["no_answer"])) for c in candidates) == [(0.0, True), (0.5, False)]
        sft = [json.loads(line) for line in (out / "sft.jsonl").read_text().splitlines()]
        assert [row["completion"][0]["content"] for row in sft] == [expected]
        assert sft[0]["sft_completion"] == completion
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["counts"]["no_answer_candidates"] == 1


def test_the_rurl_reward_judges_answers_and_logs_both_lengths():
    prompts = [[{"role": "user", "content": "Headache?"}]] * 4
    completions = [
        [{"role": "assistant", "content": THOUGHT}],
        [{"role": "assistant", "content": ANSWER}],
        [{"role": "assistant", "content": CUT_OFF}],
        # TRL's response parsing puts a closed reasoning beside the content
        [{"role": "assistant", "content": ANSWER, "reasoning_content": REASONING}],
    ]
    metrics = {}
    with FaultServer(reply=judge) as server:

        async def go():
            async with LLMClient({"judge": Role(base_url=server.base_url, model="judge")}) as client:
                return await rubric_reward(
                    prompts,
                    completions,
                    [RUBRIC_ITEMS] * 4,
                    grader=Grader(client),
                    log_metric=metrics.__setitem__,
                    count_tokens=lambda t: len(t.split()),
                )

        rewards = run(go())
        assert all(REASONING not in text for text in judged_texts(server))
    assert rewards == [0.5, 0.5, 0.0, 0.5]
    assert metrics["rubric/no_answer_rate"] == 0.25
    words = len(REASONING.split())
    # reasoning: the thought, none, the cut-off one, the parsed one
    assert (
        metrics["rubric/reasoning_length"] == (words + 0 + len(f"{REASONING} Let me also consider".split()) + words) / 4
    )
    assert metrics["rubric/answer_length"] == len(ANSWER.split()) * 3 / 4


def test_synthesis_grounds_rubrics_in_answers_not_reasoning(tmp_path, home, monkeypatch):
    queries = write_lines(tmp_path / "q.jsonl", [{"id": "q0", "question": "Headache?"}])

    def reply(body):  # every free-text answer thinks first; the rubric writers answer the schema
        return schema_reply(body) if body.get("response_format") else THOUGHT

    with FaultServer(reply=reply) as server:
        assert (
            main(
                [
                    "synth",
                    "--input",
                    str(queries),
                    "--output-dir",
                    str(tmp_path / "out"),
                    "--base-url",
                    server.base_url,
                    "--model",
                    "fake",
                ]
            )
            == 0
        )
        writer_prompts = [r["messages"][-1]["content"] for r in server.requests if r.get("response_format")]
    assert writer_prompts and all(ANSWER in p and REASONING not in p for p in writer_prompts)
    details = json.loads((tmp_path / "out" / "details.jsonl").read_text().splitlines()[0])
    assert details["reference_answer"] == ANSWER
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "other-home"))  # not the first run's cached answers
    with FaultServer(reply=lambda body: schema_reply(body) if body.get("response_format") else CUT_OFF) as server:
        assert (
            main(
                [
                    "synth",
                    "--input",
                    str(queries),
                    "--output-dir",
                    str(tmp_path / "cut"),
                    "--base-url",
                    server.base_url,
                    "--model",
                    "fake",
                ]
            )
            != 0
        )
    errors = (tmp_path / "cut" / "errors.jsonl").read_text()
    assert "cut off while reasoning" in errors and "raise its max_tokens" in errors


def test_reasoning_never_closed_names_the_way_out():
    with pytest.raises(ReasoningNeverClosed, match="raise its max_tokens or lower its reasoning effort"):
        from rubricrl.llm.reasoning import answer_of

        answer_of(CUT_OFF, what="the reference answer")


def test_rurl_reads_from_the_policys_template_whether_it_opens_the_reasoning(tmp_path):
    """DeepSeek-R1 distills and Qwen3 thinking-2507 end the generation prompt with `<think>`: `rurl train` reads it
    from the tokenizer, so that a completion cut off before `</think>` gets no answer instead of being judged."""
    from transformers import AutoTokenizer
    from trl import GRPOConfig, ModelConfig

    from rubricrl.serving.embedded_model import prepare_embedded_model
    from rurl.train import read_policy_template

    tokenizer = AutoTokenizer.from_pretrained(prepare_embedded_model())
    grpo = GRPOConfig(output_dir=str(tmp_path / "run"), report_to=[], use_cpu=True, bf16=False)
    for opens, template in (
        (False, tokenizer.chat_template),
        (True, tokenizer.chat_template.replace("<|im_start|>assistant\n", "<|im_start|>assistant\n<think>\n")),
    ):
        assert ("<think>" in template) == opens  # the replacement took
        tokenizer.chat_template = template
        tokenizer.save_pretrained(tmp_path / f"policy-{opens}")
        grading, config = GradingConfig(), {"grading": {"reasoning_starts_open": False}}
        policy = read_policy_template(
            grading, grpo, ModelConfig(model_name_or_path=str(tmp_path / f"policy-{opens}")), config
        )
        assert grading.reasoning_starts_open == opens and config["grading"]["reasoning_starts_open"] == opens
        assert policy.chat_template == template  # the policy's own tokenizer: the reward reads and counts with it


def test_a_policy_behind_a_reasoning_parser_is_judged_alike_and_its_cut_off_answers_score_0(tmp_path, home):
    """vLLM's reasoning parser returns the reasoning beside the content, and content null when the model was cut
    off while thinking: eval scores that 0 as no answer (not unscored, which would flatter a policy that never
    answers hard questions), and ruft build keeps the whole completion with its reasoning between the delimiters."""
    parsed = {"content": ANSWER, "reasoning": REASONING}
    cut_off = {"content": None, "reasoning": REASONING, "finish_reason": "length"}
    rubrics = write_lines(
        tmp_path / "rubrics.jsonl",
        [{"id": i, "question": f"Headache {i}?", "rubrics": RUBRIC_ITEMS} for i in ("answered", "cut")],
    )

    def reply(body):
        if body.get("response_format"):
            return judge(body)
        return cut_off if "cut" in body["messages"][-1]["content"] else parsed

    with FaultServer(reply=reply) as server:
        assert (
            main(
                [
                    "eval",
                    "--rubrics",
                    str(rubrics),
                    "--output-dir",
                    str(tmp_path / "eval"),
                    "--base-url",
                    server.base_url,
                    "--model",
                    "fake",
                    "--self_judging",
                ]
            )
            == 0
        )
        records = {r["id"]: r for r in map(json.loads, (tmp_path / "eval" / "graded.jsonl").read_text().splitlines())}
        assert records["answered"]["score"] == 0.5 and records["answered"]["response"].endswith(ANSWER)
        assert records["cut"]["score"] == 0.0 and records["cut"]["no_answer"] and not records["cut"].get("policy_error")
        assert (
            main(
                [
                    "ruft",
                    "build",
                    "--rubrics",
                    str(rubrics),
                    "--output-dir",
                    str(tmp_path / "ruft"),
                    "--base-url",
                    server.base_url,
                    "--model",
                    "fake",
                    "--threshold",
                    "0.5",
                    "--candidates",
                    "policy=2",
                    "--self_judging",
                ]
            )
            == 0
        )
        assert all(REASONING not in text for text in judged_texts(server))
    sft = [json.loads(line) for line in (tmp_path / "ruft" / "sft.jsonl").read_text().splitlines()]
    assert [row["completion"][0]["content"] for row in sft] == [f"<think>{REASONING}</think>\n\n{ANSWER}"]
    assert not (tmp_path / "ruft" / "errors.jsonl").exists() or not (tmp_path / "ruft" / "errors.jsonl").read_text()


def test_the_rurl_reward_reads_trls_parsed_completions_right():
    """A response template makes TRL parse completions: an empty reasoning leaves no trace (the content alone, as
    if the template-opened reasoning never closed), so `rurl train` hands the reward `decode` and it reads the
    completion ids as TRL decodes unparsed ones; a parsed reasoning without content never closed."""
    prompts = [[{"role": "user", "content": "Headache?"}]] * 3
    parsed_closed_empty = [{"role": "assistant", "content": ANSWER}]  # from "</think>\n\n" + ANSWER
    parsed_unclosed = [{"role": "assistant", "content": "", "reasoning_content": REASONING}]
    parsed_gpt_oss = [{"role": "assistant", "content": "", "thinking": REASONING}]
    metrics = {}
    with FaultServer(reply=judge) as server:

        async def go(completions, **options):
            async with LLMClient({"judge": Role(base_url=server.base_url, model="judge")}) as client:
                grader = Grader(client, GradingConfig(reasoning_starts_open=True))
                return await rubric_reward(
                    prompts[: len(completions)],
                    completions,
                    [RUBRIC_ITEMS] * len(completions),
                    grader=grader,
                    log_metric=metrics.__setitem__,
                    **options,
                )

        raw = {(1, 2): f"</think>\n\n{ANSWER}"}
        decoded = run(
            go([parsed_closed_empty], completion_ids=[[1, 2]], decode=lambda ids: [raw[tuple(i)] for i in ids])
        )
        assert decoded == [0.5]  # the answer, judged
        calls = server.count
        assert run(go([parsed_unclosed, parsed_gpt_oss])) == [0.0, 0.0]
        assert server.count == calls and metrics["rubric/no_answer_rate"] == 1.0  # no answer, no judge call
