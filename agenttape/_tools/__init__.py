"""The command line, its subcommands, the pytest plugin and the bootstrap of ``agenttape run``."""
