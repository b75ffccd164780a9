"""One module per ``swa-kit`` subcommand (see :mod:`swa_kit.cli`)."""
