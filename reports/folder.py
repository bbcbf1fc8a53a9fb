"""What a report knows about one output folder, as plain data: collect.py fills it, html.py and markdown.py print it."""

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Kind = Literal["eval", "rurl", "ruft_build", "ruft_train", "audit", "probe"]
KIND_NAMES: dict[str, str] = {
    "eval": "eval",
    "rurl": "RuRL run",
    "ruft_build": "RuFT build",
    "ruft_train": "SFT run",
    "audit": "rubric audit",
    "probe": "reward probe",
}
COMMANDS: dict[str, str] = {
    "eval": "rubricrl eval",
    "rurl": "rubricrl rurl train",
    "ruft_build": "rubricrl ruft build",
    "ruft_train": "rubricrl ruft train",
    "audit": "rubricrl audit",
    "probe": "rubricrl probe",
}
"""The command that writes each kind of folder."""


@dataclass
class Verdict:
    criterion: str
    points: int
    met: bool | None
    """None: undecided (the judge failed, a tied vote, or not graded). For points < 0, met = the fault is present."""
    explanation: str = ""
    tags: list[str] = field(default_factory=list)
    source: str = ""
    """judge, rule, ... (grading/judge.py); empty where the file does not say."""


@dataclass
class Example:
    id: str
    prompt: list[dict[str, str]] | None
    """The query's messages; None where the folder does not hold them and the rubric file was not found."""
    response: str | None
    score: float | None
    """The score the report counts (grading.report.example_metrics' overall_score); None: unscored."""
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Short facts shown beside the score: "kept", "finish: length", "integrity flag: ...", a policy error."""
    explanation: str = ""
    """Rating modes: the judge's explanation of its rating."""
    reference: str | None = None
    """A reference answer (RaR) or HealthBench's ideal completion, where the rubric file has one."""
    candidates: list["Example"] = field(default_factory=list)
    """RuFT build: one Example per query, its K graded candidates here. RuRL run: a held-out row's answer at the
    last eval, its answers at the earlier evals here."""
    candidates_title: str = "Candidates"
    """The heading over `candidates` on the page."""


@dataclass
class BuildPoints:
    """One point per scored candidate of a RuFT build, for the histogram and the length-vs-score scatter."""

    scores: list[float]
    lengths: list[int]
    kept: list[bool]
    threshold: float | None


@dataclass
class Folder:
    path: Path
    kind: Kind
    label: str
    facts: dict[str, str] = field(default_factory=dict)
    """What its config / manifest says (models, judge, counts), in the order shown."""
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    """HealthBench-style reports (grading.report.build_report's shape), by column name: {"eval": ...}, or
    {"all candidates": ..., "kept": ...}, or {"eval, step 2": ..., "eval, step 40": ...}."""
    headline: str | None = None
    """The report a comparison shows for this folder (a key of `reports`)."""
    evals: list[dict[str, Any]] = field(default_factory=list)
    """RuRL run: every in-training eval report (eval.jsonl), one per step in step order, with its `step`."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """Trainer log history (transformers' `state.log_history`): one dict per logged step."""
    history_source: str = ""
    scores: list[float] = field(default_factory=list)
    """Per-example scores, for the histogram."""
    graded: list[dict[str, Any]] = field(default_factory=list)
    """An eval folder: its graded records, which a comparison of evals pairs by id (reports/distinguish.py)."""
    scores_label: str = ""
    build: BuildPoints | None = None
    retention: dict[str, int] | None = None
    """RuFT build: queries finished, kept, below tau."""
    examples: list[Example] = field(default_factory=list)
    examples_total: int = 0
    examples_source: str = ""
    notes: list[str] = field(default_factory=list)
    """What is missing or was left out, said on the page."""
    ledger: dict[str, Any] | None = None
    """A RuRL run, or an eval of several answers per query: the criterion ledger's headline (grading/ledger.py)."""
    ledger_table: Any = None
    """... and its table (ledger.parquet, a pyarrow table), for the plot."""
    moved: list[dict[str, Any]] = field(default_factory=list)
    """A RuRL run: the criteria whose pass rate moved most over the run (criteria.json rows)."""
    evolved: list[dict[str, Any]] = field(default_factory=list)
    """A RuRL run with rurl.evolve: every evolved criterion (rubric_buffer.json), active and retired."""
    audit: dict[str, Any] | None = None
    """A rubric audit's summary.json (checks/audit.py's DatasetAudit.summary)."""
    probe: dict[str, Any] | None = None
    """A reward probe's summary.json (checks/probe_analysis.py), with its exploitable criteria (`flagged`)."""

    @property
    def kind_name(self) -> str:
        return KIND_NAMES[self.kind]

    @property
    def command(self) -> str:
        return COMMANDS[self.kind]

    def series(self, key: str) -> list[tuple[float, float]]:
        """(step, value) for each logged step with a finite number under `key`."""
        return [
            (entry["step"], float(entry[key]))
            for entry in self.history
            if isinstance(entry.get(key), int | float)
            and not isinstance(entry.get(key), bool)
            and math.isfinite(entry[key])
            and "step" in entry
        ]

    def history_keys(self, prefix: str = "") -> list[str]:
        """The numeric keys of the log history that start with `prefix`, in first-seen order."""
        keys: dict[str, None] = {}
        for entry in self.history:
            for key, value in entry.items():
                if key.startswith(prefix) and isinstance(value, int | float) and not isinstance(value, bool):
                    keys[key] = None
        return list(keys)


def comparison_findings_of(folders: "list[Folder] | tuple[Folder, ...]") -> list[str]:
    """What a comparison of the eval folders among `folders` can claim (reports/distinguish.py), the first the
    reference; none with fewer than two."""
    from reports.distinguish import comparison_findings

    probes = {f.label: f.probe for f in folders if f.kind == "probe" and f.probe}
    return comparison_findings({f.label: f.graded for f in folders if f.kind == "eval" and f.graded}, probes)
