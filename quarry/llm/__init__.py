"""LLM-assisted indexing through any OpenAI-compatible chat endpoint.

- :mod:`quarry.llm.client`: :class:`LLMRuntime` runs batches of requests (cache, concurrency,
  rate limit, retries) and counts calls and tokens for the run report;
- :mod:`quarry.llm.cache`: answers persisted by (kind, model, prompt version, request hash);
- :mod:`quarry.llm.sections`: dsRAG-style sectioning with validation and repair;
- :mod:`quarry.llm.context`: titles, summaries and per-chunk context lines;
- :mod:`quarry.llm.prompts`: the prompts, schemas and their versions.
"""

from quarry.llm.client import Job, LLMFailure, LLMRuntime

__all__ = ["Job", "LLMFailure", "LLMRuntime"]
