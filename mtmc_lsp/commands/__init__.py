"""One module per ``mtmc`` subcommand; each defines ``add_arguments(parser)`` and ``run(args) -> int``."""
