"""``GET /v1/documents/{id}`` and ``GET /v1/chunks/{id}``: 404 for what does not exist and for what the
caller may not read alike."""

from __future__ import annotations

import re

from fastapi import APIRouter, Depends, Query

from quarry.api.auth import Caller
from quarry.api.deps import caller_of, index_of, json_response
from quarry.api.schemas import MAX_WINDOW
from quarry.core.errors import NotFound

router = APIRouter(prefix="/v1", tags=["documents"])
_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")


def checked_id(kind: str, value: str) -> str:
    if not _ID.match(value):
        raise NotFound(f"no {kind} with that id in this index")
    return value


@router.get("/documents/{doc_id}", summary="A document: metadata, sections, chunk ids and spans")
def document(doc_id: str, caller: Caller = Depends(caller_of), index=Depends(index_of)):
    return json_response(index.document(checked_id("document", doc_id), principals=caller.principals))


@router.get("/chunks/{chunk_id}", summary="A chunk: text, header, page span; neighbours on request")
def chunk(
    chunk_id: str,
    neighbours: int = Query(0, ge=0, le=MAX_WINDOW, description="Chunks on each side."),
    before: int | None = Query(None, ge=0, le=MAX_WINDOW),
    after: int | None = Query(None, ge=0, le=MAX_WINDOW),
    caller: Caller = Depends(caller_of),
    index=Depends(index_of),
):
    around = (neighbours if before is None else before, neighbours if after is None else after)
    return json_response(
        index.chunk(
            checked_id("chunk", chunk_id), neighbours=around if any(around) else 0, principals=caller.principals
        )
    )
