"""From files to embedded chunks: discover, plan, parse, section, context, chunk, embed.

Plain functions over batches; ``tasks/`` wraps them as Prefect tasks and ``flows/`` wires them.
"""
