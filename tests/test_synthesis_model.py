"""Synthesis on the embedded model through the real vLLM server: every valid query gets a rubric."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rubricrl.cli import main
from synthesis.config import SynthesisConfig
from synthesis.output import final_schema

pytestmark = [pytest.mark.model, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]


def test_coarse_to_fine_on_the_embedded_model(local_server, tmp_path, monkeypatch, capsys):
    """Only the server's URL is given: the model is the one it serves, and as it is the embedded model, the CPU
    token budgets apply to every role without a preset naming them (and the summary says which)."""
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))  # a cache of its own: real calls are made
    queries = tmp_path / "queries.jsonl"
    rows = [
        {"id": "single", "prompt": "How do I boil an egg?"},
        {"id": "other-language", "prompt": "¿Por qué el cielo es azul?"},
        {
            "id": "multi-turn",
            "prompt": [
                {"role": "user", "content": "I want to learn to swim."},
                {"role": "assistant", "content": "Great! Are you an adult beginner?"},
                {"role": "user", "content": "Yes, and I am afraid of deep water."},
            ],
        },
    ]
    queries.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    out = tmp_path / "out"
    code = main(
        [
            "synth",
            "--input",
            str(queries),
            "--output-dir",
            str(out),
            "--base-url",
            local_server.base_url,
            "--config",
            str(ROOT / "configs" / "synthesis" / "tiny-cpu.yaml"),
        ]
    )
    assert code == 0
    assert "max_tokens for the embedded model on CPU" in capsys.readouterr().out
    table = pq.read_table(out / "final.parquet")
    assert table.schema == final_schema()
    rubrics = {row["id"]: row["rubrics"] for row in table.to_pylist()}
    assert set(rubrics) == {"single", "other-language", "multi-turn"}
    assert all(len(r) >= 1 and all(c["criterion"].strip() and c["points"] != 0 for c in r) for r in rubrics.values())
    details = {d["id"]: d for d in map(json.loads, (out / "details.jsonl").read_text().splitlines())}
    assert all(d["reference_answer"] and len(d["responses"]) == 2 for d in details.values())
    assert details["multi-turn"]["prompt"][1]["role"] == "assistant"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["roles"]["reference"]["model"] == local_server.model
    budgets = SynthesisConfig(**manifest["config"]["synthesis"]).cpu_max_tokens()
    assert all(role["max_tokens"] == budgets[name] for name, role in manifest["roles"].items())
    assert manifest["usage"]["rubric_writer"]["completion_tokens"] > 0
