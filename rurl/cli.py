"""`rubricrl rurl train`: GRPO / DAPO with the rubric reward on TRL's GRPOTrainer."""

from rubricrl.config import add_config_arguments
from rubricrl.lazy import when_called


def add_commands(commands) -> None:
    from grading.grader import GradingConfig
    from rubricrl.llm import LLMSettings
    from rurl.config import RurlConfig, TrainArgs

    rurl = commands.add_parser("rurl", help="RuRL: reinforcement learning (GRPO / DAPO) with the rubric reward")
    actions = rurl.add_subparsers(title="rurl commands", metavar="<action>", required=True)
    train = actions.add_parser(
        "train", help="train a policy with GRPO/DAPO on TRL, rewarded by the rubric judge", allow_abbrev=False
    )
    add_config_arguments(
        train, [TrainArgs, RurlConfig, GradingConfig, LLMSettings], trl_types=["trl.GRPOConfig", "trl.ModelConfig"]
    )
    train.set_defaults(run=when_called("rurl.train", "run_train"))  # torch and TRL load when it runs
