"""LLM-assisted indexing through any OpenAI-compatible chat endpoint.

- :mod:`quarry.ingest.llm.client`: :class:`LLMRuntime` runs batches of requests (cache, concurrency,
  rate limit, retries) and counts calls and tokens for the run report;
- :mod:`quarry.ingest.llm.cache`: answers persisted by (kind, model, prompt version, request hash);
- :mod:`quarry.ingest.llm.sections`: dsRAG-style sectioning with validation and repair;
- :mod:`quarry.ingest.llm.context`: titles, summaries and per-chunk context lines;
- :mod:`quarry.ingest.llm.prompts`: the prompts, schemas and their versions.
"""

from quarry.ingest.llm.client import Job, LLMFailure, LLMRuntime

__all__ = ["Job", "LLMFailure", "LLMRuntime"]
