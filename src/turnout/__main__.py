"""``python -m turnout``: the command line."""

from turnout.cli import main

main()
