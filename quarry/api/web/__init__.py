"""The web pages of ``quarry api`` (search, documents, runs, status), served at ``/``: one more
router over the same index, keys and document permissions as ``/v1`` (see :mod:`.pages`)."""
