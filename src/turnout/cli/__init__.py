"""The command line: ``turnout``'s commands, the demo, and text and tables for the terminal."""
