"""Constants of the bidding problem that training, export and serving must agree on (docs/data-schema.md,
docs/model-artifact.md)."""

from __future__ import annotations

from enum import StrEnum

SLOTS_PER_DAY: int = 48
"""T: a day (one episode) is cut into 48 slots of 30 minutes."""

RATIO_MIN: float = 0.0
"""Lowest bid ratio beta a policy may output."""

RATIO_MAX: float = 4.0
"""Highest bid ratio beta a policy may output."""


class Setting(StrEnum):
    """The problem settings (docs/data-schema.md): SC is ROI >= 1 with no budget; MC uses each episode's own L and B."""

    SC = "sc"
    MC = "mc"
