"""``python -m quarry``: the same command as ``quarry``."""

from quarry.cli import main

main()
