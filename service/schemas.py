"""Pydantic I/O of the control plane (registration, slot updates, campaign views) and the documented bid bodies.

The ``/v1/bid`` hot path does not build these per request: it parses with orjson straight into numpy
(``routes/bids.py``). Its models here only document the bodies in OpenAPI.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from model.contract import RATIO_MAX, SLOTS_PER_DAY

CAMPAIGN_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
"""Campaign and episode ids: letters, digits and ``. _ : -``, 1 to 128 characters (no braces: the Redis hash tag)."""
ID_SCHEMA: dict[str, Any] = {"type": "string", "pattern": CAMPAIGN_ID.pattern, "minLength": 1, "maxLength": 128}
"""The JSON schema of an id, as OpenAPI documents every campaign and episode id (the service matches it whole)."""


def check_id(value: str, what: str = "campaign_id") -> str:
    if not isinstance(value, str) or not CAMPAIGN_ID.fullmatch(value):
        raise ValueError(f"{what} must be 1-128 characters of letters, digits and . _ : -")
    return value


CampaignId = Annotated[
    str,
    Field(
        description="1-128 characters: letters, digits and . _ : -", examples=["shop-42"], json_schema_extra=ID_SCHEMA
    ),
    AfterValidator(check_id),
]
EpisodeId = Annotated[
    str,
    Field(
        description="The episode (one day) id, e.g. a date; 1-128 characters: letters, digits and . _ : -",
        examples=["2026-11-26"],
        json_schema_extra=ID_SCHEMA,
    ),
    AfterValidator(lambda v: check_id(v, "episode")),
]


def _finite_non_negative(value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise ValueError("must be a finite number >= 0")
    return value


MAX_AMOUNT = 1e15
"""The largest delivery, cost or budget accepted: a day's 48 slots then sum far below float overflow, and no real
campaign comes near it."""
ROI_TARGET_RANGE = (1e-6, 1e6)
"""L's accepted range: wide for any real campaign, narrow enough that L x cost neither overflows nor underflows."""


def _a_json_number(value: object) -> object:
    """Numbers only: pydantic's lax mode reads ``true`` as 1 and ``"1e3"`` as 1000, which an ad engine sending
    either has a bug we should not hide (a whole float such as ``4.0`` stays a valid count)."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    if isinstance(value, str | bytes):
        raise ValueError("must be a JSON number, not a string")
    return value


Number = BeforeValidator(_a_json_number)
# The constraints go before Number: after a validator pydantic still enforces them but leaves them out of the JSON
# schema (as unknown "ge"/"le" keys), and OpenAPI would not say them.
Amount = Annotated[float, Field(ge=0, le=MAX_AMOUNT, allow_inf_nan=False), Number, AfterValidator(_finite_non_negative)]
Count = Annotated[int, Field(ge=0, le=2**53), Number]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


class CampaignRegistration(_Strict):
    """``PUT /v1/campaigns/{campaign_id}``: start (or idempotently re-confirm) an episode."""

    episode: EpisodeId
    roi_target: Annotated[float, Number] = Field(
        ge=ROI_TARGET_RANGE[0],
        le=ROI_TARGET_RANGE[1],
        allow_inf_nan=False,
        description="L: the episode must end with delivery/cost >= L (1e-6 to 1e6)",
    )
    budget: Annotated[float | None, Number] = Field(
        default=None,
        gt=0,
        le=MAX_AMOUNT,
        allow_inf_nan=False,
        description="B: the day's spend cap (at most 1e15); null for none (the SC setting)",
    )
    slots: Annotated[int, Number] = Field(
        default=SLOTS_PER_DAY,
        description=f"Slots per episode: {SLOTS_PER_DAY}, the slots the models are trained for",
        json_schema_extra={"const": SLOTS_PER_DAY},
    )
    reference: Annotated[float | None, Number] = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="A delivery scale. Accepted for compatibility and ignored: the models' features are scale-free "
        "(model card `registration` lists what a model reads: L and B).",
    )
    model: str | None = Field(
        default=None,
        min_length=1,
        description="The model version the caller expects; 409 if the service serves another",
    )

    @model_validator(mode="after")
    def _slots(self) -> CampaignRegistration:
        if self.slots != SLOTS_PER_DAY:
            raise ValueError(f"slots must be {SLOTS_PER_DAY} (the models decide one ratio per 30-minute slot)")
        return self


class SlotStats(_Strict):
    """One slot's stats as the ad engine attributed them during the slot (a reported slot is final)."""

    delivery: Amount = Field(
        description="Delivery attributed during the slot (late conversions count when they arrive)"
    )
    cost: Amount = Field(description="What the won auctions cost")
    wins: Count = Field(description="Auctions won")
    auctions: Count = Field(description="Auctions entered (bid submitted), won or not")

    @model_validator(mode="after")
    def _wins(self) -> SlotStats:
        if self.wins > self.auctions:
            raise ValueError(f"wins ({self.wins}) cannot exceed auctions ({self.auctions})")
        return self


class SlotUpdate(SlotStats):
    """``POST /v1/slot-update``: slot ``slot`` of the campaign's episode has just ended."""

    campaign_id: CampaignId
    episode: EpisodeId
    slot: Annotated[int, Number] = Field(ge=0, lt=SLOTS_PER_DAY, description="The slot that ended, 0..47")


class SlotUpdateBatch(_Strict):
    """``POST /v1/slot-update/batch``: a slot boundary of many campaigns in one call (one model call).

    Each update is validated on its own, as the single form validates it: one that is not a valid
    :class:`SlotUpdate` (of any JSON type) is answered as a 422 item of its own and the others apply.
    """

    updates: list[Any] = Field(
        min_length=1,
        description="The updates, each a SlotUpdate; an item that does not validate as one is answered as its own "
        "422 `invalid_request` item (the batch is not refused)",
        json_schema_extra={"items": {"anyOf": [{"$ref": "#/components/schemas/SlotUpdate"}, {}]}},
    )


class SlotAnswer(BaseModel):
    """The answer to one slot update: the ratio to bid in the next slot."""

    campaign_id: str
    slot: int = Field(description="The next slot, the one `bid_ratio` is for (48: the episode is over)")
    bid_ratio: float = Field(ge=0, le=RATIO_MAX)
    model_version: str
    decided_by: Literal["model", "fallback", "shield", "handover"] = Field(
        description="Who decided `bid_ratio`: the model, the shield (it moved the model's ratio), the fallback "
        "controller (the model could not run) or `handover` (the campaign's model was failing it: its controller "
        "bids the rest of the episode)"
    )
    replayed: bool = Field(description="True when this update had already been applied (same stats): nothing changed")
    budget_exhausted: bool = Field(description="The reported cost has reached the budget: /v1/bid answers 0")


class BatchItem(BaseModel):
    """One campaign's answer inside a batch: ``status`` 200 with the answer, or an error of its own."""

    status: int
    campaign_id: str | None = None
    answer: SlotAnswer | None = None
    error: str | None = None
    detail: object | None = None


class SlotUpdateBatchAnswer(BaseModel):
    results: list[BatchItem] = Field(description="One item per update, in the order sent")
    applied: int
    replayed: int
    failed: int

    @classmethod
    def of(cls, results: list[BatchItem]) -> SlotUpdateBatchAnswer:
        """The answer of ``results``, counted."""
        applied = sum(1 for r in results if r.answer is not None and not r.answer.replayed)
        replayed = sum(1 for r in results if r.answer is not None and r.answer.replayed)
        return cls(results=results, applied=applied, replayed=replayed, failed=len(results) - applied - replayed)


class Posterior(BaseModel):
    mean: list[float]
    std: list[float]


class CampaignView(BaseModel):
    """A campaign's current episode: where it stands and the ratio it bids now."""

    campaign_id: str
    episode: str
    slot: int = Field(description="Slots reported so far; `bid_ratio` is for this slot")
    bid_ratio: float
    roi_target: float
    budget: float | None
    delivery: float
    cost: float
    roi: float | None = Field(description="Cumulative delivery / cost (null before any spend)")
    budget_exhausted: bool
    done: bool = Field(description="All 48 slots reported")
    posterior: Posterior | None
    model_version: str
    decided_by: str
    handed_over: bool = Field(
        default=False, description="The campaign's controller bids the rest of this episode (`decided_by: handover`)"
    )
    created: bool | None = Field(default=None, description="PUT only: true when this call started the episode")


MAX_UTILITY = 1e30
"""The largest utility accepted: times a ratio of at most 4 it stays a finite float32 bid (and far past any real
value of an impression)."""
Utility = Annotated[float, Field(ge=0, le=MAX_UTILITY, allow_inf_nan=False)]


class BidRequest(_Strict):
    """``POST /v1/bid`` (application/json): one campaign's impressions."""

    campaign_id: CampaignId
    utilities: list[Utility] = Field(
        min_length=1,
        description="Predicted utility u_i of each impression: finite, 0 to 1e30 (at most `max_utilities` of them, "
        "413 past it)",
    )


class ColumnarBidRequest(_Strict):
    """``POST /v1/bid`` (application/json), many campaigns: ``counts[k]`` utilities of ``campaign_ids[k]`` in turn.

    ``counts`` has one entry per campaign id and adds up to the number of utilities (422 otherwise).
    """

    campaign_ids: list[CampaignId] = Field(
        min_length=1, description="The campaigns, in turn (at most `max_bid_campaigns`, 413 past it)"
    )
    counts: list[Annotated[int, Field(ge=0)]] = Field(
        min_length=1, description="How many of the utilities are each campaign's: one per campaign id"
    )
    utilities: list[Utility] = Field(
        description="All the utilities, campaign after campaign; empty when every count is 0 (the answer then "
        "carries the ratios only)"
    )


class BidAnswer(BaseModel):
    campaign_id: str
    bids: list[float] = Field(description="ratio x utility for each impression, in order")
    bid_ratio: float
    slot: int
    stale: bool = Field(description="True when served from cache while the store was unreachable")


class ColumnarBidAnswer(BaseModel):
    bids: list[float]
    bid_ratios: list[float]
    slots: list[int]
    stale: bool
