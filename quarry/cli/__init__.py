"""The ``quarry`` command: a thin Click layer over the library (``quarry.cli.main``)."""
