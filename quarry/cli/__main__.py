"""``python -m quarry.cli``: the same command as ``quarry``."""

from quarry.cli.main import main

main()
