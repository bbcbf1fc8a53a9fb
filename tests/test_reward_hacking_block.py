"""The reward-hacking study at paper scale (docs/reward-hacking.md, "At paper scale"), its bash block as written.

bash runs the block with the programs it starts replaced by functions that write down their command lines (vllm,
curl, accelerate, torchrun, rubricrl), so every server, run, seed, folder and the report's folders are the block's
own. Then at tiny scale: the two judges are canned servers in place of the vLLM servers the block starts, the
baseline and the first defence at the first seed train in-process (`commands.main.main` in place of `accelerate
launch`) with tests/test_presets.py's CPU-size overrides, and the block's report compares them."""

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from commands.main import build_parser, main
from reports.cli import default_labels
from tests.fault_server import FaultServer
from tests.helpers import tiny_policy
from tests.test_presets import HEALTHBENCH, RURL_SIZE, flags, varied_reply

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PRESET = "configs/rurl/hacking-gpu.yaml"
DEFENCES = {
    ("--rubric_dropout", "0.3"),
    ("--rubric_dropout", "0.5"),
    ("--criterion_advantage", "decoupled"),
    ("--criterion_advantage", "discriminating"),
}
"""The defences the page and the preset's header name, each one flag on top of the baseline."""
PORT = re.compile(r":(\d+)(/|$)")

STAND_INS = r"""
set -eu
record() { printf '%s\0' "${CUDA_VISIBLE_DEVICES-}" "$@" $'\x1e' >> "$RECORD"; }
vllm() { record vllm "$@"; }
curl() { record curl "$@"; }
accelerate() { record accelerate "$@"; }
torchrun() { record torchrun "$@"; }
rubricrl() { record rubricrl "$@"; }
sleep() { :; }
"""
"""Each program the block starts writes down (its GPUs, its argv) and returns at once; a server is ready at once."""


def block() -> str:
    page = (ROOT / "docs" / "reward-hacking.md").read_text(encoding="utf-8")
    section = page.split("\n## At paper scale\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


def commands_of_the_block(folder: Path) -> list[tuple[str, list[str]]]:
    """The block run by bash in `folder`: each command it starts as (CUDA_VISIBLE_DEVICES, argv), in the order they
    ran (one started in the background, `&`, may be written down later)."""
    record = folder / "commands"
    script = STAND_INS + block() + "\nwait\n"
    env = {"PATH": "/usr/bin:/bin", "RECORD": str(record)}
    done = subprocess.run([shutil.which("bash"), "-c", script], cwd=folder, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    words = record.read_text().split("\0")[:-1]
    commands, current = [], []
    for word in words:
        if word == "\x1e":
            commands.append((current[0], current[1:]))
            current = []
        else:
            current.append(word)
    return commands


def value(argv: list[str], flag: str, default: str | None = None) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else default


@pytest.fixture(scope="module")
def tiny():
    return str(tiny_policy())


def test_the_paper_scale_study_runs_as_written(tmp_path, monkeypatch, tiny):
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))
    for name, setting in {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "WANDB_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(name, setting)
    work = tmp_path / "work"
    work.mkdir()
    (work / "configs").symlink_to(ROOT / "configs")  # the block's paths are relative to the repository
    commands = commands_of_the_block(work)
    preset = yaml.safe_load((ROOT / PRESET).read_text())
    judge_url, judge_model = preset["llm"]["base_url"], preset["llm"]["model"]
    monitor_url, monitor_model = (preset["llm"]["roles"]["monitor"][key] for key in ("base_url", "model"))

    # The two judges: served where the preset points each role, under the model it names, each on a GPU of its own.
    servers = {}
    for gpus, argv in commands:
        if argv[:2] == ["vllm", "serve"]:
            servers[int(value(argv, "--port", "8000"))] = (gpus, value(argv, "--served-model-name", argv[2]))
    assert servers[urlparse(judge_url).port][1] == judge_model
    assert servers[urlparse(monitor_url).port][1] == monitor_model
    judge_gpus, monitor_gpus = (
        {*filter(None, servers[urlparse(url).port][0].split(","))} for url in (judge_url, monitor_url)
    )
    assert judge_gpus and monitor_gpus and not judge_gpus & monitor_gpus

    # The runs: the baseline and each defence at the same seeds, each in a folder of its own, on the other GPUs.
    launches = [i for i, (_, argv) in enumerate(commands) if argv[0] in ("accelerate", "torchrun")]
    waited = {
        int(m[1]) for _, argv in commands[: launches[0]] if argv[0] == "curl" for m in map(PORT.search, argv) if m
    }
    assert {urlparse(judge_url).port, urlparse(monitor_url).port} <= waited  # the servers are up before the runs
    runs = []
    for i in launches:
        argv = commands[i][1]
        assert argv[argv.index("-m") + 1] == "commands"
        assert not set(value(argv, "--gpu_ids", "").split(",")) & (judge_gpus | monitor_gpus)
        train = argv[argv.index("-m") + 2 :]
        assert train[:2] == ["rurl", "train"] and value(train, "--config") == PRESET
        out, seed = value(train, "--output_dir"), value(train, "--seed")
        named = {"--config", "--output_dir", "--seed"}
        rest = [w for j, w in enumerate(train[2:], 2) if w not in named and train[j - 1] not in named]
        runs.append({"argv": train, "out": Path(out), "seed": seed, "defence": tuple(rest)})
    seeds = {run["seed"] for run in runs}
    assert len(seeds) >= 2 and None not in seeds
    assert {run["defence"] for run in runs} == {(), *DEFENCES}
    for defence in {run["defence"] for run in runs}:
        assert sorted(run["seed"] for run in runs if run["defence"] == defence) == sorted(seeds)
    folders = [run["out"] for run in runs]
    assert len(set(folders)) == len(folders)
    for a in folders:
        assert not any(a in b.parents for b in folders), f"{a} holds another run's folder"
    for run in runs:  # <kind>/seed-<seed>: one folder per kind, one per seed inside it
        assert run["out"].name == f"seed-{run['seed']}"
        assert {r["defence"] for r in runs if r["out"].parent == run["out"].parent} == {run["defence"]}

    # The report, last, compares every run and nothing else.
    reports = [i for i, (_, argv) in enumerate(commands) if argv[:2] == ["rubricrl", "report"]]
    assert len(reports) == 1 and reports[0] > launches[-1]
    reports = [commands[reports[0]][1]]
    report = build_parser().parse_args(reports[0][1:])
    labels = getattr(report, "labels", None)
    assert sorted(map(str, report.dirs)) == sorted(map(str, folders))
    assert labels is None or len(labels) == len(report.dirs) == len(set(labels))

    # At tiny scale: the baseline and the block's first defence at its first seed, against canned judges.
    first = min(seeds, key=int)
    defences = [(), next(run["defence"] for run in runs if run["defence"])]
    chosen = [next(r for r in runs if r["defence"] == d and r["seed"] == first) for d in defences]
    size = {**RURL_SIZE, "--model_name_or_path": tiny, "--max_steps": "1", "--eval_every": "1"}
    size.update({"--eval_rubrics": str(HEALTHBENCH), "--eval_size": "0", "--eval_max_examples": "2"})
    monkeypatch.chdir(work)
    with FaultServer(reply=varied_reply) as judge, FaultServer(reply=varied_reply) as monitor:
        endpoints = ["--base-url", judge.base_url, "--roles", f"monitor.base_url={monitor.base_url}", "--no-cache"]
        for run in chosen:
            assert main([*run["argv"], *flags(size), *endpoints]) == 0, f"rubricrl {shlex.join(run['argv'])}"
    assert {body.get("model") for body in judge.requests} == {judge_model}
    assert {body.get("model") for body in monitor.requests} == {monitor_model}
    for run in chosen:
        out = work / run["out"]
        assert (out / "manifest.json").is_file() and (out / "eval.jsonl").is_file()
        config = yaml.safe_load((out / "config.yaml").read_text())
        assert config["seed"] == int(run["seed"])
        for flag, setting in zip(run["defence"][::2], run["defence"][1::2]):
            assert config["rurl"][flag.lstrip("-")] == yaml.safe_load(setting)

    # The block's report, without the runs not trained here (their folders and their labels).
    trained = {str(run["out"]) for run in chosen}
    kept = [d for d in report.dirs if str(d) in trained]
    left_out = {str(d) for d in report.dirs if str(d) not in trained}
    if labels:
        left_out |= {label for d, label in zip(report.dirs, labels) if str(d) not in trained}
    assert main([word for word in reports[0][1:] if word not in left_out]) == 0
    output = work / (getattr(report, "output", None) or "report.html")
    page, summary = output.read_text(), output.with_suffix(".md").read_text()
    named = [label for d, label in zip(report.dirs, labels) if d in kept] if labels else default_labels(kept)
    assert len(named) == len(chosen)
    for label in named:
        assert label in page and label in summary
