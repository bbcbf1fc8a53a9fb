"""`rubricrl healthbench fetch`: HealthBench's files from where simple-evals reads them (OpenAI's public blob store,
`healthbench_eval.py`'s INPUT_PATH, INPUT_PATH_HARD, INPUT_PATH_CONSENSUS), and HealthBench Professional's from the
same store (`healthbench_professional/assets.zip`, which holds `healthbench_professional_eval.jsonl`), written
under a folder and checked: every line parses and holds what the evaluation reads. A file is downloaded under a
temporary name and renamed only once checked, so a download cut short or garbled never stays as a usable file.
`healthbench_manifest.json` beside the files records each one's source, rows and sha256; a file whose sha256 still
matches it is not downloaded again."""

import argparse
import hashlib
import json
import os
import sys
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rubricrl.errors import UserError
from rubricrl.runs.jsonl import write_whole

SOURCE = "https://openaipublic.blob.core.windows.net/simple-evals"
MANIFEST = "healthbench_manifest.json"
TIMEOUT = 60
"""Seconds a connection may stay silent before the download fails."""


@dataclass(frozen=True)
class HealthBenchFile:
    path: str
    """Where it is under the source."""
    file: str
    """The name it is written under."""
    layout: str
    """`healthbench` (prompt, prompt_id, rubrics) or `professional` (id, conversation, rubric_items)."""
    member: str | None = None
    """The file inside the archive, for a source that is a zip."""


FILES = {
    "regular": HealthBenchFile("healthbench/2025-05-07-06-14-12_oss_eval.jsonl", "healthbench.jsonl", "healthbench"),
    "hard": HealthBenchFile("healthbench/hard_2025-05-08-21-00-10.jsonl", "healthbench_hard.jsonl", "healthbench"),
    "consensus": HealthBenchFile(
        "healthbench/consensus_2025-05-09-20-00-46.jsonl", "healthbench_consensus.jsonl", "healthbench"
    ),
    "professional": HealthBenchFile(
        "healthbench_professional/assets.zip",
        "healthbench_professional.jsonl",
        "professional",
        member="healthbench_professional_eval.jsonl",
    ),
}


class FetchError(UserError):
    """A download that failed or a file that is not what HealthBench ships; the message names the URL and line."""


def fetch(names: list[str], output_dir: Path, source: str = SOURCE, log=print) -> dict[str, dict]:
    """Each named file downloaded, checked and written under output_dir; the manifest updated after each. Returns
    the manifest."""
    unknown = [name for name in names if name not in FILES]
    if unknown:
        raise FetchError(f"no HealthBench file {unknown[0]!r}: choose from {', '.join(FILES)}")
    output_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = output_dir / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for name in names or list(FILES):
        spec, url = FILES[name], f"{source.rstrip('/')}/{FILES[name].path}"
        target = output_dir / spec.file
        known = manifest.get(name, {})
        if target.exists() and known.get("url") == url and known.get("sha256") == sha256_of(target):
            log(f"{name}: {known['rows']:,} rows, already in {target} (sha256 {known['sha256'][:12]})")
            continue
        log(f"{name}: downloading {url}")
        manifest[name] = download_checked(spec, url, target)
        write_whole(manifest_path, json.dumps(manifest, indent=2) + "\n")
        log(f"{name}: {manifest[name]['rows']:,} rows -> {target} (sha256 {manifest[name]['sha256'][:12]})")
    log(f"manifest: {manifest_path}")
    return manifest


def download_checked(spec: HealthBenchFile, url: str, target: Path) -> dict:
    """The file at url in target, checked, or nothing in target and a FetchError."""
    partial = target.with_name(f".{target.name}.part")
    archive = target.with_name(f".{target.name}.zip.part")
    try:
        downloaded = download(url, archive if spec.member else partial)
        if spec.member:
            extract(archive, spec.member, partial, url)
        rows = check_rows(partial, spec.layout, f"{url}:{spec.member}" if spec.member else url)
        entry = {"file": target.name, "url": url, "layout": spec.layout, "rows": rows, "sha256": sha256_of(partial)}
        if spec.member:  # the archive's hash too: it is what the store serves
            entry |= {"member": spec.member, "archive_sha256": downloaded}
        os.replace(partial, target)
        return entry | {"fetched_at": datetime.now(UTC).isoformat(timespec="seconds")}
    finally:
        partial.unlink(missing_ok=True)
        archive.unlink(missing_ok=True)


def download(url: str, path: Path) -> str:
    """url's bytes in path; their sha256. Fails when fewer bytes arrive than the server announced."""
    import http.client
    import urllib.error
    import urllib.request

    digest, size = hashlib.sha256(), 0
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response, open(path, "wb") as out:
            announced = response.headers.get("Content-Length")
            while chunk := response.read(1 << 20):
                out.write(chunk)
                digest.update(chunk)
                size += len(chunk)
    except urllib.error.HTTPError as error:
        raise FetchError(f"{url}: HTTP {error.code} {error.reason}") from None
    except http.client.IncompleteRead as error:
        raise FetchError(f"{url}: the download stopped after {size + len(error.partial):,} bytes") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        raise FetchError(f"{url}: {getattr(error, 'reason', None) or error}") from None
    if announced is not None and size != int(announced):  # read() ends quietly on a connection closed early
        raise FetchError(f"{url}: the download stopped at {size:,} of {int(announced):,} bytes")
    return digest.hexdigest()


def extract(archive: Path, member: str, path: Path, url: str) -> None:
    """The archive's file named `member` (at any depth) in path."""
    try:
        with zipfile.ZipFile(archive) as opened:
            found = [name for name in opened.namelist() if name.rsplit("/", 1)[-1] == member]
            if len(found) != 1:
                raise FetchError(f"{url}: holds {len(found)} files named {member}: {', '.join(opened.namelist())}")
            with opened.open(found[0]) as inside, open(path, "wb") as out:
                while chunk := inside.read(1 << 20):
                    out.write(chunk)
    except zipfile.BadZipFile as error:
        raise FetchError(f"{url}: not a readable zip archive ({error})") from None


def check_rows(path: Path, layout: str, where: str) -> int:
    """How many rows path holds; a FetchError naming where and the line at the first that is not a row of layout."""
    check = healthbench_row if layout == "healthbench" else professional_row
    rows = 0
    with open(path, "rb") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as error:  # JSONDecodeError, or bytes that are not UTF-8
                raise FetchError(f"{where}: line {number}: not JSON ({error})") from None
            problem = check(row) if isinstance(row, dict) else "not a JSON object"
            if problem:
                raise FetchError(f"{where}: line {number}: {problem}")
            rows += 1
    if not rows:
        raise FetchError(f"{where}: no rows")
    return rows


def healthbench_row(row: dict) -> str | None:
    """What is wrong with a HealthBench row (prompt, prompt_id, rubrics with criterion, points, tags), or None."""
    if not isinstance(row.get("prompt_id"), str) or not row["prompt_id"]:
        return "no 'prompt_id'"
    return messages_problem(row.get("prompt"), "prompt") or items_problem(
        row.get("rubrics"), "rubrics", "criterion", tags=True
    )


def professional_row(row: dict) -> str | None:
    """What is wrong with a HealthBench Professional row (id, conversation.messages, rubric_items with
    criterion_text and points), or None."""
    if not isinstance(row.get("id"), str) or not row["id"]:
        return "no 'id'"
    conversation = row.get("conversation")
    return messages_problem(
        conversation.get("messages") if isinstance(conversation, dict) else None, "conversation.messages"
    ) or items_problem(row.get("rubric_items"), "rubric_items", "criterion_text", tags=False)


def messages_problem(messages, key: str) -> str | None:
    if not isinstance(messages, list) or not messages:
        return f"'{key}' is not a list of messages"
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("content"), str) or "role" not in message:
            return f"{key}[{i}] is not a message with role and content"
    return None


def items_problem(items, key: str, text: str, tags: bool) -> str | None:
    if not isinstance(items, list) or not items:
        return f"'{key}' is not a list of rubric items"
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get(text), str):
            return f"{key}[{i}] has no '{text}'"
        if not isinstance(item.get("points"), int | float) or isinstance(item["points"], bool):
            return f"{key}[{i}] has no number 'points'"
        if tags and not (isinstance(item.get("tags"), list) and all(isinstance(t, str) for t in item["tags"])):
            return f"{key}[{i}] has no list of 'tags'"
    return None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        while chunk := data.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def add_commands(commands) -> None:
    group = commands.add_parser("healthbench", help="HealthBench's files: fetch them where simple-evals reads them")
    actions = group.add_subparsers(title="healthbench commands", metavar="<action>", required=True)
    command = actions.add_parser(
        "fetch",
        help="download HealthBench's files (regular, hard, consensus, professional), check them, record their sha256",
        description="Download HealthBench's files from OpenAI's public store, where simple-evals reads them, check "
        "every line, and write them under --output-dir with healthbench_manifest.json (each file's source, rows and "
        "sha256). A download cut short or garbled leaves no file; a file the manifest still matches is kept.",
        epilog="examples:\n"
        "  rubricrl healthbench fetch                      # all four, in runs/\n"
        "  rubricrl healthbench fetch hard professional    # runs/healthbench_hard.jsonl, "
        "runs/healthbench_professional.jsonl",
    )
    command.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"which files: {', '.join(f'{name} ({spec.file})' for name, spec in FILES.items())} (default: all)",
    )
    command.add_argument(
        "--output-dir", type=Path, default=Path("runs"), help="where the files and the manifest go (default: runs)"
    )
    command.add_argument(
        "--source",
        default=SOURCE,
        metavar="URL",
        help=f"the base URL holding the files in simple-evals' layout, e.g. a mirror (default: {SOURCE})",
    )
    command.set_defaults(run=run_fetch)


def run_fetch(args: argparse.Namespace) -> int:
    fetch(args.names, args.output_dir, args.source, log=lambda line: print(line, file=sys.stderr))
    return 0
