"""`rubricrl report` on output folders written here exactly as the commands write them (graded records from
grading's own Graded.to_record, reports from grading.report.build_report, config.yaml from rubricrl.config): what a
user reads on the page and in the markdown summary, and that nothing a model wrote can get into the page as markup.
No model, no judge, no training."""

import json
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from commands.main import main
from grading.cli import EvalArgs
from grading.grader import Graded, GradingConfig
from grading.judge import Verdict
from grading.report import build_report
from grading.rubric import Criterion
from grading.scores import explicit_score
from reports.html import TEMPLATE
from rubricrl.config import resolved, write_resolved
from rubricrl.llm import LLMSettings
from rubricrl.runs.jsonl import write_jsonl

JUDGE = {
    "judge_model": "judge-model-x",
    "mode": "per_criterion",
    "samples": 1,
    "prompt": "grading/judge_criterion.txt",
    "prompt_sha256": "0" * 64,
    "system_sha256": "1" * 64,
    "min_coverage": 0.8,
    "undecided_penalty": "unscored",
}  # as Grader.metadata records it
INJECTION = "<script>alert('pwned')</script><b>bold</b> & <img src=http://evil.example/x.png>"
# (id, prompt, response, [(criterion, points, tags, met, explanation)], example tags)
EXAMPLES = [
    (
        "q1",
        "I have a headache, what should I do?",
        "Drink water and rest.",
        [
            ("Advises hydration.", 7, ["axis:accuracy"], True, "EXPL-q1-a: says to drink water"),
            ("Mentions when to see a doctor.", 5, ["axis:completeness"], False, "EXPL-q1-b: no doctor mentioned"),
            ("Recommends rest.", 10, ["axis:accuracy"], True, "EXPL-q1-c: says rest"),
            ("Prescribes a specific drug dose.", -6, ["axis:accuracy"], True, "EXPL-q1-d: <i>names</i> a dose"),
        ],
        ["theme:health"],
    ),  # 11 / 22 = 0.5, the HealthBench check
    (
        "q2",
        "Write me a web page.",
        INJECTION,
        [
            ("Answers the question.", 5, ["axis:completeness"], True, "EXPL-q2-a: it answered"),
            ("Is polite.", 3, ["axis:communication"], None, "judge failed: no verdict"),
        ],
        ["theme:coding"],
    ),  # 5 / 5 over the decided criteria, coverage 1/2 < 0.8: unscored
    ("q3", "What is 2 + 2?", "4", [("Says 4.", 5, ["axis:accuracy"], True, "EXPL-q3-a: correct")], ["theme:math"]),
]


# --- fixtures: folders as the commands write them -------------------------------------------------------------------


def graded_record(row_id: str, response: str, verdicts: list, example_tags: list, **fields) -> dict:
    criteria = [Criterion(text, points, tuple(tags)) for text, points, tags, _, _ in verdicts]
    met = [m for _, _, _, m, _ in verdicts]
    score = explicit_score([c.points for c in criteria], met).score
    graded = Graded(
        score=score,
        reward=None if score is None else min(1.0, max(0.0, score)),
        verdicts=[Verdict.of(c, m, e, "judge") for c, (_, _, _, m, e) in zip(criteria, verdicts)],
        judge_failures=sum(m is None for m in met),
    )
    return graded.to_record(example_tags, id=row_id, response=response, **fields)


def write_rubrics(path: Path, examples=EXAMPLES) -> Path:
    """The rubric dataset, HealthBench-style: prompt messages, prompt_id, rubrics with tags, example_tags."""
    write_jsonl(
        path,
        [
            {
                "prompt_id": i,
                "prompt": [{"role": "user", "content": p}],
                "example_tags": t,
                "rubrics": [{"criterion": c, "points": n, "tags": g} for c, n, g, _, _ in v],
            }
            for i, p, _, v, t in examples
        ],
    )
    return path


def make_eval(folder: Path, examples=EXAMPLES) -> dict:
    """An eval folder as `rubricrl eval` writes it: config.yaml, graded.jsonl, report.json; returns the report."""
    folder.mkdir(parents=True)
    rubrics = write_rubrics(folder.parent / f"{folder.name}-rubrics.jsonl", examples)
    settings = [EvalArgs(output_dir=folder, rubrics=rubrics, policy="policy-model-y"), GradingConfig(), LLMSettings()]
    write_resolved(folder / "config.yaml", resolved(settings))
    records = [graded_record(i, r, v, t, judge=JUDGE) for i, _, r, v, t in examples]
    write_jsonl(folder / "graded.jsonl", records)
    report = build_report(records)
    (folder / "report.json").write_text(json.dumps(report, indent=2))
    return report


def make_rurl(folder: Path, with_log_history: bool = True) -> list[dict]:
    """A RuRL run folder as `rurl train` writes it: config.yaml, eval.jsonl, log_history.json (or only a checkpoint's
    trainer_state.json), completions/*.parquet (TRL's completion log), manifest.json. Returns the log history."""
    folder.mkdir(parents=True)
    config = {
        "rubrics": "data.jsonl",
        "rurl": {"eval_every": 1, "dynamic_sampling": False},
        "grading": {"mode": "per_criterion", "judge_role": "judge"},
        "llm": {"roles": {"judge": {"model": "j"}}},
        "model_name_or_path": "tiny-policy",
        "use_peft": True,
        "num_generations": 4,
        "learning_rate": 1e-5,
        "loss_type": "dapo",
        "max_steps": 2,
    }
    write_resolved(folder / "config.yaml", config)
    evals = []
    for step, responses in ((1, ["Drink water.", "x", "4"]), (2, ["Drink water and rest.", "y", "4"])):
        records = [graded_record(i, r, v, t) for (i, _, _, v, t), r in zip(EXAMPLES, responses)]
        evals.append({"step": step, **build_report(records)})
    (folder / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    history = [
        {
            "loss": 0.1,
            "reward": 0.25,
            "reward_std": 0.1,
            "rubric/criteria_pass_rate": 0.4,
            "rubric/judge_failure_rate": 0.05,
            "rubric/completion_length": 40.0,
            "rubric/length_reward_corr": 0.3,
            "rubric/tag/axis:accuracy": 0.5,
            "step": 1,
        },
        {
            "loss": 0.05,
            "reward": 0.625,
            "reward_std": 0.2,
            "rubric/criteria_pass_rate": 0.7,
            "rubric/judge_failure_rate": 0.0,
            "rubric/completion_length": 30.0,
            "rubric/length_reward_corr": -0.2,
            "rubric/tag/axis:accuracy": 0.8,
            **{f"eval/{k}": v for k, v in evals[1]["metrics"].items()},
            "step": 2,
        },
    ]
    if with_log_history:
        (folder / "log_history.json").write_text(json.dumps(history, indent=1))
    else:
        (folder / "checkpoint-2").mkdir()
        state = {"global_step": 2, "log_history": history}
        (folder / "checkpoint-2" / "trainer_state.json").write_text(json.dumps(state))
    (folder / "completions").mkdir()
    messages = [[{"role": "user", "content": "Tell me about bees."}]] * 2
    pq.write_table(
        pa.table(
            {
                "step": [2, 2],
                "prompt": messages,
                "completion": [
                    [{"role": "assistant", "content": "Bees make honey."}],
                    [{"role": "assistant", "content": INJECTION}],
                ],
                "rubric_reward": [1.0, -0.25],
                "rubric_flag": ["", ""],
                "rubric_verdicts": [
                    json.dumps([["States a fact about bees.", 5, True]]),
                    json.dumps([["States a fact about bees.", 5, False], ["Is rude.", -2, True]]),
                ],
                "advantage": [0.5, -0.5],
            }
        ),
        folder / "completions" / "completions_00002.parquet",
    )
    summary = {
        "steps": 2,
        "steps_this_run": 2,
        "seconds": 3.5,
        "reward_first": 0.25,
        "reward_last": 0.625,
        "judge": {
            "completions": 8,
            "unscored": 0,
            "verdicts": 24,
            "failed_verdicts": 1,
            "judge_calls": 24,
            "seconds": 1.0,
        },
        "dynamic_sampling_logged": None,
        "eval": None,
        "stopped": None,
    }
    if with_log_history:  # a run that ended; without: killed before the manifest
        (folder / "manifest.json").write_text(
            json.dumps(
                {
                    "command": "rurl train",
                    "config": config,
                    "summary": summary,
                    "data": {"source": "data.jsonl", "train_rows": 6, "eval_rows": 3, "judge": JUDGE},
                }
            )
        )
    return history


def make_build(folder: Path) -> None:
    """A RuFT build folder as `ruft build` writes it: candidates.jsonl, queries.jsonl, config.yaml, manifest.json.
    q1 keeps its candidate 1 (score 1.0 >= tau 0.6); q3's candidates score 0.0 and 0.5: below tau."""
    folder.mkdir(parents=True)
    rubrics = write_rubrics(folder.parent / "build-rubrics.jsonl")
    config = {
        "rubrics": str(rubrics),
        "output_dir": str(folder),
        "limit": None,
        "rar_pitfalls": "auto",
        "ruft": {"candidates": {"policy": 2}, "threshold": 0.6, "keep": 1, "keep_truncated": False},
        "grading": {
            "mode": "per_criterion",
            "judge_role": "judge",
            "min_coverage": 0.8,
            "undecided_penalty": "unscored",
        },
    }
    write_resolved(folder / "config.yaml", config)
    crit_q1 = [("Advises hydration.", 5, ["axis:accuracy"]), ("Recommends rest.", 5, ["axis:completeness"])]
    crit_q3 = [("Says 4.", 4, ["axis:accuracy"]), ("Shows the sum.", 4, ["axis:completeness"])]
    candidates = [
        ("q1", 0, "Drink water.", [True, False], False, "stop"),
        ("q1", 1, "Drink water and rest.", [True, True], True, "stop"),
        ("q3", 0, "five", [False, False], False, "stop"),
        ("q3", 1, "It is 4, I think, maybe, well..." * 3, [True, False], False, "length"),
    ]
    lines = []
    for row_id, index, text, met, kept, finish in candidates:
        criteria = crit_q1 if row_id == "q1" else crit_q3
        verdicts = [(c, p, t, m, f"EXPL-{row_id}-{index}-{j}") for j, ((c, p, t), m) in enumerate(zip(criteria, met))]
        lines.append(
            graded_record(
                row_id,
                text,
                verdicts,
                [],
                candidate=index,
                role="policy",
                model="cand-model",
                finish_reason=finish,
                length=len(text),
                kept=kept,
            )
        )
    write_jsonl(folder / "candidates.jsonl", lines)
    write_jsonl(
        folder / "queries.jsonl",
        [
            {"id": "q1", "k": 2, "scored": 2, "flagged": 0, "truncated": 0, "kept": [1], "best_score": 1.0},
            {"id": "q3", "k": 2, "scored": 2, "flagged": 0, "truncated": 1, "kept": [], "best_score": 0.5},
        ],
    )
    (folder / "manifest.json").write_text(
        json.dumps(
            {
                "command": "ruft build",
                "rubrics": str(rubrics),
                "config": config,
                "judge": JUDGE,
                "seconds": 12.5,
                "roles": {"policy": {"model": "cand-model"}, "judge": {"model": "judge-model-x"}},
                "counts": {
                    "queries": 2,
                    "finished_queries": 2,
                    "queries_kept": 1,
                    "queries_below_threshold": 1,
                    "candidates": 4,
                    "judge_failure_rate": 0.0,
                    "failed": {},
                },
            }
        )
    )


def make_sft(folder: Path) -> None:
    """An SFT run folder as `ruft train` writes it: config.yaml (flat: ours and TRL's), README.md, checkpoints."""
    folder.mkdir(parents=True)
    write_resolved(
        folder / "config.yaml",
        {
            "dataset": "runs/ruft",
            "merge_adapter": True,
            "output_dir": str(folder),
            "learning_rate": 2e-4,
            "num_train_epochs": 1.0,
            "max_steps": 3,
            "model_name_or_path": "base-model",
            "use_peft": False,
        },
    )
    (folder / "README.md").write_text("# model card\n")
    for step in (2, 3):
        (folder / f"checkpoint-{step}").mkdir()
        history = [{"loss": 2.5 - 0.5 * s, "learning_rate": 1e-4, "step": s} for s in range(1, step + 1)]
        (folder / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"log_history": history}))


# --- reading the page -----------------------------------------------------------------------------------------------


class Page(HTMLParser):
    """The parts of a page the tests read: tables (rows of cell texts), tags with their attributes, the headings."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self.tags: list[tuple[str, dict]] = []
        self.headings: list[str] = []
        self.open: list[str] = []
        self._cell: list[str] | None = None
        self._heading: list[str] | None = None
        self._stack: list[list[list[str]]] = []
        self.feed(text)
        self.close()
        assert not self.open, f"unclosed tags: {self.open}"

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in ("meta", "img", "input", "br", "link"):
            self.open.append(tag)
        if tag == "table":
            self._stack.append([])
        elif tag == "tr":
            self._stack[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag in ("h2", "h3"):
            self._heading = []

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1] if self.open else None}>"
        self.open.pop()
        if tag == "table":
            self.tables.append(self._stack.pop())
        elif tag in ("td", "th"):
            self._stack[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag in ("h2", "h3"):
            self.headings.append(" ".join("".join(self._heading).split()))
            self._heading = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._heading is not None:
            self._heading.append(data)

    def rows(self, first_cell: str) -> list[list[str]]:
        return [row for table in self.tables for row in table if row and row[0] == first_cell]

    def table_with(self, header: list[str]) -> list[list[str]]:
        return next(t for t in self.tables if t and t[0][: len(header)] == header)


def report(argv: list) -> int:
    """`rubricrl report ARGV...` through the real entry point; its exit code."""
    return main(["report", *map(str, argv)])


# --- tests ----------------------------------------------------------------------------------------------------------


def test_eval_page_shows_overall_score_with_its_bootstrap_std_then_axes_then_themes(tmp_path):
    expected = make_eval(tmp_path / "eval")
    assert report([tmp_path / "eval"]) == 0
    page = Page((tmp_path / "eval" / "report.html").read_text())
    table = page.table_with(["metric", "score", "± bootstrap std", "n"])
    metrics = expected["metrics"]
    overall = [r for r in table if r[0] == "overall_score"]
    assert overall == [
        [
            "overall_score",
            f"{metrics['overall_score']:.3f}",
            f"{metrics['overall_score:bootstrap_std']:.3f}",
            str(metrics["overall_score:n_samples"]),
        ]
    ]
    assert metrics["overall_score"] == 0.75  # q1 0.5, q3 1.0; q2 unscored (half its criteria undecided)
    names = [r[0] for r in table[1:] if len(r) == 4]
    assert names[0] == "overall_score"
    assert names.index("axis:accuracy") < names.index("theme:health")
    # the heading says what the folder is, and its config: policy, judge, counts
    assert any(h.startswith("eval") for h in page.headings)
    facts = dict(r for r in page.tables[0])
    assert facts["policy"] == "policy-model-y" and facts["judge"].startswith("judge-model-x (per_criterion")
    assert facts["examples"].startswith("3 (1 unscored")


def test_every_criterion_verdict_and_explanation_is_on_the_page(tmp_path):
    make_eval(tmp_path / "eval")
    assert report([tmp_path / "eval"]) == 0
    text = (tmp_path / "eval" / "report.html").read_text()
    page = Page(text)
    for row_id, prompt, _, verdicts, _ in EXAMPLES:
        assert prompt in text  # the prompt, read from the rubric file the config names
        for criterion, points, _tags, met, explanation in verdicts:
            status = "undecided" if met is None else "met" if met else "not met"
            row = [r for r in page.rows(f"{points:+d}") if r[2].startswith(criterion)]
            assert row and row[0][1] == status and row[0][3] == explanation, (row_id, criterion, row)
    # the unscored example says so, the scored ones show their score
    assert "unscored" in text and ">0.500<" in text


def test_a_response_with_markup_is_shown_as_text_never_as_tags(tmp_path):
    make_eval(tmp_path / "eval")
    assert report([tmp_path / "eval"]) == 0
    text = (tmp_path / "eval" / "report.html").read_text()
    page = Page(text)
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt; &amp; &lt;img" in text
    assert [t for t, _ in page.tags].count("script") == 1  # the page's own script only
    assert "b" not in [t for t, _ in page.tags] and "i" not in [t for t, _ in page.tags]
    assert "evil.example" not in "".join(str(a) for t, a in page.tags)
    assert "<i>names</i>" not in text and "&lt;i&gt;names&lt;/i&gt;" in text  # judge explanations too


def test_charts_are_embedded_and_nothing_is_loaded_from_elsewhere(tmp_path):
    make_eval(tmp_path / "eval")
    assert report([tmp_path / "eval"]) == 0
    page = Page((tmp_path / "eval" / "report.html").read_text())
    images = [a for t, a in page.tags if t == "img"]
    titles = [a["alt"] for a in images]
    assert "axes: score ± bootstrap std" in titles and "themes: score ± bootstrap std" in titles
    assert any(t.startswith("score per example") for t in titles)
    assert all(a["src"].startswith("data:image/png;base64,") and len(a["src"]) > 1000 for a in images)
    for tag, attrs in page.tags:
        assert "src" not in attrs or attrs["src"].startswith("data:"), (tag, attrs)
        assert "href" not in attrs or attrs["href"].startswith("#"), (tag, attrs)


def test_markdown_summary_holds_the_same_numbers(tmp_path):
    expected = make_eval(tmp_path / "eval")
    assert report([tmp_path / "eval", "--output", tmp_path / "out" / "page.html"]) == 0
    markdown = (tmp_path / "out" / "page.md").read_text()
    page = Page((tmp_path / "out" / "page.html").read_text())
    m = expected["metrics"]
    assert (
        f"| overall_score | {m['overall_score']:.3f} | {m['overall_score:bootstrap_std']:.3f} | "
        f"{m['overall_score:n_samples']} |"
    ) in markdown
    for row in page.table_with(["metric", "score", "± bootstrap std", "n"])[1:]:
        if len(row) == 4:
            assert f"| {' | '.join(row)} |" in markdown
    assert "judge-model-x" in markdown and "page.html" in markdown
    assert not (tmp_path / "eval" / "report.html").exists()  # --output wins


def test_comparison_has_one_column_per_folder(tmp_path):
    first = make_eval(tmp_path / "a" / "eval")
    other = [
        (i, p, "x", [(c, n, g, not m if m is not None else True, e) for c, n, g, m, e in v], t)
        for i, p, _, v, t in EXAMPLES
    ]  # the opposite verdicts
    second = make_eval(tmp_path / "b" / "eval", other)
    make_build(tmp_path / "build")
    dirs = [tmp_path / "a" / "eval", tmp_path / "b" / "eval", tmp_path / "build"]
    out = tmp_path / "compare.html"
    assert report([*dirs, "--output", out]) == 0
    page = Page(out.read_text())
    header = page.tables[0][0]
    assert header == ["", "a/eval", "b/eval", "build"]  # two folders named eval: their parents tell them apart
    overall = page.tables[0][[r[0] for r in page.tables[0]].index("overall_score")]
    assert len(overall) == len(dirs) + 1
    for report_, cell in zip((first, second), overall[1:3]):
        m = report_["metrics"]
        std, n = m["overall_score:bootstrap_std"], m["overall_score:n_samples"]
        assert cell == f"{m['overall_score']:.3f} ± {std:.3f} (n {n})"
    titles = [a["alt"] for t, a in page.tags if t == "img"]
    assert "overall: score ± bootstrap std, one bar per folder" in titles
    assert "axes: score ± bootstrap std, one bar per folder" in titles
    markdown = (tmp_path / "compare.md").read_text()
    assert "|  | a/eval | b/eval | build |" in markdown and f"| {' | '.join(overall)} |" in markdown
    # labels given on the command line name the columns
    assert report([*dirs, "--output", out, "--labels", "base", "rl", "sft-data"]) == 0
    assert Page(out.read_text()).tables[0][0] == ["", "base", "rl", "sft-data"]


def twelve_rows(met_second: bool) -> list:
    """12 examples of two positive criteria, the first met, the second as given."""
    verdicts = [("Is right.", 5, [], True, "e"), ("Is kind.", 5, [], met_second, "e")]
    return [(f"q{i}", f"Question {i}?", f"Answer {i}.", verdicts, []) for i in range(12)]


def test_a_comparison_says_when_the_judge_cannot_tell_the_models_apart_and_which_differences_are_ties(tmp_path):
    """Three evals of the same 12 rows. "base" and "same" get every positive criterion credited (the judge pays
    anything): the comparison says first that the judge cannot tell them apart, and same-vs-base is a tie. "worse"
    misses one criterion of two on every row: its paired difference (-0.5 on each row) is outside the noise."""

    make_eval(tmp_path / "base", twelve_rows(True))
    make_eval(tmp_path / "same", twelve_rows(True))
    make_eval(tmp_path / "worse", twelve_rows(False))
    out = tmp_path / "compare.html"
    assert report([tmp_path / "base", tmp_path / "same", "--output", out]) == 0
    markdown = (tmp_path / "compare.md").read_text()
    comparison = markdown.split("## Comparison")[1]
    assert comparison.lstrip().startswith("**The judge cannot tell these models apart")
    assert "base 100% of 24, same 100% of 24" in comparison
    assert (
        "same against base: +0.000 (95% interval +0.000 to +0.000, sign-flip p = 1.000, 12 paired examples): "
        "a tie within the noise" in comparison
    )
    assert "The judge cannot tell these models apart" in out.read_text()
    assert report([tmp_path / "base", tmp_path / "worse", "--output", out]) == 0
    comparison = (tmp_path / "compare.md").read_text().split("## Comparison")[1]
    assert "cannot tell" not in comparison and "worse against base: -0.500" in comparison and "): worse." in comparison


def test_a_comparison_says_first_when_the_judges_probes_flag_it(tmp_path, monkeypatch):
    """A real `rubricrl probe` of the twelve rows' rubrics in the same report: a judge that credits every criterion
    whatever the answer is flagged by its probes, and the comparison says so first, with the counts; a judge that
    credits nothing to the probes is not, and the comparison says only what the verdicts show."""
    from tests.fault_server import FaultServer

    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))
    rubrics = tmp_path / "rubrics.jsonl"
    criteria = [{"criterion": "Says the answer is right.", "points": 5}, {"criterion": "Is kind.", "points": 5}]
    rows = [{"id": f"q{i}", "question": f"Question {i}?", "rubrics": criteria} for i in range(12)]
    rubrics.write_text("".join(json.dumps(row) + "\n" for row in rows))
    make_eval(tmp_path / "base", twelve_rows(True))
    make_eval(tmp_path / "worse", twelve_rows(False))

    def probed(credits: bool) -> str:
        folder = tmp_path / f"probe-{credits}"
        verdict = json.dumps({"explanation": "scripted", "criteria_met": credits})
        with FaultServer(reply=lambda body: verdict if body.get("response_format") else "x") as judge:
            argv = ["probe", "--rubrics", str(rubrics), "--output-dir", str(folder), "--no-cache"]
            assert main([*argv, "--base-url", judge.base_url, "--model", "judge"]) == 0
        out = tmp_path / "compare.html"
        assert report([tmp_path / "base", tmp_path / "worse", folder, "--output", out]) == 0
        return (tmp_path / "compare.md").read_text().split("## Comparison")[1]

    flagged = probed(True)
    assert flagged.lstrip().startswith("**The judge cannot tell these models apart reliably: in its probes, answers")
    assert "in probe-True: 24 of 24 positive criteria, by parrot 24" in flagged and "Benjamini-Hochberg" in flagged
    assert "worse against base: -0.500" in flagged  # the verdicts' own comparison follows
    clean = probed(False)
    assert "cannot tell" not in clean and "worse against base: -0.500" in clean


def test_the_chains_table_marks_ties_and_says_when_the_judge_cannot_tell(tmp_path):
    """experiments/rubrichub_chain.py's table (the demo's too): each model against the first, a tie when the paired
    interval holds 0; the judge's saturation said above the table."""
    from experiments.rubrichub_chain import comparison_table

    def table(met: dict[str, bool]) -> str:
        reports = {name: make_eval(tmp_path / str(len(met)) / name, twelve_rows(m)) for name, m in met.items()}
        return comparison_table(reports, tmp_path / str(len(met)))

    saturated = table({"base": True, "ruft": True})
    assert saturated.startswith("The judge cannot tell these models apart") and "| +0.000, tie |" in saturated
    apart = table({"base": True, "ruft": True, "ruft+rurl": False})
    assert "cannot tell" not in apart and "| ruft+rurl | 0.500 ± 0.000 | -0.500, apart |" in apart


def test_rurl_run_shows_reward_and_eval_curves_rubric_metrics_and_completions(tmp_path):
    history = make_rurl(tmp_path / "run")
    assert report([tmp_path / "run"]) == 0
    text = (tmp_path / "run" / "report.html").read_text()
    page = Page(text)
    titles = [a["alt"] for t, a in page.tags if t == "img"]
    for title in (
        "reward (± std over the batch) and eval overall score (± bootstrap std)",
        "eval score per axis",
        "rubric rates per step",
        "criteria pass rate per tag / category",
        "mean completion length (tokens)",
        "correlation of reward with completion length",
        "loss",
    ):
        assert title in titles
    training = page.table_with(["series", "steps", "first", "last", "min", "max"])
    assert ["reward", "2", "0.250", "0.625", "0.250", "0.625"] in training
    assert ["rubric/length_reward_corr", "2", "0.300", "-0.200", "-0.200", "0.300"] in training
    assert ["rubric/criteria_pass_rate", "2", "0.400", "0.700", "0.400", "0.700"] in training
    metrics = page.table_with(["metric", "eval, step 1", "eval, step 2"])
    last = history[-1]["eval/overall_score"]
    assert metrics[1][0] == "overall_score" and metrics[1][2].startswith(f"{last:.3f} ± ")
    facts = dict(r for r in page.tables[0])
    assert facts["status"] == "finished (manifest.json)" and facts["model"] == "tiny-policy (LoRA, merged)"
    assert "dapo" in facts["method"] and facts["judge"].startswith("judge-model-x")
    # the completions TRL logged, with their verdicts, escaped
    assert "Bees make honey." in text and INJECTION not in text
    assert [r for r in page.rows("-2") if r[2].startswith("Is rude.")] == [["-2", "met", "Is rude.", ""]]


def test_rurl_run_shows_the_monitor_beside_the_judge_and_the_criteria_that_moved_most(tmp_path):
    history = make_rurl(tmp_path / "run")
    for step, entry in enumerate(e for e in history if "eval/overall_score" in e):
        entry["monitor/overall_score"], entry["monitor/gap"] = 0.6 - 0.2 * step, entry["eval/overall_score"] - 0.6
        entry["monitor/overclaim"], entry["monitor/underclaim"] = 0.1 * step, 0.0
    (tmp_path / "run" / "log_history.json").write_text(json.dumps(history))
    rows = [
        {"criterion": "Flatters the grader.", "first_pass_rate": 0.1, "first_decided": 40, "last_pass_rate": 0.9},
        {"criterion": "Wobbles.", "first_pass_rate": 0.5, "first_decided": 40, "last_pass_rate": 0.6},  # chance
        {"criterion": "Seen once.", "first_pass_rate": 0.0, "first_decided": 1, "last_pass_rate": 1.0},
    ]
    criteria = [
        {
            **r,
            "pass_rate": 0.5,
            "met": 10,
            "decided": 40,
            "last_decided": 40,
            "moved": r["last_pass_rate"] - r["first_pass_rate"],
        }
        for r in rows
    ]
    (tmp_path / "run" / "criteria.json").write_text(json.dumps(criteria))
    assert report([tmp_path / "run"]) == 0
    page = Page((tmp_path / "run" / "report.html").read_text())
    titles = [a["alt"] for t, a in page.tags if t == "img"]
    assert any(t.endswith(", the monitor judge's beside it") for t in titles)
    assert any(t.startswith("the training judge against the monitor: criteria it credits") for t in titles)
    moved = page.table_with(["criterion", "first", "last", "moved", "decided"])
    # decided once: not tested; 50% -> 60% of 40: chance (p = 0.37); 10% -> 90%: p = 8.3e-13
    assert [r[0] for r in moved[1:]] == ["Flatters the grader."]
    assert moved[1][1:4] == ["10% of 40", "90% of 40", "+80%"] and moved[1][5].startswith("8.3e-13")
    training = page.table_with(["series", "steps", "first", "last", "min", "max"])
    assert [r[0] for r in training if r[0].startswith("monitor/")] == ["monitor/overall_score", "monitor/gap"]


def test_rurl_run_without_log_history_reads_the_newest_checkpoint(tmp_path):
    make_rurl(tmp_path / "run", with_log_history=False)
    assert report([tmp_path / "run"]) == 0
    page = Page((tmp_path / "run" / "report.html").read_text())
    facts = dict(r for r in page.tables[0])
    assert facts["log history"] == "checkpoint-2/trainer_state.json"
    assert facts["status"].startswith("no manifest.json")
    assert ["reward", "2", "0.250", "0.625", "0.250", "0.625"] in page.table_with(["series", "steps"])


def test_ruft_build_shows_retention_all_vs_kept_and_each_candidate(tmp_path):
    make_build(tmp_path / "build")
    assert report([tmp_path / "build"]) == 0
    text = (tmp_path / "build" / "report.html").read_text()
    page = Page(text)
    assert page.table_with(["queries", "count", "share"])[1:] == [
        ["finished", "2", "100.0%"],
        ["kept (an answer >= tau)", "1", "50.0%"],
        ["below tau", "1", "50.0%"],
    ]
    metrics = page.table_with(["metric", "all candidates", "kept"])
    assert metrics[1][0] == "overall_score"
    assert metrics[1][1].endswith("(n 4)") and metrics[1][2] == "1.000 ± 0.000 (n 1)"
    titles = [a["alt"] for t, a in page.tags if t == "img"]
    assert "candidate scores: all vs kept" in titles
    assert "score vs length (a verbosity bias shows as a rising cloud)" in titles
    assert any(t.startswith("retention: 1 of 2 queries kept") for t in titles)
    for row_id, index in (("q1", 0), ("q1", 1), ("q3", 0), ("q3", 1)):
        assert f"EXPL-{row_id}-{index}-0" in text
    assert text.count('<span class="tag">kept</span>') == 1 and text.count('<span class="tag">not kept</span>') == 3
    facts = dict(r for r in page.tables[0])
    assert facts["selection"].startswith("K = 2, tau = 0.6") and facts["candidates"] == "policy x2 (cand-model)"
    assert "I have a headache" in text  # the prompt, from the rubric file


def test_sft_run_shows_its_loss_curve(tmp_path):
    make_sft(tmp_path / "sft")
    assert report([tmp_path / "sft"]) == 0
    page = Page((tmp_path / "sft" / "report.html").read_text())
    assert ["loss", "3", "2.000", "1.000", "1.000", "2.000"] in page.table_with(["series", "steps"])
    assert "loss" in [a["alt"] for t, a in page.tags if t == "img"]
    facts = dict(r for r in page.tables[0])
    assert facts["model"] == "base-model" and facts["log history"] == "checkpoint-3/trainer_state.json"


def test_max_examples_limits_the_list_and_says_how_many(tmp_path):
    make_eval(tmp_path / "eval")
    assert report([tmp_path / "eval", "--max_examples", "1"]) == 0
    text = (tmp_path / "eval" / "report.html").read_text()
    assert text.count('<details class="example"') == 1 and "1 of 3 examples" in text
    assert "EXPL-q3-a" not in text


def test_an_unknown_folder_is_one_line_and_exit_code_2(tmp_path, capsys):
    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "notes.txt").write_text("hello")
    assert report([tmp_path / "stuff"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path / "stuff") in err
    assert "report.json" in err and "candidates.jsonl" in err and "log_history.json" in err
    assert report([tmp_path / "missing"]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert not (tmp_path / "stuff" / "report.html").exists()


def test_without_matplotlib_the_page_has_its_tables_and_says_why_no_charts(tmp_path, monkeypatch):
    from reports import charts

    make_eval(tmp_path / "eval")
    monkeypatch.setattr(charts, "available", lambda: False)
    assert report([tmp_path / "eval"]) == 0
    text = (tmp_path / "eval" / "report.html").read_text()
    assert "<img" not in text and "matplotlib is not installed" in text and "overall_score" in text


def test_the_template_has_exactly_the_placeholders_the_page_fills():
    assert TEMPLATE.placeholders == {"title", "subtitle", "contents", "body"}


def test_a_build_still_being_written_is_read_as_far_as_it_goes_and_left_untouched(tmp_path):
    make_build(tmp_path / "build")
    (tmp_path / "build" / "manifest.json").unlink()  # written last: the build has not finished
    candidates = tmp_path / "build" / "candidates.jsonl"
    with open(candidates, "ab") as f:
        f.write(b'{"id": "q9", "candidate": 0, "respo')  # the line a running build is writing
    before = candidates.read_bytes()
    assert report([tmp_path / "build", "--output", tmp_path / "page.html"]) == 0
    assert candidates.read_bytes() == before
    text = (tmp_path / "page.html").read_text()
    facts = dict(r for r in Page(text).tables[0])
    assert facts["status"].startswith("no manifest.json") and facts["candidate counts"].startswith("4 candidates")
    assert "candidates.jsonl: line 5 is incomplete (still being written, or cut off): left out" in text


def test_a_bad_line_inside_a_file_is_one_line_naming_file_and_line(tmp_path, capsys):
    make_build(tmp_path / "build")
    candidates = tmp_path / "build" / "candidates.jsonl"
    lines = candidates.read_text().splitlines(keepends=True)
    candidates.write_text(lines[0] + "not json\n" + "".join(lines[1:]))
    assert report([tmp_path / "build"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{candidates}: line 2: not a JSON object" in err


def test_the_page_fits_a_narrow_window_and_its_controls_wait_for_the_script(tmp_path):
    """What a browser showed (chromium, 1280px and 420px wide, with and without JavaScript, and printed): every table
    sits in a box that scrolls sideways rather than widening the page; the filter/sort/open controls, which need
    JavaScript, are hidden until the page's script shows them; each chart's title is its caption, above it."""
    make_build(tmp_path / "build")
    make_eval(tmp_path / "eval")
    assert report([tmp_path / "eval", tmp_path / "build", "--output", tmp_path / "page.html"]) == 0
    text = (tmp_path / "page.html").read_text()
    page = Page(text)
    assert text.count("<table") == text.count('<div class="wide"><table') + text.count('<table class="verdicts">')
    tools = [a for t, a in page.tags if t == "div" and a.get("class") == "tools"]
    assert len(tools) == 2 and all("hidden" in a for a in tools)
    assert "tools.hidden = false;" in text
    assert [t for t, _ in page.tags].count("thead") == text.count('<table class="verdicts">') > 0
    assert text.count("<figure><figcaption>") == text.count("<figure>") > 0


def test_rurl_run_shows_each_eval_and_every_held_out_answer_with_its_earlier_ones(tmp_path):
    """eval_answers.jsonl as rurl/watch/evaluate.py writes it (graded records plus `step`, one per held-out row per eval):
    one row per eval in an Evals table, each held-out row's last answer with its prompt, verdicts and explanations,
    its answer at the earlier eval inside it; a step evaluated again after a resume counts once, the last time."""
    make_rurl(tmp_path / "run")
    write_rubrics(tmp_path / "data.jsonl")  # the rubric file the run's config names, for the prompts
    answers, evals = [], []
    for step, responses in (
        (1, ["Drink water.", "x", "4"]),
        (2, ["Drink water and rest.", INJECTION, "four"]),
        (2, ["Drink water, rest, see a doctor if it lasts.", INJECTION, "4"]),
    ):
        records = [graded_record(i, r, v, t) for (i, _, _, v, t), r in zip(EXAMPLES, responses)]
        answers += [{"step": step, **r} for r in records]
        evals.append({"step": step, **build_report(records)})
    write_jsonl(tmp_path / "run" / "eval_answers.jsonl", answers)
    (tmp_path / "run" / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    assert report([tmp_path / "run"]) == 0
    text = (tmp_path / "run" / "report.html").read_text()
    page = Page(text)
    steps = page.table_with(["step", "overall_score", "± bootstrap std", "examples", "unscored"])
    first, last = (f"{e['metrics']['overall_score']:.3f}" for e in (evals[0], evals[2]))
    assert [row[:2] for row in steps[1:]] == [["1", first], ["2", last]]
    assert "Drink water, rest, see a doctor if it lasts." in text and "Drink water and rest." not in text
    assert "I have a headache, what should I do?" in text  # the prompt, from the rubric file
    assert "EXPL-q1-b: no doctor mentioned" in text and INJECTION not in text
    assert text.count("Earlier evals (latest first) (1)") == 3 and "Drink water.</pre>" in text
    assert "eval step 2" in text and "from eval_answers.jsonl" in text
    assert "Bees make honey." in text  # TRL's completion log still follows the eval answers
    assert "eval score per held-out row, step 2 (n 2)" in [a["alt"] for t, a in page.tags if t == "img"]
    summary = (tmp_path / "run" / "report.md").read_text()
    assert "### Evals" in summary and f"| 2 | {last} |" in summary


def test_a_difference_over_too_few_examples_is_a_tie_not_a_certainty(tmp_path):
    """Two examples that moved apart (0 and +1) are a tie, and the one-sided bootstrap the alarms use is far from
    sure of them. Two that both rose are a tie too: under the comparison's sign-flip test no difference over fewer
    than 6 examples can reach 5% (the most extreme of 2^n sign assignments is 2 / 2^n), so its interval is unbounded
    and the report says so; 6 that all rose are apart."""
    from checks.evidence import paired_bootstrap
    from reports.distinguish import is_tie, paired_difference

    def records(scores):
        return [{"id": f"q{i}", "score": s} for i, s in enumerate(scores)]

    disagree = paired_difference(records([0.5, 0.5]), records([0.5, 1.5]))
    assert disagree["low"] <= 0 <= disagree["high"] and is_tie(disagree)
    assert paired_bootstrap([0.0, 1.0], seed=0) > 0.2
    both = paired_difference(records([0.5, 0.5]), records([0.7, 0.9]))
    assert is_tie(both) and both["p"] == 0.5 and both["low"] == float("-inf") and both["high"] == float("inf")
    six = paired_difference(records([0.5] * 6), records([0.7, 0.9, 0.6, 0.8, 0.7, 0.9]))
    assert not is_tie(six) and six["p"] == 2 / 64 and six["low"] > 0 and "sign-flip" in six["test"]

    def two_rows(met: bool) -> list:
        return [(f"q{i}", f"Question {i}?", "Answer.", [("Is right.", 5, [], met, "e")], []) for i in range(2)]

    make_eval(tmp_path / "base", two_rows(False))
    make_eval(tmp_path / "better", two_rows(True))
    assert report([tmp_path / "base", tmp_path / "better", "--output", tmp_path / "compare.html"]) == 0
    comparison = (tmp_path / "compare.md").read_text().split("## Comparison")[1]
    assert (
        "better against base: +1.000 (95% interval unbounded (too few examples to tell any difference apart), "
        "sign-flip p = 0.500, 2 paired examples): a tie within the noise." in comparison
    )


def test_a_folder_with_a_criterion_ledger_opens_with_its_headline_and_plot(tmp_path):
    """An eval of several answers per query writes ledger.parquet (grading/ledger.py); the page and the markdown
    open with its headline, before the metrics, and the page draws it."""
    from grading.ledger import Ledger, LedgerAnswer, LedgerCriterion, write_table

    make_eval(tmp_path / "eval")
    rubric = (LedgerCriterion("Always met.", 5), LedgerCriterion("Follows the answer.", 5))
    ledger = Ledger()
    ledger.add([LedgerAnswer("q1", rubric, (1.0, float(i % 2)), "dd") for i in range(4)])
    write_table(ledger.arrow(), tmp_path / "eval" / "ledger.parquet")
    assert report([tmp_path / "eval"]) == 0
    text = (tmp_path / "eval" / "report.html").read_text()
    assert text.index("Criterion ledger") < text.index("<h3>Metrics</h3>")
    assert "50.0% of the judge verdicts in groups (4 of 8)" in text
    assert "no signal over the whole run: 1 criterion, 4 judge verdicts" in text
    page = Page(text)
    assert any(a["alt"].startswith("criterion ledger:") for t, a in page.tags if t == "img")
    markdown = (tmp_path / "eval" / "report.md").read_text()
    assert markdown.index("Criterion ledger") < markdown.index("### Metrics")
    assert "carried most: 1 criterion carried 100.0% of the signal" in markdown
