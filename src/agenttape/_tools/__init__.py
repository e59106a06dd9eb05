"""The command line, its subcommands and the pytest plugin."""
