"""`rubricrl reward serve`: the rubric reward as an HTTP service (engines/service.py) for the engines that scale
past TRL, verl and OpenRLHF (their data: `rubricrl export verl`, engines/export_verl.py). It lives with RuRL: it takes
a RuRL preset as its config."""

import argparse
import asyncio
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from grading.rar import PitfallConvention
from rubricrl.config import add_config_arguments, config_source, parse_settings


@dataclass
class RewardServeArgs:
    rubrics: Path
    """Rubric dataset whose row ids the requests' labels name: .parquet, .jsonl, a saved HF dataset, a repository
    folder or a Hub id (synthesis output, RubricHub, HealthBench, RaR), as `grade` reads it."""
    host: str = "127.0.0.1"
    """Address to listen on. Any other than loopback needs a bearer token in RUBRICRL_REWARD_TOKEN."""
    port: int = field(default=8760, metadata={"min": 0, "max": 65535})
    """Port (0: a free one, printed at start-up)."""
    max_batch: int = field(default=8192, metadata={"min": 1})
    """Most completions in one request (more: 400)."""
    max_body_mb: float = field(default=256.0, metadata={"min": 0.001})
    """Largest request body in MiB (more: 413)."""
    unscored_reward: float = 0.0
    """What a completion that could not be scored gets (the engines need a number; verl-rubric and RuscaRL give a
    judge failure 0.0); the `scored` list and the `rubric/unscored` log say which."""
    deadline: float | None = field(default=None, metadata={"min": 0.001})
    """Seconds a request may wait for its judge calls; completions still unjudged then are unscored (default: no
    limit beyond the client's timeouts and retries)."""
    eos: list[str] | None = None
    """End-of-sequence tokens removed from the end of an OpenRLHF query's response (default: those of ChatML,
    Llama 3, Phi, gpt-oss, Gemma, Mistral, DeepSeek: engines/openrlhf_query.py DEFAULT_EOS)."""
    rar_pitfalls: PitfallConvention = "auto"
    """RaR rubrics: whether pitfall texts name the mistake or what to avoid (grading/rar.py)."""


def add_commands(commands) -> None:
    from grading.grader import GradingConfig
    from rubricrl.llm import LLMSettings

    reward = commands.add_parser("reward", help="the rubric reward as a service for other RL engines (verl, OpenRLHF)")
    actions = reward.add_subparsers(title="reward commands", metavar="<action>", required=True)
    serve = actions.add_parser(
        "serve",
        help="serve the rubric reward over HTTP (OpenRLHF's POST /get_reward) until Ctrl-C / SIGTERM",
        description="Grades completions for the rows of --rubrics with the `grading:` and `llm:` settings. "
        "Listens on 127.0.0.1; another --host needs a bearer token in $RUBRICRL_REWARD_TOKEN.",
    )
    # A `rurl train` preset serves as it is (its judge settings are the run's): its training keys are skipped.
    add_config_arguments(
        serve,
        [RewardServeArgs, GradingConfig, LLMSettings],
        shares_file_with=["rurl.config.TrainArgs", "trl.GRPOConfig", "trl.ModelConfig"],
    )
    serve.set_defaults(run=run_reward_serve)
    serve.epilog = (
        "examples:\n  rubricrl reward serve --rubrics rubrics/final.parquet --base-url http://judge:8000/v1\n"
        "  RUBRICRL_REWARD_TOKEN=$(openssl rand -hex 24) rubricrl reward serve --rubrics r.parquet "
        "--host 0.0.0.0"
    )


def run_reward_serve(args: argparse.Namespace) -> int:
    from engines.openrlhf_query import DEFAULT_EOS
    from engines.service import RewardService, serve
    from engines.service_access import TOKEN_ENV, check_token
    from grading.dataset import check_references, load_rubric_rows
    from grading.grader import Grader
    from rubricrl.llm import open_llm

    settings = parse_settings(args, command="reward serve")
    options, config, llm = settings
    token = check_token(options.host, os.environ.get(TOKEN_ENV))  # refused before anything is loaded or started
    rows = load_rubric_rows(options.rubrics, options.rar_pitfalls)
    check_references(config.mode, options.rubrics, list(rows.values()))

    def log(line: str) -> None:
        print(f"[reward serve] {line}", file=sys.stderr, flush=True)

    async def run(session) -> None:
        stop = asyncio.Event()

        def stopping(name: str) -> None:
            log(f"{name}: stopping (requests in flight finish first) ...")
            stop.set()

        loop = asyncio.get_running_loop()
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stopping, signal.Signals(signum).name)
        async with session.client() as client:  # closing it flushes the response cache
            service = RewardService(
                rows,
                Grader(client, config),
                token=token,
                unscored_reward=options.unscored_reward,
                max_batch=options.max_batch,
                max_body=int(options.max_body_mb * 2**20),
                deadline=options.deadline,
                eos=DEFAULT_EOS if options.eos is None else options.eos,
                source=str(options.rubrics),
                log=log,
            )

            def ready(url: str) -> None:
                judge = service.grader.metadata
                log(
                    f"{len(rows)} rubric rows from {options.rubrics}; judge {judge['judge_model']} ({judge['mode']}); "
                    f"token {'required' if token else 'not required (loopback)'}; Ctrl-C or SIGTERM stops it"
                )
                print(f"listening on {url} (POST {url}/get_reward)", flush=True)

            try:
                await serve(service, options.host, options.port, stop=stop, ready=ready)
            finally:
                totals = service.totals.as_dict()
                log(
                    f"stopped; served {totals['requests']} requests, {totals['completions']} completions "
                    f"({totals['unscored']} unscored), {service.judge_calls()} judge calls; rejected "
                    f"{totals['rejected'] or 'none'}"
                )

    with open_llm(llm, [config.judge_role], source=config_source(args), cpu_budgets=config.cpu_max_tokens()) as session:
        asyncio.run(run(session))
    return 0
