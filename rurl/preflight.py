"""What `rurl train` asks before the policy loads: the judge answers its verdict format (one grade), and, when asked
(`rurl.probe_rows`), how much credit answers with no substance earn from the training judge and rubrics
(`rubricrl probe`'s probes on a seeded sample of the training rows, graded as training grades them).

The probe preflight writes probe_preflight.json into the run folder (per kind the mean share of positive points
earned, the control's, the exploitable criteria with the test behind each) and says it on one line. When a criterion
is exploitable (a probe kind earns it more often than `rurl.probe_tolerance` allows, checks/probe_test.py) it warns,
or with `rurl.on_probe: stop` ends the command (exit 2) before any GPU time is spent.
"""

import asyncio
import json
import sys
import time
from pathlib import Path

from checks.probe_analysis import criteria_rows, summary
from checks.probes import CONTROL, TARGETED, positive_texts
from checks.probing import Judge, as_plain_text, kinds_for, probe_records, sampled
from grading.dataset import RubricRow
from grading.grader import Grader, GradingConfig
from rubricrl.config import ConfigError
from rubricrl.errors import UserError
from rubricrl.llm import LLMClient
from rubricrl.runs.jsonl import write_whole
from rurl.config import RurlConfig
from rurl.outputs import COMMAND

PREFLIGHT_ANSWER = "Drink water and rest; see a doctor if it gets worse."
"""The answer the preflight asks the judge to grade: any text will do, the verdict's format is what is checked."""
PROBE_FILE = "probe_preflight.json"


def preflight(roles, grading: GradingConfig, row: RubricRow) -> None:
    """One grade of a fixed answer against `row`'s rubric, without the cache (a cached answer proves nothing about
    the judge now): it must come back with every verdict decided."""
    judge = roles[grading.judge_role]

    async def ask():
        async with LLMClient(roles, cache=None, max_retries=1) as client:
            grader = Grader(client, as_plain_text(grading))
            return await grader.grade(row.conversation, PREFLIGHT_ANSWER, row.rubric, row.reference)

    started = time.monotonic()
    try:
        graded = asyncio.run(ask())
    except UserError as error:
        raise ConfigError(f"judge preflight: {error}") from None
    if graded.reward is None or graded.judge_failures:
        raise ConfigError(
            f"judge preflight: role '{grading.judge_role}' ({judge.model} at {judge.base_url}) did not "
            f"answer the {grading.mode} verdict format for row {row.id!r} ({graded.judge_failures} "
            f"verdict(s) failed; explanation: {graded.explanation[:200]!r}): check the model, its "
            "max_tokens and structured_outputs"
        )
    print(f"{COMMAND}: judge preflight: {judge.model} answered in {time.monotonic() - started:.1f} s", file=sys.stderr)


def probe_preflight(session, grading: GradingConfig, rows: list[RubricRow], rurl: RurlConfig, output_dir: Path) -> dict:
    """The probes on `rurl.probe_rows` training rows (seeded by `rurl.probe_seed`), graded by the training judge on
    the main process (one cost, one decision), told to every process; returns what probe_preflight.json holds."""
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    state = PartialState()
    result = _probe(session, grading, rows, rurl, output_dir) if state.is_main_process else None
    if state.num_processes > 1:
        result = broadcast_object_list([result])[0]
    flagged = result.get("exploitable_criteria", [])
    if flagged:
        first = flagged[0]
        why = (
            f"{len(flagged)} criteria exploitable by answers with no substance, first {first['id']}: "
            f"{first['criterion'][:80]!r}, {first['test']}: the policy can learn that instead of the task (fix the "
            "rubrics or the judge; `rubricrl probe` for all rows)"
        )
        if rurl.on_probe == "stop":
            raise ConfigError(f"probe preflight: {why}; stopped before the policy loads (rurl.on_probe: stop)")
        if state.is_main_process:
            print(f"{COMMAND}: warning: probe preflight: {why}", file=sys.stderr)
    return result


def _probe(session, grading: GradingConfig, rows: list[RubricRow], rurl: RurlConfig, output_dir: Path) -> dict:
    usable = [row for row in rows if positive_texts(row)]
    if not usable:
        print(
            f"{COMMAND}: probe preflight: no training row has a positive criterion: nothing to probe", file=sys.stderr
        )
        return {"rows": 0, "best_paid_kind": None, "best_paid_share": 0.0}
    sample = sampled(usable, rurl.probe_rows, rurl.probe_seed)
    role = session.roles[grading.judge_role]
    judge = Judge.of(grading, role.model)
    kinds = kinds_for(grading.mode)
    started = time.monotonic()

    async def run():
        async with session.client() as client:
            return await probe_records(client, sample, [judge], kinds, progress=False, samples=rurl.probe_per_kind)

    records = asyncio.run(run())
    criteria = criteria_rows(records, rurl.probe_test)
    found = summary(records, criteria, len(sample), time.monotonic() - started, rurl.probe_test)
    kinds_found = found["kinds"].get(judge.name, {})
    # the kinds that answer the whole rubric: a targeted kind's share is a hit rate on one criterion, not comparable
    probes = {kind: v["share"] for kind, v in kinds_found.items() if kind != CONTROL and kind not in TARGETED}
    worst = max(probes, key=probes.get) if probes else None
    fields = ("id", "criterion", "points", "kinds", "tests", "exploited_by", "threshold", "test", "control")
    flagged = [{k: c[k] for k in fields} for c in criteria if c["exploitable"]]
    result = {
        **found,
        "best_paid_kind": worst,
        "best_paid_share": probes[worst] if worst else 0.0,
        "exploitable_criteria": flagged,
    }
    output_dir.mkdir(parents=True, exist_ok=True)
    write_whole(output_dir / PROBE_FILE, json.dumps(result, indent=2))
    control = kinds_found.get(CONTROL)
    reference = f" (the reference answers {control['share']:.0%})" if control else ""
    earned = ", ".join(f"{kind} {share:.0%}" for kind, share in probes.items())
    exploitable = found["exploitable"].get(judge.name, {}).get("criteria", 0)
    print(
        f"{COMMAND}: probe preflight on {len(sample)} training rows ({judge.name}): answers with no substance earned "
        f"{earned} of the positive points{reference}; {len(flagged)} of {exploitable} criteria exploitable "
        f"({rurl.probe_test.describe()}; {output_dir / PROBE_FILE})",
        file=sys.stderr,
    )
    return result


def probe_figures(output_dir: Path, wandb=None) -> dict | None:
    """The run's summary of its probe preflight (probe_preflight.json), also in the wandb run's summary."""
    path = output_dir / PROBE_FILE
    if not path.is_file():
        return None
    found = json.loads(path.read_text())
    figures = {
        "rows": found["rows"],
        "best_paid_kind": found["best_paid_kind"],
        "best_paid_share": found["best_paid_share"],
        "kinds": {kind: v["share"] for judge in found.get("kinds", {}).values() for kind, v in judge.items()},
        "exploitable_criteria": len(found.get("exploitable_criteria", [])),
    }
    if wandb is not None:
        wandb.summary.update({f"probe_preflight/{kind}": share for kind, share in figures["kinds"].items()})
    return figures
