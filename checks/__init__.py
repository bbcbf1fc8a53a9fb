"""Checking the reward before and while it trains a policy: is it paying for what the rubric asks?

- The audit of graded rubrics (`rubricrl audit`): audit.py, the flags and their statistics over answers grouped by
  query (audit_input.py); audit_cli.py the command, audit_summary.py its tables and charts.
- The probes (`rubricrl probe`): what a judge pays answers with no substance. probes.py builds them, probing.py
  grades them as training grades, probe_analysis.py counts them, probe_test.py is the test behind `exploitable`;
  probe_cli.py the command, probe_summary.py its tables and chart. RuRL probes its training rows (the preflight)
  and each evolved criterion with them.
- The tests behind flags and alarms (evidence.py), for the audit here and RuRL's alarms.
- A judge against human labels (agreement.py), HealthBench's meta-evaluation (metaeval.py), the study that runs
  both (study.py) and its table (agreement_table.py)."""
