"""`rubricrl ruft build` (sample K candidates per query, grade, select the best above tau) and `rubricrl ruft train`
(SFT on the selected answers with TRL's SFTTrainer)."""

from rubricrl.config import add_config_arguments


def add_commands(commands) -> None:
    from grading.grader import GradingConfig
    from rubricrl.llm import LLMSettings
    from ruft.build import BuildArgs, run_build
    from ruft.config import RuftConfig
    from ruft.train import TrainArgs, run_train

    ruft = commands.add_parser("ruft", help="RuFT: rubric-scored rejection sampling, then SFT on the best answers")
    actions = ruft.add_subparsers(title="ruft commands", metavar="<action>", required=True)
    build = actions.add_parser("build", help="sample K candidates per query, grade them, keep the best >= tau")
    # one preset serves both commands: build skips the SFTConfig/ModelConfig keys that train reads
    add_config_arguments(
        build,
        [BuildArgs, RuftConfig, GradingConfig, LLMSettings],
        shares_file_with=["trl.SFTConfig", "trl.ModelConfig"],
    )
    build.set_defaults(run=run_build)
    train = actions.add_parser("train", help="fine-tune on a built dataset with TRL's SFTTrainer", allow_abbrev=False)
    add_config_arguments(train, [TrainArgs], trl_types=["trl.SFTConfig", "trl.ModelConfig"])
    train.set_defaults(run=run_train)
