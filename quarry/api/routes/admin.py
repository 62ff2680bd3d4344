"""``GET /v1/status`` (counts of what the caller may read) and ``GET /v1/runs`` (admin keys only)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from quarry.api.auth import Caller
from quarry.api.deps import admin_of, caller_of, index_of, json_response

router = APIRouter(prefix="/v1", tags=["admin"])


@router.get("/status", summary="Documents, chunks, model and generation (of what the caller may read)")
def status(caller: Caller = Depends(caller_of), index=Depends(index_of)):
    return json_response(index.status(principals=caller.principals))


@router.get("/runs", summary="Index runs, newest first (admin keys)")
def runs(limit: int = Query(20, ge=1, le=1000), caller: Caller = Depends(admin_of), index=Depends(index_of)):
    from quarry.core.models import RunReport

    with index.pinned() as snap:
        items = [RunReport.from_row(r).to_dict() for r in index.runs(limit)]
        return json_response({"generation": snap.pointer.generation, "runs": items})
