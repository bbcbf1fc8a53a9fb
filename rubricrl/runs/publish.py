"""`rubricrl publish DIR --repo-id ORG/NAME`: a finished output folder as a Hugging Face Hub dataset, uploaded with
huggingface_hub (`--dry-run OUT` writes the folder only). Each stage builds its own folder and card
(synthesis/card.py, ruft/card.py); the entry point hands the builders in, so that the core imports no stage."""

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path

from rubricrl.errors import UserError

CardBuilder = Callable[[Path, Path, str], Path]
"""(finished output folder, folder to write, repo id) -> the written folder."""


def add_command(commands, builders: dict[str, CardBuilder]) -> None:
    """The `publish` command for folders holding one of `builders`' data files (checked in order) and a manifest."""
    publish = commands.add_parser("publish", help="publish a synthesis or RuFT output folder as a Hugging Face dataset")
    publish.add_argument("dir", type=Path, help="a finished `rubricrl synth` or `rubricrl ruft build` output folder")
    publish.add_argument("--repo-id", required=True, help="ORG/NAME on the Hub")
    publish.add_argument(
        "--private", action="store_true", help="create the Hub repository as private (default: public)"
    )
    publish.add_argument(
        "--dry-run",
        type=Path,
        metavar="OUT",
        help="only write the Hub-ready folder (files and card) to OUT (default: upload)",
    )
    publish.set_defaults(run=functools.partial(run_publish, builders=builders))


def build_folder(source: Path, out: Path, repo_id: str, builders: dict[str, CardBuilder]) -> Path:
    """The Hub-ready folder of `source`, by the builder of the first data file it holds."""
    for data_file, build in builders.items():
        if (source / data_file).is_file() and (source / "manifest.json").is_file():
            return build(source, out, repo_id)
    *others, last = builders
    raise FileNotFoundError(
        f"{source}: no {last} (or {', '.join(others)}) and manifest.json; is this a finished "
        "`rubricrl synth` or `rubricrl ruft build` output?"
    )


def run_publish(args: argparse.Namespace, builders: dict[str, CardBuilder]) -> int:
    if args.dry_run:
        blocking = next((p for p in (args.dry_run, *args.dry_run.parents) if p.exists()), None)
        if blocking is not None and not blocking.is_dir():
            raise UserError(f"--dry-run {args.dry_run}: {blocking} is a file, not a folder; choose a folder")
        print(build_folder(args.dir, args.dry_run, args.repo_id, builders))
        return 0
    import tempfile

    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError

    # What the Hub client raises when the Hub is unreachable or refuses (its HTTP library's errors, and OSError)
    hub_errors = (OSError, *HfHubHTTPError.__bases__)
    api = HfApi()  # the token comes from HF_TOKEN or `huggingface-cli login`; it is never printed
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_folder(args.dir, Path(tmp), args.repo_id, builders)
        try:
            api.create_repo(args.repo_id, repo_type="dataset", private=args.private, exist_ok=True)
            api.upload_folder(
                repo_id=args.repo_id, repo_type="dataset", folder_path=folder, commit_message="Upload with rubricrl"
            )
        except hub_errors as error:
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise UserError(
                f"publish {args.repo_id}: the Hub at {constants.ENDPOINT} did not take it ({first}); "
                "check the network, HF_TOKEN (write access) and the repo id, or write the folder "
                "with --dry-run OUT and upload it later"
            ) from None
    print(f"published https://huggingface.co/datasets/{args.repo_id}", file=sys.stderr)
    return 0
