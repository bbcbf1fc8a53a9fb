"""`rubricrl rurl train` as one process of a torchrun launch (tests/test_rurl_multiprocess_eval.py), noting which
held-out prompts this process's evaluation generated answers for: OUT/answered-RANK.jsonl, one line (the prompts'
last messages, padding included) per generation batch.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/rurl_eval_runner.py OUT rurl train ...
"""

import json
import os
import sys
from pathlib import Path

import rurl.watch.evaluate  # installed (`pip install -e`): torchrun runs this file as a script, from any folder
from commands.main import main


def record_answers(out: Path) -> None:
    generate, rank = rurl.watch.evaluate.greedy_answers, os.environ["RANK"]

    def recorded(model, tokenizer, conversations, *args, **kwargs):
        with open(out / f"answered-{rank}.jsonl", "a") as f:
            f.write(json.dumps([c[-1]["content"] for c in conversations]) + "\n")
        return generate(model, tokenizer, conversations, *args, **kwargs)

    rurl.watch.evaluate.greedy_answers = recorded


if __name__ == "__main__":
    record_answers(Path(sys.argv[1]))
    sys.exit(main(sys.argv[2:]))
