"""RuFT: rejection-sampling fine-tuning on the best rubric-graded candidates."""
