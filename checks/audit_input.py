"""The audit's input, regrouped by query with memory flat in the number of verdicts: one pass over every file writes
each answer's verdicts (criterion keys and met, no explanations) into bucket files by query id, then each bucket is
read back alone and its queries handed out whole. Files may come in any order and hold a query's answers anywhere."""

import hashlib
import json
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from checks.audit import Criterion, QueryAnswers
from grading.rubric import RubricError

BUCKET_INPUT_BYTES = 256 * 2**20
"""Input bytes per bucket: a bucket's queries are what memory holds at once (a graded line's explanations, which
make most of its bytes, never reach the buckets)."""
MAX_BUCKETS = 256
"""Open files at once; 256 buckets of 256 MiB hold 64 GiB of graded lines."""


VOTES = {True: "1", False: "0", None: "?"}
MET = {v: k for k, v in VOTES.items()}


def criterion_key(text: str, points: int) -> str:
    return hashlib.blake2b(f"{points}\x1f{text}".encode(), digest_size=8).hexdigest()


class Buckets:
    """Bucket files in a temporary folder (removed on exit); `rubric` rows first, so their criteria set the order."""

    def __init__(self, input_bytes: int):
        self.count = min(MAX_BUCKETS, max(1, -(-input_bytes // BUCKET_INPUT_BYTES)))
        self._dir = tempfile.TemporaryDirectory(prefix="rubricrl-audit-")
        self._files = [open(Path(self._dir.name) / f"{i}.jsonl", "w", encoding="utf-8") for i in range(self.count)]
        self.answers = 0
        self.verdicts = 0

    def __enter__(self) -> "Buckets":
        return self

    def __exit__(self, *exc: object) -> None:
        for f in self._files:
            f.close()
        self._dir.cleanup()

    def _write(self, query_id: str, item: list) -> None:
        """`"<id>"<TAB>[...]`: the id readable without parsing the rest, which stays text until its query's turn."""
        line = json.dumps(query_id, ensure_ascii=False) + "\t" + json.dumps(item, ensure_ascii=False) + "\n"
        self._files[zlib.crc32(query_id.encode()) % self.count].write(line)

    def add_rubric(
        self, query_id: str, criteria: Iterable[tuple[str, int, list[str]]], example_tags: list[str]
    ) -> None:
        self._write(query_id, ["c", [[criterion_key(t, p), t, p, tags] for t, p, tags in criteria], example_tags])

    def add_graded(self, rows: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Graded records (`grade`, `eval`, a RuFT build's candidates, a RuRL run's eval answers): each answer's
        verdicts; criteria text once per run of lines of one query, from its first answer with graded verdicts.
        Verdicts never graded (source "none": a vetoed or empty answer) are no vote, and such an answer no answer to
        the audit (it still names its query, which is reported)."""
        last = None
        for where, record in rows:
            query_id, verdicts = _checked(where, record)
            criteria, keys, mets = [], [], []
            for v in verdicts:
                if v.get("source") == "none":
                    continue
                keys.append(criterion_key(v["criterion"], v["points"]))
                mets.append(VOTES[v["met"]])
                if query_id != last:
                    criteria.append([keys[-1], v["criterion"], v["points"], list(v.get("tags") or [])])
            if query_id != last:
                self._write(query_id, ["c", criteria, None])
                if criteria:  # a vetoed first answer names no criterion: the next graded one will
                    last = query_id
            response = record.get("response")
            answer = (
                hashlib.blake2b(response.encode(), digest_size=8).hexdigest() if isinstance(response, str) else where
            )
            self._write(query_id, ["a", answer, " ".join(keys), "".join(mets)])
            self.answers += 1
            self.verdicts += len(keys)

    def queries(self) -> Iterator[tuple[str, QueryAnswers]]:
        """Every query with what the files said of it, bucket by bucket, in the order each bucket first saw it.
        A bucket is held as its lines' text (about 20 bytes a verdict); one query at a time is parsed."""
        for f in self._files:
            f.close()
        for i in range(self.count):
            lines: dict[str, list[str]] = {}
            with open(Path(self._dir.name) / f"{i}.jsonl", encoding="utf-8") as f:
                for line in f:
                    query_id, _, item = line.partition("\t")
                    lines.setdefault(query_id, []).append(item)
            while lines:
                query_id, items = _pop_first(lines)
                yield json.loads(query_id), _query(items)


def _pop_first(lines: dict[str, list[str]]) -> tuple[str, list[str]]:
    query_id = next(iter(lines))
    return query_id, lines.pop(query_id)


def _query(items: list[str]) -> QueryAnswers:
    query = QueryAnswers()
    for item in items:
        kind, *rest = json.loads(item)
        if kind == "c":
            for key, text, points, tags in rest[0]:
                query.criteria.setdefault(key, Criterion(text, points, tags))
            if rest[1] is not None:
                query.example_tags = rest[1]
        else:
            answer, keys, mets = rest
            votes = query.answers.setdefault(answer, {})
            for key, met in zip(keys.split(), mets):
                votes.setdefault(key, []).append(MET[met])
    return query


def _checked(where: str, record: dict[str, Any]) -> tuple[str, list[dict]]:
    query_id, verdicts = record.get("id"), record.get("verdicts")
    if isinstance(query_id, int) and not isinstance(query_id, bool):
        query_id = str(query_id)
    if not isinstance(query_id, str) or not query_id:
        raise RubricError(f"{where}: a graded record needs an 'id'")
    if not isinstance(verdicts, list) or not all(
        isinstance(v, dict)
        and isinstance(v.get("criterion"), str)
        and isinstance(v.get("points"), int)
        and v.get("met") in (True, False, None)
        for v in verdicts
    ):
        raise RubricError(
            f"{where}: not a graded record: needs 'verdicts', each with 'criterion' text, integer 'points' and "
            "'met' (true, false or null)"
        )
    return query_id, verdicts
