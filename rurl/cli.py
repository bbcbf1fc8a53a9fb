"""`rubricrl rurl train`: GRPO / DAPO with the rubric reward on TRL's GRPOTrainer."""

from rubricrl.config import add_config_arguments


def add_commands(commands) -> None:
    from grading.grader import GradingConfig
    from rubricrl.llm import LLMSettings
    from rurl.config import RurlConfig, TrainArgs
    from rurl.train import run_train

    rurl = commands.add_parser("rurl", help="RuRL: reinforcement learning (GRPO / DAPO) with the rubric reward")
    actions = rurl.add_subparsers(title="rurl commands", metavar="<action>", required=True)
    train = actions.add_parser(
        "train", help="train a policy with GRPO/DAPO on TRL, rewarded by the rubric judge", allow_abbrev=False
    )
    add_config_arguments(
        train, [TrainArgs, RurlConfig, GradingConfig, LLMSettings], trl_types=["trl.GRPOConfig", "trl.ModelConfig"]
    )
    train.set_defaults(run=run_train)
    from rurl.export_verl import add_command as add_export_command  # `export verl`: the data for verl's trainer
    from rurl.service_cli import add_commands as add_reward_commands  # `reward serve`: the reward for other engines

    add_export_command(commands)
    add_reward_commands(commands)
