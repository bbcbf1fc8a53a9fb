"""Shards across machines (`--shard i/n`) and `rubricrl merge`: the split partitions the ids whatever the order,
and the merged folder holds the rows one run would have made, from the cache, every id once."""

import json
import random
import shutil

import pyarrow.parquet as pq
import pytest

from commands.main import main
from rubricrl.config import ConfigError
from rubricrl.runs.shards import Shard, parse_shard, shard_of
from tests.fault_server import FaultServer, schema_reply


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_shards_partition_the_ids_exactly_whatever_the_order():
    ids = [f"q{i}" for i in range(2000)] + ["7", "é-ü", "q-0123456789abcdef"]
    parts = [[i for i in ids if i in Shard(k, 4)] for k in range(4)]
    assert sorted(sum(parts, [])) == sorted(ids)  # every id in exactly one shard
    assert all(420 < len(part) < 600 for part in parts)  # about a quarter each (501 expected)
    shuffled = random.Random(0).sample(ids, len(ids))
    assert [{i for i in shuffled if i in Shard(k, 4)} for k in range(4)] == [set(part) for part in parts]
    assert shard_of("q1", 1) == 0 and parse_shard("3/4") == Shard(3, 4) and parse_shard(None) is None
    for bad in ("4/4", "-1/4", "1/0", "1", "a/b", "1/2/3"):
        with pytest.raises(ConfigError, match=r"expected i/n with 0 <= i < n"):
            parse_shard(bad)


def queries(path, n):
    path.write_text(
        "".join(json.dumps({"id": f"q{i:03d}", "question": f"Question number {i}?"}) + "\n" for i in range(n))
    )
    return path


def synth(server, input_path, out, *extra) -> int:
    return main(
        [
            "synth",
            "--input",
            str(input_path),
            "--output-dir",
            str(out),
            "--base-url",
            server.base_url,
            "--model",
            "fake",
            *extra,
        ]
    )


def rubrics_by_id(folder):
    return {r["id"]: r["rubrics"] for r in pq.read_table(folder / "final.parquet").to_pylist()}


def test_three_shards_merged_are_the_rows_of_one_run(tmp_path, home, capsys):
    input_path = queries(tmp_path / "q.jsonl", 12)
    with FaultServer(reply=schema_reply) as server:
        shards = [tmp_path / f"shard-{k}" for k in range(3)]
        for k, folder in enumerate(shards):
            assert synth(server, input_path, folder, "--shard", f"{k}/3") == 0
        sizes = [pq.read_metadata(folder / "final.parquet").num_rows for folder in shards]
        assert sum(sizes) == 12 and all(sizes)
        assert main(["merge", *map(str, shards), "--output-dir", str(tmp_path / "merged")]) == 0
        sent = server.count
        assert synth(server, input_path, tmp_path / "one") == 0  # the same queries in one run: all from the cache
        assert server.count == sent
    merged, one = tmp_path / "merged", tmp_path / "one"
    assert rubrics_by_id(merged) == rubrics_by_id(one) and len(rubrics_by_id(merged)) == 12
    details = pq.read_table(merged / "final_details.parquet").to_pylist()
    assert sorted(d["id"] for d in details) == sorted(rubrics_by_id(one)) and all(
        d["reference_answer"] for d in details
    )
    manifest = json.loads((merged / "manifest.json").read_text())
    shard_usage = [json.loads((f / "manifest.json").read_text())["usage"]["reference"]["requests"] for f in shards]
    assert manifest["usage"]["reference"]["requests"] == sum(shard_usage) > 0  # usage added up over the shards
    assert [m["shard"] for m in manifest["merged_from"]] == ["0/3", "1/3", "2/3"]
    assert manifest["counts"]["rows_in_final"] == 12 and "shard" not in manifest["config"]
    assert "merged 3 folders" in capsys.readouterr().out
    # the merged folder is an ordinary output folder: the same command resumes into it with nothing to do
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, input_path, merged) == 0 and server.count == 0


def test_the_shards_of_a_limited_run_merge_into_that_run(tmp_path, home):
    input_path = queries(tmp_path / "q.jsonl", 12)
    with FaultServer(reply=schema_reply) as server:
        for k in range(3):
            assert synth(server, input_path, tmp_path / f"s{k}", "--shard", f"{k}/3", "--limit", "5") == 0
        assert synth(server, input_path, tmp_path / "one", "--limit", "5") == 0
    assert main(["merge", *(str(tmp_path / f"s{k}") for k in range(3)), "--output-dir", str(tmp_path / "m")]) == 0
    # --limit takes the first 5 rows of the input, then each shard its ids among them (not 5 per shard)
    first_five = [f"q{i:03d}" for i in range(5)]
    assert sorted(rubrics_by_id(tmp_path / "m")) == sorted(rubrics_by_id(tmp_path / "one")) == first_five


def test_merge_refuses_missing_shards_a_shard_twice_other_settings_and_a_full_output(tmp_path, home, capsys):
    input_path = queries(tmp_path / "q.jsonl", 6)
    with FaultServer(reply=schema_reply) as server:
        for k in range(2):
            assert synth(server, input_path, tmp_path / f"s{k}", "--shard", f"{k}/2") == 0
        assert (
            synth(
                server, input_path, tmp_path / "other", "--shard", "1/2", "--max-criteria", "8", "--min-criteria", "2"
            )
            == 0
        )
    s0, s1, other = (str(tmp_path / name) for name in ("s0", "s1", "other"))
    out = str(tmp_path / "merged")

    def refused(*dirs, output=out) -> str:
        capsys.readouterr()
        assert main(["merge", *dirs, "--output-dir", output]) == 2
        return capsys.readouterr().err.strip()

    assert "shard(s) 1/2 missing" in refused(s0)
    assert "named twice" in refused(s0, s0)
    with FaultServer(reply=schema_reply) as server:  # shard 1 of another input: not the same dataset
        assert synth(server, queries(tmp_path / "q2.jsonl", 5), tmp_path / "elsewhere", "--shard", "1/2") == 0
    assert "made from input" in refused(s0, str(tmp_path / "elsewhere"))
    assert "made with other settings" in refused(s0, other) and "max_criteria 20 -> 8" in refused(s0, other)
    assert "not a finished" in refused(s0, str(tmp_path / "nowhere"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert "is not an empty folder" in refused(s0, s1, output=str(tmp_path / "full"))
    assert not (tmp_path / "merged").exists()  # nothing written by a refused merge
    shutil.copytree(s0, tmp_path / "s0-copy")
    assert f"{tmp_path / 's0-copy'} and {s0}: both are shard 0/2" in refused(s0, str(tmp_path / "s0-copy"))
    with FaultServer(reply=schema_reply) as server:  # two runs of the whole input: every id in both
        for name in ("all", "all-again"):
            assert synth(server, input_path, tmp_path / name) == 0
    whole, again = str(tmp_path / "all"), str(tmp_path / "all-again")
    assert "not the shards of one split" in refused(s0, whole)
    assert f"is in {whole} and in {again}; every id must be in one folder only" in refused(whole, again)
    # A fault found only while merging (a folder edited by hand): the merged folder is not left half written.
    shutil.copytree(s1, tmp_path / "s1-edited")
    (tmp_path / "s1-edited" / "details.jsonl").write_text("")
    assert "no line for id" in refused(s0, str(tmp_path / "s1-edited"))
    assert not (tmp_path / "merged").exists()
    assert main(["merge", s0, s1, "--output", out]) == 0  # --output, as in the issue, names the folder too
    assert len(rubrics_by_id(tmp_path / "merged")) == 6


def test_ruft_build_shards_merge_into_one_sft_dataset(tmp_path, home):
    import datasets

    from tests.test_ruft_build import Script, rubrics

    rows = rubrics(tmp_path / "rubrics.jsonl", n=6)
    with FaultServer(reply=Script()) as server:
        for k in range(2):
            assert (
                main(
                    [
                        "ruft",
                        "build",
                        "--rubrics",
                        str(rows),
                        "--output-dir",
                        str(tmp_path / f"b{k}"),
                        "--base-url",
                        server.base_url,
                        "--model",
                        "fake",
                        "--threshold",
                        "0.5",
                        "--candidates",
                        "policy=4",
                        "--self_judging",
                        "--shard",
                        f"{k}/2",
                    ]
                )
                == 0
            )
    assert main(["merge", str(tmp_path / "b0"), str(tmp_path / "b1"), "--output-dir", str(tmp_path / "m")]) == 0
    sft = datasets.load_from_disk(str(tmp_path / "m" / "sft"))
    assert sorted(sft["id"]) == [f"r{i}" for i in range(6)]
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["counts"]["candidates"] == 24 and manifest["counts"]["sft_rows"] == 6
    assert main(["publish", str(tmp_path / "m"), "--repo-id", "me/merged", "--dry-run", str(tmp_path / "hub")]) == 0


def test_the_slurm_recipe_parses_and_its_merge_step_joins_the_shards(tmp_path, home):
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = root / "experiments" / "slurm_synth.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    input_path = queries(tmp_path / "q.jsonl", 4)
    with FaultServer(reply=schema_reply) as server:
        for k in range(2):  # what two array tasks leave behind
            assert synth(server, input_path, tmp_path / "out" / f"shard-{k}", "--shard", f"{k}/2") == 0
    done = subprocess.run(
        ["bash", str(script), "merge", "2", str(tmp_path / "out")], cwd=root, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert len(rubrics_by_id(tmp_path / "out" / "merged")) == 4


def test_the_slurm_recipe_submits_an_array_then_a_merge_and_each_task_serves_then_runs_its_shard(tmp_path):
    """The recipe's wiring, with sbatch, curl and rubricrl replaced by stubs that record their arguments."""
    import os
    import stat
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "experiments" / "slurm_synth.sh"
    calls = tmp_path / "calls.txt"
    serve = (
        'port=$(echo "$*" | sed -E "s/.*--port ([0-9]+).*/\\1/"); mkdir -p "$RUBRICRL_HOME"; '
        'echo "{\\"base_url\\": \\"http://127.0.0.1:$port/v1\\"}" > "$RUBRICRL_HOME/server.json"; exec sleep 30'
    )
    stubs = {
        "bin/sbatch": f'echo "sbatch $*" >> {calls}; echo 4242',
        ".venv/bin/rubricrl": f'echo "rubricrl $*" >> {calls}; [ "$1" != serve ] || {{ {serve}; }}',
    }
    for name, body in stubs.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/usr/bin/env bash\n" + body + "\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}

    def recipe(*args, **extra):
        done = subprocess.run(
            ["bash", str(script), *args], cwd=tmp_path, env={**env, **extra}, capture_output=True, text=True, timeout=20
        )
        assert done.returncode == 0, done.stderr
        lines = calls.read_text().splitlines()
        calls.unlink()
        return lines, done.stdout

    lines, said = recipe("submit", "4", "q.jsonl", "out", "cfg.yaml", "org/model", "2")
    assert len(lines) == 2 and "--array=0-3" in lines[0] and "--gpus-per-task=2" in lines[0]
    assert lines[0].endswith("shard 4 q.jsonl out cfg.yaml org/model 2")
    assert "--dependency=afterany:4242" in lines[1] and lines[1].endswith("merge 4 out")
    assert "sbatch --array=<i>" in said  # how to resubmit one task

    lines, _ = recipe(
        "shard", "4", "q.jsonl", "out", "cfg.yaml", "org/model", "2", SLURM_ARRAY_TASK_ID="3", SLURM_JOB_ID="77"
    )
    serve, synth = lines
    port = serve.split("--port ")[1].split()[0]
    assert serve.startswith("rubricrl serve --model org/model") and "--vllm-arg=--tensor-parallel-size=2" in serve
    assert synth.startswith("rubricrl synth --config cfg.yaml --input q.jsonl --output-dir out/shard-3")
    assert f"--shard 3/4 --base-url http://127.0.0.1:{port}/v1 --model org/model" in synth
    assert port == str(20000 + 77)  # the task's own job id: tasks sharing a node never share a port
    lines, _ = recipe("shard", "4", "q.jsonl", "out", "cfg.yaml", "org/model", SLURM_ARRAY_TASK_ID="0")
    assert "tensor-parallel" not in lines[0]  # one GPU: no split
    # Another job's server on the port: `serve` exits (the port is taken) and the task stops, running nothing.
    (tmp_path / ".venv/bin/rubricrl").write_text(f'#!/usr/bin/env bash\necho "rubricrl $*" >> {calls}; exit 1\n')
    done = subprocess.run(
        ["bash", str(script), "shard", "4", "q.jsonl", "out", "cfg.yaml", "org/model"],
        cwd=tmp_path,
        env={**env, "SLURM_ARRAY_TASK_ID": "1"},
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert done.returncode == 1 and "rubricrl serve exited" in done.stderr
    assert not any(line.startswith("rubricrl synth") for line in calls.read_text().splitlines())


def test_grade_and_eval_shards_split_the_responses_and_concatenate_into_the_whole_report(tmp_path, home):
    from tests.test_grade_cli import RUBRICS, read_lines, write_lines

    rows = [{**RUBRICS[i % 2], "id": f"r{i}"} for i in range(8)]
    write_lines(tmp_path / "rubrics.jsonl", rows)
    write_lines(tmp_path / "responses.jsonl", [{"id": f"r{i}", "response": "Drink water and rest."} for i in range(8)])
    with FaultServer(reply=schema_reply) as server:
        for k in range(2):
            assert (
                main(
                    [
                        "grade",
                        "--rubrics",
                        str(tmp_path / "rubrics.jsonl"),
                        "--responses",
                        str(tmp_path / "responses.jsonl"),
                        "--output",
                        str(tmp_path / f"g{k}.jsonl"),
                        "--shard",
                        f"{k}/2",
                        "--base-url",
                        server.base_url,
                        "--model",
                        "fake",
                    ]
                )
                == 0
            )
        parts = [{r["id"] for r in read_lines(tmp_path / f"g{k}.jsonl")} for k in range(2)]
        assert parts[0] and parts[1] and not parts[0] & parts[1] and parts[0] | parts[1] == {r["id"] for r in rows}
        (tmp_path / "all.jsonl").write_text((tmp_path / "g0.jsonl").read_text() + (tmp_path / "g1.jsonl").read_text())
        assert main(["eval", "--output-dir", str(tmp_path / "merged"), "--graded", str(tmp_path / "all.jsonl")]) == 0
        sent = server.count
        assert (
            main(
                [
                    "eval",
                    "--output-dir",
                    str(tmp_path / "one"),
                    "--rubrics",
                    str(tmp_path / "rubrics.jsonl"),
                    "--responses",
                    str(tmp_path / "responses.jsonl"),
                    "--base-url",
                    server.base_url,
                    "--model",
                    "fake",
                ]
            )
            == 0
        )
        assert server.count == sent  # the whole eval replays the shards' verdicts from the cache
    merged, one = (json.loads((tmp_path / name / "report.json").read_text()) for name in ("merged", "one"))
    # the same scores (the bootstrap std resamples in row order, which concatenation changes)
    means = [
        {k: v for k, v in report["metrics"].items() if not k.endswith(":bootstrap_std")} for report in (merged, one)
    ]
    assert merged["examples"] == one["examples"] == 8 and means[0] == means[1]
