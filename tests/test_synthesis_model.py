"""Synthesis on the embedded model through the real vLLM server: every valid query gets a rubric, and the command
never imports the training stack."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from synthesis.config import SynthesisConfig
from synthesis.output import final_schema
from tests.test_startup import TRAINING_STACK

pytestmark = [pytest.mark.model, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]

RUN = """
import json, sys
from commands.main import main
code = main(sys.argv[2:])
print("LOADED", json.dumps([m for m in json.loads(sys.argv[1]) if m in sys.modules]), file=sys.stderr)
sys.exit(code)
"""


def test_coarse_to_fine_on_the_embedded_model(local_server, tmp_path):
    """Only the server's URL is given: the model is the one it serves, and as it is the embedded model, the CPU
    token budgets apply to every role without a preset naming them (and the summary says which). The command runs
    as a user's does, in a process of its own: from its start to its summary, no torch, TRL or datasets."""
    queries = tmp_path / "queries.jsonl"
    rows = [  # two queries (a third had cost a third of the test's time): the second is multi-turn and in Spanish
        {"id": "single", "prompt": "How do I boil an egg?"},
        {
            "id": "multi-turn",
            "prompt": [
                {"role": "user", "content": "Quiero aprender a nadar."},
                {"role": "assistant", "content": "¡Genial! ¿Eres un adulto principiante?"},
                {"role": "user", "content": "Sí, y me da miedo el agua profunda."},
            ],
        },
    ]
    queries.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    out = tmp_path / "out"
    argv = [
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
    env = {**os.environ, "RUBRICRL_HOME": str(tmp_path / "home")}  # a cache of its own: real calls are made
    done = subprocess.run(
        [sys.executable, "-c", RUN, json.dumps(TRAINING_STACK), *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "max_tokens for the embedded model on CPU" in done.stdout
    assert "LOADED []" in done.stderr, done.stderr[-500:]
    table = pq.read_table(out / "final.parquet")
    assert table.schema == final_schema()
    rubrics = {row["id"]: row["rubrics"] for row in table.to_pylist()}
    assert set(rubrics) == {"single", "multi-turn"}
    assert all(len(r) >= 1 and all(c["criterion"].strip() and c["points"] != 0 for c in r) for r in rubrics.values())
    details = {d["id"]: d for d in map(json.loads, (out / "details.jsonl").read_text().splitlines())}
    assert all(d["reference_answer"] and len(d["responses"]) == 2 for d in details.values())
    assert details["multi-turn"]["prompt"][1] == rows[1]["prompt"][1]  # the turns kept, and the text as written
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["roles"]["reference"]["model"] == local_server.model
    budgets = SynthesisConfig(**manifest["config"]["synthesis"]).cpu_max_tokens()
    assert all(role["max_tokens"] == budgets[name] for name, role in manifest["roles"].items())
    assert manifest["usage"]["rubric_writer"]["completion_tokens"] > 0
