"""The README's chained run, command by command as written, at tiny scale: rubrics, RuFT build and train, RuRL from
the RuFT model, each of the three models evaluated on the held-out rubrics (the checkpoints served for their runs by
local vLLM servers), and one report comparing them. The scale: the outputs in a temporary folder, every endpoint a
canned server (the judge's verdicts drawn from the answer's text), the policy a tiny random model and one SFT step;
what each command writes is what the next one reads, as in the README."""

import re
import shlex
from pathlib import Path

import pytest

from commands.main import main
from tests.fault_server import FaultServer
from tests.helpers import tiny_policy
from tests.test_presets import varied_reply

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def chain_commands() -> list[list[str]]:
    """The README's chained run: the first bash block after its heading, continuation lines joined."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## A chained run on this machine.*?```bash\n(.*?)```", readme, re.S).group(1)
    return [shlex.split(line, comments=True)[1:] for line in block.replace("\\\n", " ").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def tiny():
    return str(tiny_policy())


def test_the_readme_chain_runs_as_written_and_ends_in_a_three_model_report(tmp_path, monkeypatch, tiny):
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))
    for name, value in {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "WANDB_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(name, value)
    commands = chain_commands()
    stages = [" ".join(argv[:2]) if argv[0] in ("ruft", "rurl") else argv[0] for argv in commands]
    assert stages == ["synth", "ruft build", "ruft train", "rurl train", "eval", "eval", "eval", "report"]
    out = tmp_path / "chain"
    with FaultServer(reply=lambda body: varied_reply(body) if body.get("response_format") else "Rest.") as canned:
        endpoint = ["--base-url", canned.base_url, "--model", "canned", "--no-cache"]
        scale = {
            "synth": endpoint,
            "ruft build": endpoint,
            "ruft train": ["--model_name_or_path", tiny, "--max_steps", "1", "--report_to", "none"],
            "rurl train": [*endpoint, "--no-preflight", "--max_completion_length", "8", "--report_to", "none"],
            "eval": endpoint,  # every role there; a --policy folder is still served on this machine
            "report": [],
        }
        for stage, argv in zip(stages, commands):
            argv = [word.replace("runs/chain", str(out)) for word in argv]
            assert main([*argv, *scale[stage]]) == 0, f"rubricrl {shlex.join(argv)}"
    assert canned.count > 0
    page = (out / "report.html").read_text()
    summary = (out / "report.md").read_text()
    for label in ("base", "ruft", "ruft+rurl"):
        assert label in page and label in summary
    for label in ("ruft", "ruft+rurl"):  # each model against the first, with its interval and its verdict
        assert re.search(
            rf"{re.escape(label)} against base: [-+]\d\.\d+ \(95% interval .*\): (a tie|better|worse)", summary
        )
