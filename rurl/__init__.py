"""RuRL: GRPO / DAPO on TRL with the rubric reward."""
