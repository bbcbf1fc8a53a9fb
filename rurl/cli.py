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
    from rurl import export_openrlhf, export_verl  # `export verl|openrlhf`: the data for other engines' trainers
    from rurl.service_cli import add_commands as add_reward_commands  # `reward serve`: the reward for other engines

    export = commands.add_parser("export", help="write a rubric dataset in another engine's format")
    formats = export.add_subparsers(title="formats", metavar="<format>", required=True)
    export_verl.add_format(formats)
    export_openrlhf.add_format(formats)
    add_reward_commands(commands)
