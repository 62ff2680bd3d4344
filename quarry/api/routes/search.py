"""``POST /v1/search``: every option of ``Index.search``; the answer is ``quarry search --format json``'s."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from quarry.api.auth import Caller
from quarry.api.deps import caller_of, index_of, json_response, state_of
from quarry.api.schemas import SearchRequest

router = APIRouter(prefix="/v1", tags=["search"])


@router.post(
    "/search",
    summary="Hybrid search, as the caller may read",
    description="The fields are Index.search's keywords and quarry search's filter flags; the answer is "
    "quarry search --format json's, with the generation it was read from.",
)
def search(body: SearchRequest, request: Request, caller: Caller = Depends(caller_of), index=Depends(index_of)):
    return json_response(body.run(index, caller.principals, tuple(state_of(request).config.rerankers)))
