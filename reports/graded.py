"""A graded record (as `grading.grader.Graded.to_record` writes it: an eval's, a build's candidate, an in-training
eval's answer) as an `Example` for the page."""

from collections.abc import Iterable
from typing import Any

from reports.folder import Example, Verdict


def graded_example(record: dict[str, Any], score: float | None, row: Any = None, notes: Iterable[str] = ()) -> Example:
    """An Example from a graded record (as `grading.grader.Graded.to_record` writes it) and its rubric row."""
    notes = list(notes)
    if record.get("integrity_flag"):
        notes.append(f"integrity flag: {record['integrity_flag']}")
    elif record.get("integrity_note"):
        notes.append(f"integrity note (reward unchanged): {record['integrity_note']}")
    if record.get("no_answer"):
        notes.append(f"no answer: {record['no_answer']}")
    if record.get("policy_error"):
        notes.append(f"policy error: {record['policy_error']}")
    if record.get("judge_failures"):
        notes.append(f"{record['judge_failures']} judge failure(s)")
    if record.get("rating") is not None:
        notes.append(f"rating {record['rating']:.1f} / 10")
    verdicts = [
        Verdict(
            v.get("criterion", ""),
            v.get("points", 0),
            v.get("met"),
            v.get("explanation") or "",
            list(v.get("tags") or ()),
            v.get("source") or "",
        )
        for v in record.get("verdicts") or ()
    ]
    return Example(
        id=str(record.get("id", "")),
        prompt=row.conversation if row else None,
        response=record.get("response"),
        score=score,
        verdicts=verdicts,
        notes=notes,
        explanation=record.get("explanation") or "",
        reference=(row.reference or row.ideal_completion) if row else None,
    )
