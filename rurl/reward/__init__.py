"""The rubric reward TRL calls (rubric_reward.py), with rubric dropout's masks and DAPO's overlong penalty; extra reward
functions by name (extra.py); advantages computed criterion by criterion from the verdicts (criterion_advantage.py)."""
