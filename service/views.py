"""How a stored campaign state reads in answers (``CampaignView``)."""

from __future__ import annotations

from model.state import CampaignState
from service.ratio_cache import bid_ratio_of
from service.schemas import CampaignView, Posterior


def campaign_view(state: CampaignState, created: bool | None = None) -> CampaignView:
    posterior = None
    if state.posterior_mean is not None and state.posterior_std is not None:
        posterior = Posterior(mean=list(state.posterior_mean), std=list(state.posterior_std))
    return CampaignView(
        campaign_id=state.campaign,
        episode=state.episode,
        slot=state.slot,
        bid_ratio=bid_ratio_of(state),
        roi_target=state.roi_target,
        budget=state.budget,
        delivery=state.total_delivery,
        cost=state.total_cost,
        roi=state.roi,
        budget_exhausted=state.budget_exhausted,
        done=state.done,
        posterior=posterior,
        model_version=state.model_version,
        decided_by=state.decided_by,
        handed_over=state.handed_over,
        created=created,
    )
