"""``POST /v1/admin/reload-model``: load the model again (or another directory) without dropping requests."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from model.artifact import ArtifactError
from service.deps import Authorized, JsonBody, RunnerDep
from service.errors import ERROR_RESPONSES, ApiError

router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=ERROR_RESPONSES, dependencies=[Authorized, JsonBody])


class ReloadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo ("model_dirr") must not reload the current model with 200

    model_dir: str | None = Field(default=None, description="Another model directory; default: the one served")


class ReloadAnswer(BaseModel):
    model_version: str
    previous_version: str


@router.post("/reload-model", response_model=ReloadAnswer)
async def reload_model(runner: RunnerDep, body: ReloadRequest | None = None) -> ReloadAnswer:
    """Load and validate the model, then swap it in; requests in flight finish on the old one. A refused model
    (missing, corrupted, other contract) answers 422 and the old model keeps serving. Campaigns move to the new
    model at their next slot (states hold raw stats only). SIGHUP does the same for the configured directory."""
    directory = Path(body.model_dir) if body and body.model_dir else None
    try:  # loads run one at a time (ModelRunner.reload): concurrent reloads answer in the order they swapped
        previous, version = await runner.reload_async(directory)
    except ArtifactError as exc:
        raise ApiError(422, "model_refused", f"{exc}; still serving {runner.version}") from None
    return ReloadAnswer(model_version=version, previous_version=previous)
