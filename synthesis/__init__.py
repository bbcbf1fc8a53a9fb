"""Rubric synthesis: queries in, rubric dataset out (Coarse-to-Fine and Rubrics-as-Rewards)."""
