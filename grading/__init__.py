"""Grading: an LLM judge decides each rubric criterion; verdicts become scores and rewards."""
