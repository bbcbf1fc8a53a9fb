"""An output folder's provenance over resumed runs (rubricrl/runs/provenance.py), through `rubricrl synth` against a
scripted endpoint: a rerun with other settings is refused before any call unless forced, a forced one is recorded
as such down to the dataset card, usage adds up over runs, and the summary says where the output and errors are.
`ruft build`'s side is in test_ruft_build.py."""

import asyncio
import json

import pyarrow.parquet as pq
import pytest
import yaml

from commands.main import main
from tests.fault_server import FaultServer, schema_reply


def queries(path, n):
    path.write_text(
        "".join(json.dumps({"id": f"q{i:04d}", "question": f"Question number {i}?"}) + "\n" for i in range(n))
    )
    return path


def synth(server, tmp_path, n, *extra, model="fake"):
    return main(
        [
            "synth",
            "--input",
            str(queries(tmp_path / "q.jsonl", n)),
            "--output-dir",
            str(tmp_path / "out"),
            "--base-url",
            server.base_url,
            "--model",
            model,
            *extra,
        ]
    )


def manifest(tmp_path):
    return json.loads((tmp_path / "out" / "manifest.json").read_text())


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))


@pytest.mark.parametrize(
    "extra, model, change",
    [
        ((), "other", 'roles.{evolver,reference,response_a,response_b,rubric_writer}.model "fake" -> "other"'),
        (("--roles", "reference.temperature=0.5"), "fake", "roles.reference.temperature unset -> 0.5"),
        (("--max-criteria", "8"), "fake", "synthesis.max_criteria 20 -> 8"),
    ],
)
def test_a_rerun_with_other_settings_is_refused_before_any_call(tmp_path, capsys, extra, model, change):
    out = tmp_path / "out"
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, 2) == 0
        before = {name: (out / name).read_bytes() for name in ("manifest.json", "config.yaml", "fingerprint.json")}
        capsys.readouterr()
        sent = server.count
        assert synth(server, tmp_path, 3, *extra, model=model) == 2
        assert server.count == sent
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("rubricrl: error: ")
    assert change in err and "2 finished rows" in err and "--output-dir" in err and "--allow-changed-settings" in err
    assert {name: (out / name).read_bytes() for name in before} == before  # the folder is untouched


def test_settings_that_do_not_change_rows_resume_and_usage_adds_up(tmp_path, capsys):
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, 3) == 0
        first = manifest(tmp_path)
        sent = server.count
        # more queries, and settings that do not change a row: concurrency, timeout, attempts, limit
        assert (
            synth(server, tmp_path, 6, "--concurrency", "3", "--timeout", "100", "--attempts", "5", "--limit", "5") == 0
        )
        assert server.count == sent + 2 * 4  # reference, A and B in one call, rubric, evolve: for 2 new queries
    second = manifest(tmp_path)
    assert second["fingerprint"] == first["fingerprint"] and len(second["fingerprints"]) == 1
    assert second["fingerprints"][0]["rows"] == 5 and second["counts"]["already_done"] == 3
    # usage and time over both runs, each run kept
    assert [run["usage"]["reference"]["requests"] for run in second["runs"]] == [3, 2]
    assert second["usage"]["reference"]["requests"] == 5 and second["usage"]["evolver"]["prompt_tokens"] == 50
    assert second["seconds"] == pytest.approx(sum(run["seconds"] for run in second["runs"]), abs=0.11)
    assert all(run["finished"] and run["fingerprint"] == first["fingerprint"] for run in second["runs"])
    printed = capsys.readouterr().out
    assert "model usage over the 2 runs of this folder (this run: 8 requests" in printed
    assert f"output: {tmp_path / 'out'} (final.parquet" in printed


def test_a_forced_rerun_records_both_settings_down_to_the_card(tmp_path, capsys):
    out = tmp_path / "out"
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, 2) == 0
        assert synth(server, tmp_path, 5, "--allow-changed-settings", model="other") == 0
        assert synth(server, tmp_path, 5, model="other") == 0  # the latest settings again: a plain resume
        assert synth(server, tmp_path, 5) == 2  # back to the first settings: refused again
    data = manifest(tmp_path)
    old, new = data["fingerprints"]
    assert (old["rows"], new["rows"]) == (2, 3) and data["fingerprint"] == new["id"] != old["id"]
    assert old["settings"]["roles.reference.model"] == "fake" and new["settings"]["roles.reference.model"] == "other"
    saved = json.loads((out / "fingerprint.json").read_text())["fingerprints"]
    assert [f["id"] for f in saved] == [old["id"], new["id"]]  # oldest first
    # each row names the settings that made it, in details.jsonl and final_details.parquet
    lines = {d["id"]: d["fingerprint"] for d in map(json.loads, (out / "details.jsonl").read_text().splitlines())}
    assert lines == {"q0000": old["id"], "q0001": old["id"], "q0002": new["id"], "q0003": new["id"], "q0004": new["id"]}
    details = pq.read_table(out / "final_details.parquet", columns=["id", "fingerprint"]).to_pylist()
    assert {d["id"]: d["fingerprint"] for d in details} == lines
    assert "allow_changed_settings" not in yaml.safe_load((out / "config.yaml").read_text())  # never saved
    capsys.readouterr()
    assert main(["publish", str(out), "--repo-id", "me/mixed", "--dry-run", str(tmp_path / "hub")]) == 0
    card = (tmp_path / "hub" / "README.md").read_text()
    assert "**mixed settings**" in card and "2 different settings" in card
    assert f"`{old['id']}` (2 rows): models: " in card and "reference `fake`" in card
    assert (
        f"`{new['id']}` (3 rows): changed: roles.{{evolver,reference,response_a,response_b,rubric_writer}}.model "
        '"fake" -> "other"' in card
    )
    assert "roles and models (latest settings):" in card and "  - reference: `other`" in card


def test_a_folder_without_recorded_settings_is_refused_then_marked_unknown_when_forced(tmp_path, capsys):
    out = tmp_path / "out"
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, 2) == 0
        # as an older rubricrl left it: no fingerprint.json, details lines with `reference` and no fingerprint
        (out / "fingerprint.json").unlink()
        lines = [json.loads(line) for line in (out / "details.jsonl").read_text().splitlines()]
        (out / "details.jsonl").write_text(
            "".join(
                json.dumps(
                    {
                        **{k: v for k, v in d.items() if k not in ("fingerprint", "reference_answer")},
                        "reference": d["reference_answer"],
                    }
                )
                + "\n"
                for d in lines
            )
        )
        assert synth(server, tmp_path, 3) == 2
        assert "written by an older rubricrl" in capsys.readouterr().err
        assert synth(server, tmp_path, 3, "--allow-changed-settings") == 0
    unknown, current = manifest(tmp_path)["fingerprints"]
    assert unknown == {"id": "unknown", "settings": None, "rows": 2} and current["rows"] == 1
    details = pq.read_table(out / "final_details.parquet").to_pylist()
    assert [(d["fingerprint"], bool(d["reference_answer"])) for d in details] == [(None, True)] * 2 + [
        (current["id"], True)
    ]
    assert main(["publish", str(out), "--repo-id", "me/old", "--dry-run", str(tmp_path / "hub")]) == 0
    assert "`unknown` (2 rows): settings not recorded" in (tmp_path / "hub" / "README.md").read_text()


def test_a_failed_query_is_explained_in_the_summary(tmp_path, capsys):
    with FaultServer(reply=schema_reply) as server:
        server.reply = lambda body: (
            "not json" if "Question number 1?" in json.dumps(body) and "response_format" in body else schema_reply(body)
        )
        assert synth(server, tmp_path, 3) == 1
    printed = capsys.readouterr().out
    errors = tmp_path / "out" / "errors.jsonl"
    assert "1 failed" in printed and "first error: q0001 at candidates: " in printed
    assert f"every error: {errors}" in printed and json.loads(errors.read_text())["id"] == "q0001"
    assert manifest(tmp_path)["first_error"].startswith("q0001 at candidates: ")


def test_an_interrupted_run_still_counts_in_the_usage(tmp_path, monkeypatch):
    from synthesis import stages

    original = stages.evolve

    async def interrupted(client, config, messages, merged, responses):
        if "number 2?" in messages[-1]["content"]:
            raise asyncio.CancelledError  # what Ctrl-C does: asyncio.run cancels the run
        return await original(client, config, messages, merged, responses)

    with FaultServer(reply=schema_reply) as server:
        monkeypatch.setattr(stages, "evolve", interrupted)
        with pytest.raises(asyncio.CancelledError):
            synth(server, tmp_path, 3, "--concurrency", "1")
        monkeypatch.setattr(stages, "evolve", original)
        assert synth(server, tmp_path, 3) == 0
    runs = manifest(tmp_path)["runs"]
    assert [run["finished"] for run in runs] == [False, True]
    assert runs[0]["usage"]["reference"]["requests"] >= 1
    total = manifest(tmp_path)["usage"]["reference"]["requests"]
    assert total == sum(run["usage"]["reference"]["requests"] for run in runs)
