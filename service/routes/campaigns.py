"""``PUT /v1/campaigns/{campaign_id}`` (start or re-confirm an episode) and ``GET`` (where it stands)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from service.deps import Authorized, EpisodesDep, JsonBody
from service.errors import error_responses
from service.schemas import CAMPAIGN_ID, CampaignRegistration, CampaignView
from service.views import campaign_view

router = APIRouter(prefix="/v1/campaigns", tags=["campaigns"])

CampaignPath = Annotated[str, Path(pattern=CAMPAIGN_ID.pattern, description="1-128 of letters, digits and . _ : -")]


@router.put(
    "/{campaign_id}",
    response_model=CampaignView,
    dependencies=[Authorized, JsonBody],
    responses={
        201: {"model": CampaignView, "description": "A new episode started (the state was reset)"},
        **error_responses(
            401,
            404,
            409,
            413,
            415,
            422,
            503,
            s404="Not found (`not_found`): the path is no route (an id holding a `/`)",
            s409="`episode_exists` (the episode is registered with other L or B) or `model_mismatch` (`model` names "
            "another model than the one served)",
        ),
    },
)
async def register_campaign(
    campaign_id: CampaignPath, body: CampaignRegistration, episodes: EpisodesDep, response: Response
) -> CampaignView:
    """Start an episode, or re-confirm the current one (idempotent: same episode, same L and B, nothing changes).

    A new episode id resets the state to slot 0 and decides the first ratio. L and B are all a campaign
    registers; the models' features are scale-free, so no delivery scale is needed. 409 if the episode is
    already registered with other constraints, or if `model` names another model than the one served.
    """
    state, created = await episodes.register(campaign_id, body)
    response.status_code = 201 if created else 200
    return campaign_view(state, created=created)


@router.get(
    "/{campaign_id}",
    response_model=CampaignView,
    responses=error_responses(
        404, 422, 503, s404="`unknown_campaign`: no episode registered (or the path is no route)"
    ),
)
async def read_campaign(campaign_id: CampaignPath, episodes: EpisodesDep) -> CampaignView:
    """The campaign's current episode: slot, cumulative delivery and cost, ROI, ratio, posterior, model version."""
    return campaign_view(await episodes.read(campaign_id))
