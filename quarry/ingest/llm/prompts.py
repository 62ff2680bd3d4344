"""Prompts and JSON schemas for every LLM request quarry makes.

Each kind of request has its own version. A version is part of every cache key and of the
index's content fingerprint, so editing a prompt (bump its version) re-runs exactly the
requests it shapes, while unchanged prompts keep hitting the cache.
"""

from __future__ import annotations

from quarry.core.settings import RESPONSE_FORMATS

VERSIONS = {"sections": "s1", "document": "d1", "section_summary": "m1", "chunk_context": "c1"}
PROMPT_VERSION = "+".join(f"{k}:{v}" for k, v in sorted(VERSIONS.items()))
CHARS_PER_TOKEN = 4  # budgets are in tokens; text is cut by characters at this rate

SECTIONS_SCHEMA = {
    "type": "object",
    "properties": {
        "sections": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"title": {"type": "string"}, "start_line": {"type": "integer"}},
                "required": ["title", "start_line"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["sections"],
    "additionalProperties": False,
}

DOCUMENT_SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "summary": {"type": "string"}},
    "required": ["title", "summary"],
    "additionalProperties": False,
}

SUMMARY_SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
    "additionalProperties": False,
}

SECTIONS_SYSTEM = (
    "You divide documents into sections for a search index. A section is a run of consecutive lines "
    "about one topic; together the sections cover the text in order, without gaps."
)

SECTIONS_USER = """Below is part of a document as numbered lines, from line {first} to line {last}.

Divide it into sections. For each section give:
- "title": a short descriptive title (at most 10 words) that says what the section is about, so that a \
reader who sees only the title knows what the section covers. Use the document's own heading when it has \
a good one.
- "start_line": the number of the section's first line, between {first} and {last}.

The first section starts at line {first}. List the sections in order. Prefer a few substantial sections \
(usually 5 to 60 lines each); never make a section of every line.

Answer with JSON: {{"sections": [{{"title": "...", "start_line": {first}}}, ...]}}

{lines}"""

DOCUMENT_SYSTEM = "You write titles and one-sentence summaries of documents for a search index."

DOCUMENT_USER = """File name: {file_name}
{title_line}
Here is the start of the document:
<document>
{text}
</document>

Give:
- "title": the document's title. If the document has its own title, use it; otherwise write a short \
descriptive one (at most 12 words).
- "summary": one sentence (at most 40 words) that says what the document is about.

Answer with JSON: {{"title": "...", "summary": "..."}}"""

SECTION_SUMMARY_USER = """Document: {title}
Section: {section}
<section>
{text}
</section>

Write one sentence (at most 30 words) that says what this section of the document is about.

Answer with JSON: {{"summary": "..."}}"""

CHUNK_CONTEXT_USER = """<document>
{document}
</document>
Here is the chunk we want to situate within the whole document:
<chunk>
{chunk}
</chunk>
Please give a short succinct context to situate this chunk within the overall document for the purposes \
of improving search retrieval of the chunk. Answer only with the succinct context and nothing else."""


# How a request asks for JSON, most precise first. Servers differ: OpenAI, vLLM, Ollama and the
# llama.cpp server take OpenAI's ``json_schema``; llama-cpp-python's server rejects it (HTTP 422)
# but constrains output to a schema given as ``{"type": "json_object", "schema": ...}``; some
# servers know only ``json_object``; ``none`` relies on the prompt (every prompt spells out the
# JSON it wants, and answers are parsed leniently).


def response_format(name: str, schema: dict, style: str = "json_schema") -> dict | None:
    """The ``response_format`` asking for JSON that follows ``schema`` in the given ``style``."""
    if style == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
    if style == "json_object_schema":
        return {"type": "json_object", "schema": schema}
    if style == "json_object":
        return {"type": "json_object"}
    if style == "none":
        return None
    raise ValueError(f"unknown response format style {style!r}; choose one of {', '.join(RESPONSE_FORMATS)}")


def clip(text: str, tokens: int) -> str:
    """``text`` cut to about ``tokens`` tokens, at a whitespace when one is near the cut."""
    limit = tokens * CHARS_PER_TOKEN
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", int(limit * 0.9), limit)
    return text[: cut if cut > 0 else limit] + " …"
