"""``POST /v1/admin/reload-model``: load the model again (or another directory) without dropping requests."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from model.artifact import CARD_FILE, ArtifactError
from service.deps import Authorized, JsonBody, RunnerDep
from service.errors import ApiError, error_responses

router = APIRouter(prefix="/v1/admin", tags=["admin"], dependencies=[Authorized, JsonBody])


class ReloadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo ("model_dirr") must not reload the current model with 200

    model_dir: str | None = Field(
        default=None,
        pattern=r"^[^\x00]*$",
        description="Another model directory, on the service's machine (404 if it holds no model card); null or "
        "empty: the configured one",
    )


class ReloadAnswer(BaseModel):
    model_version: str
    previous_version: str


@router.post(
    "/reload-model",
    response_model=ReloadAnswer,
    responses=error_responses(
        401,
        404,
        413,
        415,
        422,
        s404="`unknown_model_dir`: `model_dir` holds no model card; the old model keeps serving",
        s422="`model_refused` (incomplete, corrupted, another contract; the old model keeps serving) or "
        "`invalid_request`",
    ),
)
async def reload_model(runner: RunnerDep, body: ReloadRequest | None = None) -> ReloadAnswer:
    """Load and validate the model, then swap it in; requests in flight finish on the old one. A directory without
    a model card answers 404, a refused model (incomplete, corrupted, other contract) 422; either way the old
    model keeps serving. Campaigns move to the new model at their next slot (states hold raw stats only). SIGHUP
    does the same for the configured directory."""
    directory = Path(body.model_dir) if body and body.model_dir else None
    if directory is not None and not _holds_a_card(directory):
        raise ApiError(
            404, "unknown_model_dir", f"{directory}: no model here (no {CARD_FILE}); still serving {runner.version}"
        )
    try:  # loads run one at a time (ModelRunner.reload): concurrent reloads answer in the order they swapped
        previous, version = await runner.reload_async(directory)
    except ArtifactError as exc:
        raise ApiError(422, "model_refused", f"{exc}; still serving {runner.version}") from None
    return ReloadAnswer(model_version=version, previous_version=previous)


def _holds_a_card(directory: Path) -> bool:
    try:
        return (directory / CARD_FILE).is_file()
    except OSError:  # a name too long, a directory it may not read: no model this service can load
        return False
