"""Plumbing shared by every caller of an OpenAI-compatible API (embeddings, chat, LLM rerank): the
client (:mod:`.client`), retries (:mod:`.retry`), rate limits and usage counters
(:mod:`.ratelimit`) and messages that never carry a key (:mod:`.redaction`).

Example::

    client = make_client(settings.openai_base_url, settings.openai_api_key)
    usage = Usage()
    response = call_with_retries(lambda: client.embeddings.create(model=m, input=texts),
                                 on_retry=lambda exc, attempt, delay: usage.add_retry())
    usage.add(response.usage)
"""
