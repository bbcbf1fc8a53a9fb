"""`rubricrl audit GRADED... --output-dir DIR`: whether a rubric dataset still tells answers apart, from answers
already graded against it (no judge call). GRADED: a RuFT build folder (its candidates), an eval folder, a RuRL run
(its eval answers) or a graded JSONL from `grade`; several are read as one (the same response graded twice is one
answer with two votes).

    rubricrl audit runs/ruft --output-dir runs/audit
    rubricrl audit runs/eval-a runs/eval-b --rubrics final.parquet --prune duplicate suspect_sign --output-dir out

Writes criteria.jsonl (a line per criterion of each query), queries.jsonl, summary.json, audit.md, charts, and with
--prune a pruned rubric dataset in the input's own schema with pruned.jsonl (what was dropped and why)."""

import argparse
import json
import shutil
import sys
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from checks.audit import FLAGS, OUTCOMES, AuditSettings, DatasetAudit, audit_query, decide, reachable, thresholds
from checks.audit_input import Buckets, criterion_key
from checks.audit_summary import draw, markdown, pct
from checks.probe_analysis import flagged_by
from grading.dataset import iter_rubric_rows
from rubricrl.config import ConfigError, add_config_arguments, load_yaml, parse_settings, resolved, write_resolved
from rubricrl.records import COMPANION_KEY, iter_rows
from rubricrl.runs.jsonl import json_line, write_jsonl, write_whole
from rubricrl.runs.manifest import package_versions, write_manifest

GRADED_FILES = ("candidates.jsonl", "graded.jsonl", "eval_answers.jsonl")
"""A folder's graded answers: a RuFT build's candidates, an eval's records, a RuRL run's eval answers."""


@dataclass
class AuditArgs:
    output_dir: Path
    """Where criteria.jsonl, queries.jsonl, summary.json, audit.md, charts and config.yaml go."""
    rubrics: Path | None = None
    """The rubric dataset (default: the one the first folder's config.yaml names). Its queries without answers are
    reported; --prune needs it."""
    probe: Path | None = None
    """A `rubricrl probe` output folder: each criterion's row in criteria.jsonl gains `probe` (per judge, how often
    answers with no substance earned it, and `exploitable`), and audit.md lists the criteria that are both."""
    prune: list[str] = field(default_factory=list)
    """Write the rubric dataset without the criteria flagged so (any of saturated, dead, duplicate, unreliable,
    suspect_sign; never_triggered: penalties no answer triggered, kept unless named): rubrics.jsonl or .parquet in
    the input's schema, and pruned.jsonl with each dropped criterion, its flags and their evidence. A criterion whose
    test had too little evidence is never dropped. Rubric files only (.jsonl, .parquet)."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.prune) - set(OUTCOMES))
        if unknown:
            raise ValueError(f"prune: unknown flag(s) {unknown}; the outcomes are {', '.join(OUTCOMES)}")


@dataclass
class AuditConfig(AuditSettings):
    config_section: ClassVar[str] = "audit"


def add_commands(commands) -> None:
    audit = commands.add_parser("audit", help="flag criteria that no longer tell graded answers apart")
    audit.add_argument(
        "graded",
        nargs="+",
        type=Path,
        metavar="GRADED",
        help="a RuFT build, eval or RuRL run folder, or a graded JSONL; several are read as one",
    )
    add_config_arguments(audit, [AuditArgs, AuditConfig])
    audit.set_defaults(run=run_audit)


def graded_file(path: Path) -> Path:
    if path.is_dir():
        for name in GRADED_FILES:
            if (path / name).is_file():
                return path / name
        raise ConfigError(f"{path}: no graded answers in this folder; looked for {', '.join(GRADED_FILES)}")
    if not path.is_file():
        raise ConfigError(f"{path}: no such file or folder")
    return path


def default_rubrics(paths: list[Path]) -> Path | None:
    """The rubric dataset the first input was graded against, as its folder's config.yaml (or a graded file's
    <name>.config.yaml) names it."""
    first = paths[0]
    config = first / "config.yaml" if first.is_dir() else first.with_name(first.stem + ".config.yaml")
    rubrics = load_yaml(config).get("rubrics") if config.is_file() else None
    return Path(rubrics) if rubrics else None


def run_audit(args: argparse.Namespace) -> int:
    started = time.monotonic()
    settings, config = parse_settings(args, command="audit")
    files = [graded_file(p) for p in args.graded]
    rubrics = settings.rubrics or default_rubrics(args.graded)
    if settings.prune and rubrics is None:
        raise ConfigError("--prune needs the rubric dataset: give --rubrics")
    out = settings.output_dir
    out.mkdir(parents=True, exist_ok=True)
    write_resolved(out / "config.yaml", resolved([settings, config], graded=[str(p) for p in args.graded]))
    dataset, dropped = DatasetAudit(), {}
    staged = out / ".criteria.staged.jsonl"  # pass 1's rows with their p-values; pass 2 decides and writes them
    p_values = {flag: array("d") for flag in FLAGS}  # 8 bytes a test: millions of criteria fit
    with Buckets(sum(p.stat().st_size for p in files)) as buckets:
        for row in iter_rubric_rows(rubrics) if rubrics else ():
            criteria = [
                (c.text, c.points, [*c.tags, *([f"category:{c.category}"] if c.category else [])])
                for c in row.rubric.criteria
            ]
            buckets.add_rubric(row.id, criteria, list(row.rubric.example_tags))
        for path in files:
            print(f"reading {path}", file=sys.stderr)
            buckets.add_graded(iter_rows(path))
        with open(staged, "wb") as staging:
            for query_id, query in buckets.queries():
                line, rows = audit_query(query_id, query, config)
                staging.write(json_line({"query": line, "rows": rows}))
                for row in rows:
                    for flag, test in row["tests"].items():
                        if reachable(test, config):
                            p_values[flag].append(test["p"])
        answers, verdicts = buckets.answers, buckets.verdicts
    held_to = thresholds(p_values, config)
    probed = probe_index(settings.probe) if settings.probe else None
    prune = set(settings.prune)
    with open(out / "criteria.jsonl", "wb") as criteria_out, open(out / "queries.jsonl", "wb") as queries_out:
        for _, item in iter_rows(staged):
            line, rows = item["query"], [decide(row, held_to, config) for row in item["rows"]]
            if probed is not None:
                for row in rows:
                    row["probe"] = probed.get((line["id"], row["criterion"]))
            dataset.add(line, rows)
            line["flags"] = {flag: n for flag in FLAGS if (n := sum(flag in row["flags"] for row in rows))}
            line["insufficient"] = sum(bool(row["insufficient"]) for row in rows)
            queries_out.write(json_line(line))
            for row in rows:
                criteria_out.write(json_line(row))
                if set(row["flags"]) & prune or (row["never_triggered"] and "never_triggered" in prune):
                    dropped.setdefault(line["id"], {})[criterion_key(row["criterion"], row["points"])] = row
    staged.unlink()
    summary = {**dataset.summary(held_to, config), "graded_answers": answers, "verdicts": verdicts}
    if probed is not None:
        summary["probe"] = probe_links(settings.probe, out / "criteria.jsonl")
    write_whole(out / "summary.json", json.dumps(summary, indent=2))
    pruned = prune_dataset(rubrics, dropped, out) if settings.prune else None
    charts = draw(summary, out)
    write_whole(out / "audit.md", markdown(summary, config, files, rubrics, pruned))
    seconds = time.monotonic() - started
    write_manifest(
        out,
        {
            "command": "audit",
            "output_dir": str(out),
            "config": resolved([settings, config]),
            "inputs": [str(p.resolve()) for p in files],
            "rubrics": str(rubrics) if rubrics else None,
            "counts": {**{k: v for k, v in summary.items() if not isinstance(v, dict)}, "pruned": pruned},
            "seconds": round(seconds, 1),
            "packages": package_versions(),
        },
    )
    tests = summary["tests"]
    shares = ", ".join(
        f"{f} {pct(summary['flag_shares'][f])} ({tests[f]['flagged']} of {tests[f]['tested']} tested, "
        f"{tests[f]['insufficient']} insufficient)"
        for f in FLAGS
    )
    print(
        f"audited {summary['criteria']} criteria of {summary['queries']} queries from {answers} answers "
        f"({verdicts} verdicts) in {seconds:.1f} s; {summary['queries_with_too_few_answers']} queries with fewer "
        f"than {config.min_answers} graded answers not tested\nflags at false discovery rate {config.fdr:g}: "
        f"{shares}; {summary['never_triggered']} penalties never triggered (kept)\noutput: {out} (audit.md, "
        "summary.json, "
        f"criteria.jsonl, queries.jsonl{''.join(', ' + c.name for c in charts)}"
        f"{', pruned.jsonl and the pruned rubrics' if pruned is not None else ''})"
    )
    return 0


def probe_index(folder: Path) -> dict[tuple[str, str], dict]:
    """(row id, criterion) -> {judges: {judge: the kinds that flagged it with their counts and p-values, or the
    probes' pooled counts when none did}, exploitable} from a probe folder's criteria.jsonl."""
    path = folder / "criteria.jsonl"
    if not path.is_file():
        raise ConfigError(f"--probe {folder}: no criteria.jsonl (a `rubricrl probe` output folder holds one)")
    index: dict[tuple[str, str], dict] = {}
    for _, row in iter_rows(path):
        entry = index.setdefault((row["id"], row["criterion"]), {"exploitable": False, "judges": {}})
        entry["judges"][row["judge"]] = flagged_by(row) or f"not shown, {row['credited']} of {row['decided']} pooled"
        entry["exploitable"] = entry["exploitable"] or row["exploitable"]
    return index


def probe_links(folder: Path, criteria: Path) -> dict:
    """What audit.md shows of the probe: the criteria exploitable, and those the audit flagged too."""
    both, exploitable = [], 0
    for _, row in iter_rows(criteria):
        if row.get("probe") and row["probe"]["exploitable"]:
            exploitable += 1
            if row["flags"]:
                both.append(
                    [
                        row["id"],
                        row["criterion"][:90],
                        ", ".join(row["flags"]),
                        "; ".join(f"{judge}: {counts}" for judge, counts in row["probe"]["judges"].items()),
                    ]
                )
    return {"folder": str(folder), "exploitable": exploitable, "flagged_and_exploitable": both}


RUBRIC_COLUMNS = ("rubrics", "rubric", "rubric_items")
"""Where a rubric row keeps its criteria, as stored: ours and HealthBench's, a single-rubric file's, HealthBench
Professional's."""


def prune_dataset(rubrics: Path, dropped: dict[str, dict[str, dict]], out: Path) -> dict[str, int]:
    """The rubric file without the dropped criteria, in its own schema (a Parquet file's metadata, and the
    companion it names, come along); pruned.jsonl says what went and why."""
    suffix = rubrics.suffix.lower()
    if suffix not in (".jsonl", ".parquet") or not rubrics.is_file():
        raise ConfigError(f"{rubrics}: --prune writes .jsonl or .parquet rubric files only")
    kept, removed = [], 0
    with open(out / "pruned.jsonl", "wb") as why:
        for (where, raw), row in zip(_raw_rows(rubrics), iter_rubric_rows(rubrics)):
            query_id = row.id  # as every command reads it
            column = next((name for name in RUBRIC_COLUMNS if name in raw), RUBRIC_COLUMNS[0])
            items = raw.get(column) or []
            if len(items) != len(row.rubric.criteria):
                raise ConfigError(
                    f"{where}: cannot prune: {len(items)} rubric items read as {len(row.rubric.criteria)}"
                )
            gone = dropped.get(query_id, {})
            keep = []
            for item, criterion in zip(items, row.rubric.criteria):
                found = gone.get(criterion_key(criterion.text, criterion.points))
                if found is None:
                    keep.append(item)
                else:
                    removed += 1
                    why.write(
                        json_line(
                            {
                                "id": query_id,
                                "criterion": criterion.text,
                                "points": criterion.points,
                                "flags": found["flags"],
                                "never_triggered": found["never_triggered"],
                                "tests": {flag: found["tests"][flag] for flag in found["flags"]},
                            }
                        )
                    )
            kept.append({**raw, column: keep})
    target = out / rubrics.name
    if suffix == ".jsonl":
        write_jsonl(target, kept)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pq.read_schema(rubrics)
        pq.write_table(pa.Table.from_pylist(kept, schema=schema), target)
        companion = json.loads((schema.metadata or {}).get(COMPANION_KEY, b"null"))
        if companion and (rubrics.parent / companion["file"]).is_file():
            shutil.copyfile(rubrics.parent / companion["file"], out / companion["file"])
    return {"queries": len(kept), "criteria_dropped": removed}


def _raw_rows(path: Path):
    """The file's rows as stored (a Parquet file without its companion's columns)."""
    if path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        for index, row in enumerate(pq.read_table(path).to_pylist(), start=1):
            yield f"{path}: row {index}", row
    else:
        yield from iter_rows(path)
