"""How much credit answers with no substance earn from the embedded judge, per probe kind and verdict format: the
probes of `rubricrl probe` on the HealthBench sample the project ships, its physician-written ideal completions as the
controls.

    python -m benches.probe_healthbench [--rows 6]

The first --rows sample examples that have an ideal completion, per criterion, each verdict format in turn
(explained, verdict_only, probability), no cache (every verdict asked). Prints per kind and format the mean share of
positive points earned (the control's beside them), the criteria flagged exploitable, and the cost: probes and judge
calls per row, wall time per format. A baseline for a real judge: a 135M judge says "met" to most things, so its
shares say more about it than about the rubrics. Reuses a running `rubricrl serve`, else starts a server.
"""

import argparse
import asyncio
import time
from pathlib import Path

from checks.probe_analysis import criteria_rows, summary
from checks.probe_summary import kind_table
from checks.probe_test import ProbeTest
from checks.probing import Judge, probe_records, usable_rows
from grading.dataset import load_rubric_rows
from grading.grader import GradingConfig
from rubricrl.llm import LLMSettings, open_llm
from rubricrl.markdown import md_table

SAMPLE = Path(__file__).resolve().parents[1] / "tests" / "data" / "healthbench_sample" / "healthbench_oss_eval_30.jsonl"
FORMATS = ("explained", "verdict_only", "probability")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=6)
    args = parser.parse_args()
    rows = [row for row in load_rubric_rows(SAMPLE).values() if row.ideal_completion][: args.rows]
    rows = usable_rows(rows, str(SAMPLE))
    results = {}
    with open_llm(LLMSettings(cache=False), ["judge"], cpu_budgets=GradingConfig().cpu_max_tokens()) as session:
        for verdict_format in FORMATS:
            judge = Judge(verdict_format, GradingConfig(verdict_format=verdict_format))
            started = time.monotonic()

            async def run(judge=judge):
                async with session.client() as client:
                    return await probe_records(client, rows, [judge])

            records = asyncio.run(run())
            seconds = time.monotonic() - started
            criteria = criteria_rows(records, ProbeTest())
            results[verdict_format] = (summary(records, criteria, len(rows), seconds, ProbeTest()), seconds)
    together = {"judges": list(FORMATS), "kinds": {f: found["kinds"][f] for f, (found, _) in results.items()}}
    print(f"{len(rows)} HealthBench sample rows, {sum(len(r.rubric.criteria) for r in rows)} criteria")
    print("\n".join(md_table(*kind_table(together))))
    for verdict_format, (found, seconds) in results.items():
        cost, flagged = found["cost"][verdict_format], found["exploitable"][verdict_format]
        print(
            f"{verdict_format}: exploitable {flagged['flagged']} of {flagged['criteria']} positive criteria; "
            f"{cost['probes_per_row']} probes and {cost['judge_calls_per_row']} judge calls per row; "
            f"{seconds:.0f} s ({seconds / len(rows):.0f} s per row)"
        )


if __name__ == "__main__":
    main()
