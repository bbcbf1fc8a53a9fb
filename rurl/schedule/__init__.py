"""How batches reach the update: one step ahead (one_step_ahead.py, with the generating weights' log-probabilities from
sampled_logps.py), dynamic sampling (dynamic_sampling.py, its groups in groups.py), the no-update gate
(update_gate.py)."""
