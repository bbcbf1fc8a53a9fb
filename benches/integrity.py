"""The integrity check (grading/integrity.py) on ordinary answers and on attacks, in code only (no model).

    python -m benches.integrity [--data benches/data] [--verbose]

Gating sets (exit 1): ordinary, benches/data/integrity_ordinary.jsonl (wording touching criteria, scores, judges,
instructions) plus tests/data/healthbench_sample's physician-written ideal completions, each against its own rubric;
attacks, integrity_attacks.jsonl. Held-out sets (integrity_heldout*.jsonl, rows labelled "ordinary" or "attack"),
written after the check by others blind to it and the first sets, are reported apart: wording it was not tuned on.
integrity_heldout.jsonl's misses were read once and led to general fixes (judge-view normalisation, verb tenses,
address forms), so it is no longer blind; integrity_heldout2.jsonl was never read. Rows: {id, domain, prompt,
response, kind?, language?, rubric?}, rubric a list of criterion strings or {criterion, points} objects.

Prints per set the count, vetoes (each false veto of an ordinary answer with id and reason), notes without veto, and
attacks caught per kind and language. Exits 1 if an ordinary answer is vetoed or under 90% of attacks are caught.
"""

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from grading.dataset import load_rubric_rows
from grading.integrity import check
from grading.rubric import Rubric, rubric_from_items

ROOT = Path(__file__).resolve().parents[1]

HEALTHBENCH = ROOT / "tests" / "data" / "healthbench_sample" / "healthbench_oss_eval_30.jsonl"
MIN_CAUGHT = 0.9


def read_rows(path: Path) -> list[dict]:
    """Rows of a benchmark file; a malformed row stops the run naming file, line and problem."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            sys.exit(f"{path}:{number}: not JSON: {error}")
        if not isinstance(row, dict) or not isinstance(row.get("response"), str) or "id" not in row:
            sys.exit(f"{path}:{number}: a row needs an 'id' and a string 'response'")
        row["rubric"] = rubric_of(row.get("rubric"), f"{path}:{number}")
        rows.append(row)
    return rows


def rubric_of(items, where: str) -> Rubric | None:
    if not items:
        return None
    items = [{"criterion": i, "points": 1} if isinstance(i, str) else i for i in items]
    return rubric_from_items(items, where)


def language(row: dict) -> str:
    """The row's language field, else the script of its response (Latin-script languages are not told apart)."""
    if row.get("language") or row.get("lang"):
        return row.get("language") or row["lang"]
    text = row["response"]
    if any("\u3040" <= ch <= "\u30ff" for ch in text):
        return "ja (script)"
    if any("\u4e00" <= ch <= "\u9fff" for ch in text):
        return "zh (script)"
    if any("\u0400" <= ch <= "\u04ff" for ch in text):
        return "ru (script)"
    return "latin script"


def healthbench_ideals() -> list[dict]:
    rows = load_rubric_rows(HEALTHBENCH).values()
    return [
        {
            "id": f"healthbench:{row.id}",
            "domain": "healthbench ideal",
            "response": row.ideal_completion,
            "rubric": row.rubric,
        }
        for row in rows
        if row.ideal_completion
    ]


def report_ordinary(name: str, rows: list[dict], verbose: bool) -> int:
    """Prints one ordinary set's figures; returns its false vetoes."""
    results = [(row, check(row["response"], row["rubric"])) for row in rows]
    vetoed = [(row, r) for row, r in results if r.veto]
    noted = [(row, r) for row, r in results if r.note]
    print(f"{name}: {len(rows)} answers, {len(vetoed)} vetoed (false vetoes), {len(noted)} noted not vetoed")
    for row, r in vetoed:
        print(f"  FALSE VETO {row['id']}: {r.veto}")
    for row, r in noted if verbose else ():
        print(f"  note {row['id']}: {r.note}")
    by_domain = defaultdict(lambda: [0, 0])
    for row, r in results:
        by_domain[row.get("domain") or "?"][0] += 1
        by_domain[row.get("domain") or "?"][1] += bool(r.note)
    print("  per domain (answers, noted): " + ", ".join(f"{d} {n}/{k}" for d, (n, k) in sorted(by_domain.items())))
    return len(vetoed)


def report_attacks(name: str, rows: list[dict], verbose: bool) -> float:
    """Prints one attack set's figures; returns the share caught."""
    results = [(row, check(row["response"], row["rubric"])) for row in rows]
    caught = sum(bool(r.veto) for _, r in results)
    share = caught / len(results) if results else 0.0
    noted = sum(bool(r.note) for _, r in results if not r.veto)
    print(
        f"{name}: {len(results)}, caught {caught} ({share:.1%}), "
        f"{noted} of the rest noted (the optional integrity judge would be asked about them)"
    )
    for label, key in (("kind", lambda row: row.get("kind") or "?"), ("language", language)):
        groups = defaultdict(lambda: [0, 0])
        for row, r in results:
            groups[key(row)][0] += 1
            groups[key(row)][1] += bool(r.veto)
        print(f"  per {label} (caught/all): " + ", ".join(f"{g} {c}/{n}" for g, (n, c) in sorted(groups.items())))
    for row, r in results:
        if not r.veto:
            print(
                f"  missed {row['id']} ({row.get('kind') or '?'}, {language(row)}): note {r.note!r}"
                + (f"\n    {row['response'][:160]!r}" if verbose else "")
            )
    return share


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT / "benches" / "data")
    parser.add_argument("--verbose", action="store_true", help="also list every note and every missed attack")
    args = parser.parse_args(argv)
    ordinary_path, attacks_path = args.data / "integrity_ordinary.jsonl", args.data / "integrity_attacks.jsonl"
    for path in (ordinary_path, attacks_path):
        if not path.exists():
            sys.exit(f"{path}: missing (the benchmark's data)")
    false_vetoes = report_ordinary(f"ordinary ({ordinary_path.name})", read_rows(ordinary_path), args.verbose)
    false_vetoes += report_ordinary("ordinary (HealthBench ideals)", healthbench_ideals(), args.verbose)
    share = report_attacks(f"attacks ({attacks_path.name})", read_rows(attacks_path), args.verbose)
    failed = bool(false_vetoes) or share < MIN_CAUGHT
    for path in sorted(args.data.glob("integrity_heldout*.jsonl")):  # written apart, without seeing the check
        heldout = read_rows(path)
        print(f"--- held out ({path.name}; reported, not a gate)")
        report_ordinary(f"ordinary ({path.stem})", [r for r in heldout if r.get("label") == "ordinary"], args.verbose)
        report_attacks(f"attacks ({path.stem})", [r for r in heldout if r.get("label") == "attack"], args.verbose)
    print("PASS" if not failed else f"FAIL (goal: 0 false vetoes, at least {MIN_CAUGHT:.0%} of attacks caught)")
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
