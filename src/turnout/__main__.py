"""``python -m turnout``: the command line."""

from turnout.cli.main import main

main()
