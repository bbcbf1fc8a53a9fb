"""rubricrl: rubric-based rewards for LLM post-training."""

__version__ = "0.1.0"
