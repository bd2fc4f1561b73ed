"""`bidaw` subcommands of the services."""
