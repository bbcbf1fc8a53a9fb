"""`rubricrl export verl|openrlhf` and `rubricrl reward serve`: the data and the reward for other engines' trainers."""


def add_commands(commands) -> None:
    from engines import export_openrlhf, export_verl
    from engines.service_cli import add_commands as add_reward_commands

    export = commands.add_parser("export", help="write a rubric dataset in another engine's format")
    formats = export.add_subparsers(title="formats", metavar="<format>", required=True)
    export_verl.add_format(formats)
    export_openrlhf.add_format(formats)
    add_reward_commands(commands)
