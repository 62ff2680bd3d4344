"""From files to embedded chunks: discover, plan, parse, section, context, chunk, embed.

Plain functions over batches; ``tasks/`` wraps them as Prefect tasks and ``flows/`` wires them.
"""


def check_settings(settings) -> None:
    """Raise :class:`~quarry.core.errors.ConfigError` when ``settings`` name an embedding backend,
    sectioner or context writer that is not registered (the message lists the registered ones).
    Imports the modules that register the built-ins; none of them loads a model or a client SDK."""
    from quarry.ingest.context import CONTEXT_WRITERS
    from quarry.ingest.embedders.base import EMBEDDERS
    from quarry.ingest.sectioning import SECTIONERS

    EMBEDDERS.check(settings.embed_backend)
    SECTIONERS.check(settings.sectioner)
    CONTEXT_WRITERS.check(settings.context)
