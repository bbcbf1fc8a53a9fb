"""experiments/compare_rewards.py without a model: the data transformations (uniform weights, the predefined generic
rubric, rurl's seeded split), and the results table built from fake report.json / manifest.json / run.json files."""

import json
from pathlib import Path

import pytest

from experiments import comparison_runs
from grading.dataset import load_rubric_rows
from rurl.config import RurlConfig
from rurl.data import load_rurl_data, split_rows

ROOT = Path(__file__).resolve().parents[1]
TINY_DATA = ROOT / "experiments" / "data" / "rurl_tiny.jsonl"


@pytest.fixture(scope="module")
def compare():
    from experiments import compare_rewards

    return compare_rewards


ROW = {
    "id": "q1",
    "prompt": [{"role": "user", "content": "Hi?"}],
    "reference_answer": "Hello.",
    "example_tags": ["theme:x"],
    "rubrics": [
        {"criterion": "Greets back.", "points": 7, "tags": ["axis:accuracy"], "category": "Essential", "rule": None},
        {
            "criterion": "At most 5 words.",
            "points": 3,
            "tags": [],
            "category": None,
            "rule": {"type": "max_words", "value": 5},
        },
        {"criterion": "Is rude.", "points": -6, "tags": ["axis:safety"], "category": "Pitfall", "rule": None},
    ],
}


def test_uniform_weights_sets_positive_points_to_1_and_penalties_to_minus_1(compare):
    uniform = compare.uniform_weights(ROW)
    assert [c["points"] for c in uniform["rubrics"]] == [1, 1, -1]
    for before, after in zip(ROW["rubrics"], uniform["rubrics"]):  # all but the points kept
        assert {k: v for k, v in before.items() if k != "points"} == {k: v for k, v in after.items() if k != "points"}
    assert {k: v for k, v in uniform.items() if k != "rubrics"} == {k: v for k, v in ROW.items() if k != "rubrics"}
    assert ROW["rubrics"][0]["points"] == 7  # the input is left alone


def test_predefined_rubric_is_the_same_generic_list_for_every_row(compare):
    other = {**ROW, "id": "q2", "rubrics": [{"criterion": "Something else.", "points": 2}]}
    first, second = compare.predefined_rubric(ROW), compare.predefined_rubric(other)
    assert first["rubrics"] == second["rubrics"]
    assert [c["criterion"] for c in first["rubrics"]] == [c["criterion"] for c in compare.GENERIC_RUBRIC]
    assert "The response is factually correct." in [c["criterion"] for c in first["rubrics"]]
    assert first["prompt"] == ROW["prompt"] and first["reference_answer"] == "Hello." and first["id"] == "q1"
    assert all(c["points"] > 0 for c in first["rubrics"])  # phrased so that "met" is good: no penalty


def test_held_out_rows_are_rurls_seeded_split(compare, tmp_path):
    rows = [{"id": str(i)} for i in range(10)]
    train, held = split_rows(rows, 0.3, seed=0)
    assert len(held) == 3 and len(train) == 7 and split_rows(rows, 0.3, seed=0) == (train, held)
    assert {r["id"] for r in train} | {r["id"] for r in held} == {str(i) for i in range(10)}
    assert len(split_rows(rows, 2, seed=0)[1]) == 2 and split_rows(rows, 0.3, seed=1) != (train, held)
    # the comparison holds out what `rurl train` would with the same size and seed
    data = compare.prepare_data(TINY_DATA, tmp_path, 2, 3, None, "auto", [compare.METHODS["likert"]])
    rurl = load_rurl_data(TINY_DATA, RurlConfig(eval_size=2), seed=3)
    assert [r["id"] for r in data["heldout"]] == [r.id for r in rurl.evaluation]
    assert [r["id"] for r in data["train"]] == [r.id for r in rurl.train]
    with pytest.raises(SystemExit, match="--heldout 8: eval_size 8: holds out 8 of 8 rows"):
        compare.prepare_data(TINY_DATA, tmp_path / "all", 8, 0, None, "auto", [compare.METHODS["likert"]])


def test_prepared_files_load_back_with_the_core_reader(compare, tmp_path):
    methods = list(compare.METHODS.values())
    data = compare.prepare_data(TINY_DATA, tmp_path, 2, 0, None, "auto", methods)
    files = data["files"]
    train, held = load_rubric_rows(files["explicit"]), load_rubric_rows(files["heldout"])
    assert len(train) == 6 and len(held) == 2 and not set(train) & set(held)
    uniform, predefined = load_rubric_rows(files["uniform"]), load_rubric_rows(files["predefined"])
    assert set(uniform) == set(predefined) == set(train)
    for row_id, row in uniform.items():
        original = train[row_id].rubric.criteria
        assert [c.points for c in row.rubric.criteria] == [1 if c.points > 0 else -1 for c in original]
        assert [c.rule for c in row.rubric.criteria] == [c.rule for c in original]
        assert predefined[row_id].reference == train[row_id].reference
        assert [c.text for c in predefined[row_id].rubric.criteria] == [c["criterion"] for c in compare.GENERIC_RUBRIC]
    # the same split again is fine; another one into the same folder is refused
    compare.prepare_data(TINY_DATA, tmp_path, 2, 0, None, "auto", methods)
    with pytest.raises(SystemExit, match="another split"):
        compare.prepare_data(TINY_DATA, tmp_path, 2, 1, None, "auto", methods)


def test_reference_likert_needs_a_reference_on_every_training_row(compare, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({**ROW, "id": f"q{i}", "reference_answer": None}) + "\n" for i in range(4)))
    with pytest.raises(SystemExit, match="reference_answer"):
        compare.prepare_data(rows, tmp_path / "out", 1, 0, None, "auto", [compare.METHODS["reference_likert"]])
    compare.prepare_data(rows, tmp_path / "out2", 1, 0, None, "auto", [compare.METHODS["likert"]])


def test_eval_config_grades_per_criterion_with_the_runs_judge(compare):
    settings = {
        "llm": {"base_url": "http://x/v1", "roles": {"judge": {"temperature": 0.0}}},
        "grading": {"mode": "implicit", "judge_role": "judge", "samples": 3, "judge_prompt": "mine.txt"},
    }
    config = compare.eval_config(settings)
    assert config["llm"] == settings["llm"]
    assert config["grading"] == {"mode": "per_criterion", "judge_role": "judge", "samples": 3, "judge_prompt": None}


def _report(overall, std, axes):
    metrics = {"overall_score": overall, "overall_score:bootstrap_std": std, "overall_score:n_samples": 2}
    for name, value in axes.items():
        metrics |= {name: value, f"{name}:bootstrap_std": 0.1, f"{name}:n_samples": 2}
    metrics |= {"theme:tiny": overall, "theme:tiny:bootstrap_std": std, "theme:tiny:n_samples": 2}
    return {"metrics": metrics, "examples": 2, "unscored_examples": 0, "judge_failure_rate": 0.0}


def _write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_results_table_from_fake_reports(compare, tmp_path):
    _write(tmp_path / "eval/base/report.json", _report(0.25, 0.05, {"axis:accuracy": 0.2}))
    _write(tmp_path / "eval/base/run.json", {"method": "base", "generate_s": 3.0, "grade_s": 4.0, "wall_s": 7.0})
    _write(
        tmp_path / "eval/per_criterion/report.json", _report(0.5, 0.1, {"axis:accuracy": 0.4, "axis:completeness": 1.0})
    )
    _write(
        tmp_path / "eval/per_criterion/run.json",
        {"train_code": 0, "train_wall_s": 80.0, "generate_s": 3.0, "grade_s": 5.0, "wall_s": 88.0},
    )
    _write(
        tmp_path / "runs/per_criterion/manifest.json",
        {
            "summary": {
                "steps": 3,
                "reward_first": 0.3,
                "reward_last": 0.6,
                "judge": {"judge_calls": 24},
                "stopped": None,
            }
        },
    )
    _write(tmp_path / "eval/likert/run.json", {"train_code": 2, "train_wall_s": 40.0, "wall_s": 40.0})
    _write(
        tmp_path / "runs/likert/manifest.json",
        {
            "summary": {
                "steps": 1,
                "reward_first": 0.1,
                "reward_last": 0.1,
                "judge": {"judge_calls": 8},
                "stopped": "judge-failure guard: 80% of the completions ... got no score",
            }
        },
    )
    names, trained = ["base", "per_criterion", "likert", "uniform"], {"per_criterion", "likert", "uniform"}
    rows = compare.collect_rows(tmp_path, compare.descriptions(names), trained, compare.PAPER)
    base, explicit, likert, uniform = rows
    assert base["status"] == "ok" and base["overall"] == 0.25 and base["paper"] is None and base["eval_s"] == 7.0
    assert explicit["status"] == "ok" and explicit["overall_std"] == 0.1 and explicit["judge_calls"] == 24
    assert set(explicit["axes"]) == {"axis:accuracy", "axis:completeness"}  # not themes, not n_samples / std
    assert explicit["axes"]["axis:accuracy"] == {"value": 0.4, "std": 0.1, "n": 2}
    assert (explicit["reward_first"], explicit["reward_last"], explicit["train_s"]) == (0.3, 0.6, 80.0)
    assert explicit["paper"] == {"name": "RaR-Explicit", "healthbench": 29.7, "gpqa_diamond": 36.9}
    assert likert["status"] == "stopped at step 1: judge-failure guard" and likert["overall"] is None
    assert likert["paper"]["healthbench"] == 25.5
    assert uniform["status"] == "not evaluated" and uniform["paper"] is None

    meta = {
        "policy": "tiny",
        "source": "rows.jsonl",
        "seed": 0,
        "train_rows": 6,
        "heldout_rows": 2,
        "budget": "3 GRPO steps",
        "judge": "tiny",
        "wall_s": 135.0,
    }
    markdown = compare.results_markdown(rows, meta)
    table = [line for line in markdown.splitlines() if line.startswith("|")]
    assert len(table) == 2 + 4
    assert "axis:accuracy" in table[0] and "axis:completeness" in table[0] and "theme:tiny" not in table[0]
    assert "0.500 ± 0.100" in table[3] and "0.300 → 0.600" in table[3] and "RaR-Explicit: 29.7 / 36.9" in table[3]
    assert "80 s + 8 s" in table[3] and "| 24 |" in table[3] and "eval 7 s" in table[2]
    assert "not comparable in level" in markdown
    assert all(c["criterion"] in markdown for c in compare.GENERIC_RUBRIC)
    assert "stopped at step 1: judge-failure guard" in table[4] and "not evaluated" in table[5]

    reports = compare.read_reports(tmp_path, ["base", "per_criterion", "likert", "uniform"])
    assert list(reports) == ["base", "per_criterion"]  # a bar for each method the yardstick graded
    chart = compare.write_chart(reports, tmp_path / "results.png", "held-out score per training reward")
    assert chart.read_bytes().startswith(b"\x89PNG") and chart.stat().st_size > 1000


def test_each_method_trains_with_its_mode_on_its_rubrics_and_the_shared_budget(compare, tmp_path, monkeypatch):
    calls = []

    def fake_run(argv, launcher=None, env=None):
        calls.append((argv, env))
        return 0

    monkeypatch.setattr(comparison_runs, "run_rubricrl", fake_run)
    args = compare.parse_args(["--output-dir", str(tmp_path), "--max-steps", "2", "--train-args", "--beta 0.1"])
    data = compare.prepare_data(TINY_DATA, tmp_path, 2, 0, None, "auto", list(compare.METHODS.values()))
    files = data["files"]
    heldout, judge = (data["heldout"], files["heldout"]), ["--model", "j"]
    runs = comparison_runs.ComparisonRuns(tmp_path, *heldout, "tiny", 8, judge, "g", args.train_args)
    expected = {"implicit": ("implicit", "explicit"), "predefined": ("per_criterion", "predefined")}
    expected["uniform"] = ("per_criterion", "uniform")
    for name, (mode, rubrics) in expected.items():
        runs.run(name, compare.train_flags(args, name, files), {"mode": mode})
        record = json.loads((tmp_path / "eval" / name / "run.json").read_text())
        assert record["mode"] == mode and record["train_code"] == 0
        assert "eval_code" not in record  # the fake run saved nothing: nothing to evaluate
        argv, env = calls[-1]
        flags = {argv[i]: argv[i + 1] for i in range(2, len(argv) - 1) if argv[i].startswith("--")}
        assert argv[:2] == ["rurl", "train"] and flags["--mode"] == mode
        assert Path(flags["--rubrics"]) == files[rubrics] and files[rubrics].is_file()
        assert flags["--max_steps"] == "2" and flags["--dynamic_sampling"] == "false" and flags["--eval_size"] == "0"
        assert flags["--output_dir"] == str(tmp_path / "runs" / name)
        assert flags["--run_name"] == f"g-{name}" and env == {"WANDB_RUN_GROUP": "g"}
        assert argv[-4:] == ["--model", "j", "--beta", "0.1"]  # the judge's flags, then --train-args: they win
