"""``/healthz`` (the process answers) and ``/readyz`` (the index opens); no key needed."""

from __future__ import annotations

from fastapi import APIRouter, Request

from quarry.api.deps import json_response, state_of
from quarry.api.errors import ApiError

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The server process answers")
def healthz():
    return json_response({"status": "ok"})


@router.get("/readyz", summary="The index can be searched: its committed generation")
def readyz(request: Request):
    from quarry.core.errors import QuarryError

    try:
        generation = state_of(request).index().generation
    except QuarryError:
        raise ApiError(503, "the index cannot be opened now (no index yet, or a damaged store)") from None
    return json_response({"status": "ready", "generation": generation})
