"""Watching a run: the judge-failure guard (guards.py), the in-training evaluation (evaluate.py, its eval.jsonl in
eval_log.py), the divergence and grader-talk alarms (alarms.py), the gold-best checkpoint (gold_best.py), the summary
(summary.py)."""
