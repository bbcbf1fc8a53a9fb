"""Inputs named as Hugging Face datasets: a folder in a dataset repository's layout (what `hf download --repo-type
dataset` leaves: a README card with `configs:`, `data/train-*.parquet`), read through `datasets.load_dataset` as the
Hub copy is, and a Hub id read offline from the `datasets` cache, with split and subset chosen in the one string
(`NAME:SPLIT`, `NAME:SUBSET/SPLIT`); bad rows named with their split; offline without a cache, one line."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commands.main import main
from grading.dataset import iter_rubric_rows
from rubricrl.records import RecordFileError, iter_rows
from rubricrl.records.hub import describe_input
from rurl.config import RurlConfig
from rurl.data import load_rurl_data
from tests.fault_server import FaultServer, schema_reply
from tests.helpers import hub_offline
from tests.test_ruft_build import RUBRIC, Script

ROOT = Path(__file__).resolve().parents[1]
SHA = "0123456789abcdef0123456789abcdef01234567"
CARD = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*.parquet
  - split: test
    path: data/test-*.parquet
- config_name: medical
  data_files:
  - split: train
    path: medical/train-*.parquet
---
# A rubric dataset
"""


def row(i: int, topic: str = "cold") -> dict:
    return {"id": f"{topic}{i}", "question": f"I have a {topic} ({i}). What should I do?", "rubrics": RUBRIC}


def repository(folder: Path, test_rows: list[dict] | None = None) -> Path:
    """A dataset repository as the Hub stores it: subsets `default` (train 3 rows, test 2) and `medical` (train 1)."""
    splits = {
        "data/train": [row(i) for i in range(3)],
        "data/test": test_rows or [row(i, "flu") for i in range(2)],
        "medical/train": [row(0, "rash")],
    }
    for name, rows in splits.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), folder / f"{name}-00000-of-00001.parquet")
    (folder / "README.md").write_text(CARD)
    return folder


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """`org/rubrics` in the `datasets` cache as a download leaves it (`org___rubrics/<subset>/<version>/<commit>`),
    with the Hub offline: the path `load_dataset("org/rubrics")` takes on a machine that downloaded it before."""
    import datasets

    cache = tmp_path / "hf-cache"
    repo = repository(tmp_path / "rubrics")
    datasets.load_dataset(str(repo), cache_dir=str(cache))  # the default subset, both splits, as Arrow
    built = next((cache / "rubrics").glob("default/*/*/"))
    target = cache / "org___rubrics" / "default" / built.parent.name / SHA
    target.parent.mkdir(parents=True)
    shutil.move(built, target)  # its shards are named after the dataset (rubrics-test.arrow): the folder's name
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    hub_offline(monkeypatch)
    return "org/rubrics"


def ids(spec) -> list[str]:
    return [row.id for row in iter_rubric_rows(spec)]


def test_a_repository_folder_reads_by_split_and_subset(tmp_path):
    repo = repository(tmp_path / "repo")
    assert ids(repo) == ["cold0", "cold1", "cold2"]  # the train split
    assert ids(f"{repo}:test") == ["flu0", "flu1"]
    assert ids(f"{repo}:medical") == ids(f"{repo}:medical/train") == ["rash0"]  # a subset, its only split
    assert next(iter_rows(f"{repo}:test"))[0] == f"{repo} (test): row 1"
    assert describe_input(f"{repo}:test") == f"{repo.resolve()}:test"
    for spec, message in [
        (f"{repo}:dev", "no split 'dev'; its splits: train, test; its subsets: default, medical"),
        (f"{repo}:surgery/train", "no subset 'surgery'; its subsets: default, medical"),
        (f"{repo}@v1", "a revision (@...) selects a version of a Hub dataset"),
    ]:
        with pytest.raises(RecordFileError, match=re.escape(f"{spec}: {message}")):
            ids(spec)


def test_plain_files_at_the_top_and_a_saved_dataset_with_a_split(tmp_path):
    import datasets

    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "rows.jsonl").write_text("".join(json.dumps(row(i)) + "\n" for i in range(2)))
    assert ids(flat) == ["cold0", "cold1"]
    saved = tmp_path / "saved"
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list([row(0)]), "test": datasets.Dataset.from_list([row(5)])}
    ).save_to_disk(str(saved))
    assert ids(saved) == ["cold0"] and ids(f"{saved}:test") == ["cold5"]


def test_a_bad_row_is_named_with_its_split_and_row(tmp_path, home, capsys):
    repo = repository(tmp_path / "repo", test_rows=[row(0, "flu"), {**row(1, "flu"), "rubrics": []}])
    with FaultServer(reply=schema_reply) as server:
        code = main(
            [
                "grade",
                "--rubrics",
                f"{repo}:test",
                "--responses",
                str(tmp_path / "r.jsonl"),
                "--output",
                str(tmp_path / "g.jsonl"),
                "--base-url",
                server.base_url,
                "--model",
                "m",
            ]
        )
        assert code == 2 and server.count == 0
    assert f"{repo} (test): row 2:" in capsys.readouterr().err


def test_grade_takes_repository_folders_for_rubrics_and_responses(tmp_path, home):
    repo = repository(tmp_path / "repo")
    answers = tmp_path / "answers"
    answers.mkdir()
    (answers / "responses.jsonl").write_text(
        "".join(json.dumps({"id": f"flu{i}", "response": "Drink water and rest."}) + "\n" for i in range(2))
    )
    with FaultServer(reply=Script()) as server:
        assert (
            main(
                [
                    "grade",
                    "--rubrics",
                    f"{repo}:test",
                    "--responses",
                    str(answers),
                    "--output",
                    str(tmp_path / "g.jsonl"),
                    "--base-url",
                    server.base_url,
                    "--model",
                    "fake",
                ]
            )
            == 0
        )
    graded = [json.loads(line) for line in (tmp_path / "g.jsonl").read_text().splitlines()]
    assert [g["id"] for g in graded] == ["flu0", "flu1"] and all(g["score"] == 1.0 for g in graded)


def test_synth_reads_a_subset_of_a_repository_folder(tmp_path, home):
    repo = repository(tmp_path / "repo")
    with FaultServer(reply=schema_reply) as server:
        assert (
            main(
                [
                    "synth",
                    "--input",
                    f"{repo}:medical",
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
    final = pq.read_table(tmp_path / "out" / "final.parquet").to_pylist()
    assert [r["id"] for r in final] == ["rash0"]


def test_ruft_build_reads_a_split_of_a_repository_folder(tmp_path, home):
    repo = repository(tmp_path / "repo")
    with FaultServer(reply=Script()) as server:
        assert (
            main(
                [
                    "ruft",
                    "build",
                    "--rubrics",
                    f"{repo}:test",
                    "--output-dir",
                    str(tmp_path / "out"),
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
    queries = [json.loads(line)["id"] for line in (tmp_path / "out" / "queries.jsonl").read_text().splitlines()]
    assert sorted(queries) == ["flu0", "flu1"]


def test_rurl_data_reads_a_split_of_a_repository_folder(tmp_path):
    repo = repository(tmp_path / "repo")
    data = load_rurl_data(Path(f"{repo}:test"), RurlConfig(), seed=0)
    assert sorted(row.id for row in data.train) == ["flu0", "flu1"]


def test_a_hub_id_reads_from_the_cache_offline_and_records_its_commit(hub_cache, tmp_path, home):
    assert ids(f"{hub_cache}:test") == ["flu0", "flu1"]
    assert next(iter_rows(f"{hub_cache}:test"))[0] == "org/rubrics (test): row 1"
    assert describe_input(f"{hub_cache}:test") == f"org/rubrics@{SHA}:test"  # the same rows again, pinned
    assert describe_input(f"hf://datasets/{hub_cache}") in (f"org/rubrics@{SHA}:train", f"hf://datasets/{hub_cache}")
    (tmp_path / "r.jsonl").write_text(json.dumps({"id": "cold1", "response": "Drink water and rest."}) + "\n")
    with FaultServer(reply=Script()) as server:
        assert (
            main(
                [
                    "grade",
                    "--rubrics",
                    hub_cache,
                    "--responses",
                    str(tmp_path / "r.jsonl"),
                    "--output",
                    str(tmp_path / "g.jsonl"),
                    "--base-url",
                    server.base_url,
                    "--model",
                    "fake",
                ]
            )
            == 0
        )


def test_a_hub_id_offline_and_not_cached_is_one_line_exit_2(tmp_path):
    """In a process of its own: HF_HUB_OFFLINE is read at import, and the error must come without a traceback."""
    (tmp_path / "r.jsonl").write_text('{"id": "a", "response": "x"}\n')
    env = {
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "RUBRICRL_HOME": str(tmp_path / "home"),
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from commands.main import main; sys.exit(main(sys.argv[1:]))",
            "grade",
            "--rubrics",
            "nobody/no-such-rubrics:test",
            "--responses",
            "r.jsonl",
            "--output",
            "g.jsonl",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("rubricrl: error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr
    assert "nobody/no-such-rubrics:test: cannot reach the Hugging Face Hub (HF_HUB_OFFLINE is set)" in errors[0]
    assert "hf download nobody/no-such-rubrics --repo-type dataset" in errors[0]


def test_a_missing_local_file_still_says_no_such_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for missing in ["runs/x.jsonl", "runs/x", "nowhere/x.parquet", str(tmp_path / "gone")]:
        with pytest.raises(RecordFileError, match=re.escape(f"{missing}: no such file or folder")):
            ids(missing)
