"""`rubricrl <command>`: the one entry point, on top of every folder. It builds the parser each folder attaches its
commands to (the core's, then the stages' in pipeline order), hands the core what the stages provide (each stage's
`merge` and `publish` of its own folders), and runs the command. Each command is a small function; the work lives in
the packages, imported when the command runs."""

import argparse
import signal
import sys
import textwrap

from checks.audit_cli import add_commands as add_audit_command
from checks.probe_cli import add_commands as add_probe_command
from commands.help import EXAMPLES, ON_INTERRUPT, PRESETS, ROLES, all_commands, presets
from engines.cli import add_commands as add_engine_commands
from grading.cli import add_commands as add_grading_commands
from grading.healthbench_files import add_commands as add_healthbench_commands
from reports.cli import add_commands as add_report_commands
from rubricrl import __version__
from rubricrl.cli import add_commands as add_core_commands
from rubricrl.errors import UserError
from rubricrl.lazy import when_called
from rubricrl.runs.merge import MergeKind
from rubricrl.runs.merge import add_command as add_merge_command
from rubricrl.runs.publish import add_command as add_publish_command
from ruft.cli import add_commands as add_ruft_commands
from rurl.cli import add_commands as add_rurl_commands
from synthesis.cli import add_commands as add_synthesis_commands
from synthesis.config import SynthesisConfig


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "trl_types", None):  # only training commands pass flags on, to TRL's parser
        getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(rest)}")
    args.trl_argv = rest
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    # SIGTERM (a scheduler, `kill`) ends a run as Ctrl-C does: asyncio.run turns SIGINT into a cancellation of
    # every call in flight (sessions close, nothing half-written is kept), then KeyboardInterrupt reaches us.
    received = []
    signal.signal(
        signal.SIGTERM, lambda signum, frame: (received.append("SIGTERM"), signal.raise_signal(signal.SIGINT))
    )
    try:
        return args.run(args) or 0
    except (UserError, FileNotFoundError) as error:
        print(f"rubricrl: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"\nrubricrl: interrupted ({received[0] if received else 'Ctrl-C'}); {args.on_interrupt}", file=sys.stderr
        )
        return 130


class Parser(argparse.ArgumentParser):
    """argparse's parser (each command's too: subparsers take their parent's class), with an error on one line: the
    problem and where the help is, not the whole usage block before it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="rubricrl", description="Rubric-based rewards for LLM post-training.")
    parser.add_argument("--version", action="version", version=f"rubricrl {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="<command>")

    add_core_commands(commands)  # the core's own: model, serve, chat, cache

    add_synthesis_commands(commands)
    commands.choices["synth"].description = _synth_defaults()
    add_grading_commands(commands)
    add_ruft_commands(commands)
    add_rurl_commands(commands)
    add_engine_commands(commands)  # the reward for other engines: export verl|openrlhf, reward serve
    add_report_commands(commands)
    add_audit_command(commands)  # checking the reward: audit, probe
    add_probe_command(commands)
    add_healthbench_commands(commands)  # HealthBench's files: healthbench fetch
    add_merge_command(
        commands,
        {
            "synth": MergeKind("final.jsonl", when_called("synthesis.merge", "merge_synthesis")),
            "ruft build": MergeKind("queries.jsonl", when_called("ruft.merge", "merge_ruft")),
        },
    )
    add_publish_command(
        commands,
        {
            "sft.parquet": when_called("ruft.card", "build_folder"),
            "final.parquet": when_called("synthesis.card", "build_folder"),
        },
    )

    describe(parser)
    return parser


def describe(parser: argparse.ArgumentParser) -> None:
    """Every command's help as written (examples' lines kept), with its presets, roles and examples
    (commands/help.py), and what an interrupt of it leaves."""
    for name, command in all_commands(parser):
        command.formatter_class = argparse.RawDescriptionHelpFormatter  # keep the examples' lines as written
        if name in PRESETS:
            command.description = "\n\n".join(filter(None, [command.description, presets(*PRESETS[name])]))
        if name in ROLES:
            roles = textwrap.fill(ROLES[name], 116, initial_indent="  ", subsequent_indent="  ")
            command.epilog = "\n\n".join(
                filter(None, [command.epilog, f"roles (llm.roles, --roles NAME.KEY=VALUE):\n{roles}"])
            )
        if name in EXAMPLES:
            command.epilog = (
                ((command.epilog + "\n\n") if command.epilog else "")
                + "examples:\n"
                + "\n".join(f"  {line}" for line in EXAMPLES[name])
            )
        command.set_defaults(on_interrupt=ON_INTERRUPT.get(name, ON_INTERRUPT["*"]), command_parser=command)


def _synth_defaults() -> str:
    config = SynthesisConfig()
    budgets = ", ".join(f"{role} {n}" for role, n in config.cpu_max_tokens().items() if role in config.roles)
    return textwrap.fill(
        f"Without --config: method {config.method}, roles {', '.join(config.roles)}, {config.min_criteria}-"
        f"{config.max_criteria} criteria per candidate rubric, at most {config.max_new_criteria} added by evolution. "
        "Every role uses --base-url/--model when given, else the embedded model through a local vLLM server "
        f"(a running `rubricrl serve` is reused), with these max_tokens on a CPU: {budgets}.",
        width=100,
    )
