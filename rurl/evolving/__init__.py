"""Rubrics that evolve during training (evolution.py): what the evolver proposes and which criterion goes in
(evolve_choice.py), the criteria probed before they are admitted (vetting.py), the per-query buffer (rubric_buffer.py),
what a run writes of them (evolve_outputs.py)."""
