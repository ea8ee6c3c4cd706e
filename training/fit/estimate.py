"""How long a fit takes, said before it starts: from the market's size and the training budget.

A fit's time is mostly CBRL's epochs (each collects ``episodes_per_day`` episodes of every day it trains on and
takes ``updates_per_epoch`` gradient steps) and the tunings and plays that replay the train days. So

    seconds = PER_IMPRESSION x train impressions
            + seeds x epochs x (PER_EPOCH_IMPRESSION x train impressions + PER_UPDATE x updates per epoch)
            + FIXED

with the constants measured on this project's 2-core machine while another engineer's job ran on both cores (load
average 3.5-4.4): ``rcb fit`` of a 30-train-day market of 200,000 impressions a day took 13.5 minutes, 11.5 of them
CBRL's 24 epochs (BENCHMARKS.md, "Fit"). Work a rerun finds finished is not counted. The same fit on an idle machine
takes less (its CPU time was 8.8 minutes): the estimate is a scale, not a promise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PER_IMPRESSION = 1.7e-5
"""Loading the train days, their oracles, the baselines' tunings (for the choice and for serving), the exports and
the plays: seconds per train impression."""
PER_EPOCH_IMPRESSION = 4.4e-7
"""CBRL's collection and model selection in one epoch: seconds per train impression."""
PER_UPDATE = 0.0435
"""One CBRL gradient step (batch 256, the posterior encoder's forward and backward): seconds."""
FIXED = 20.0
"""Starting the work (imports, torch, the ONNX export's tracing): seconds."""


@dataclass(frozen=True)
class Estimate:
    """A fit's expected time, in parts."""

    replay_seconds: float
    training_seconds: float
    fixed_seconds: float

    @property
    def seconds(self) -> float:
        return self.replay_seconds + self.training_seconds + self.fixed_seconds

    def minutes(self) -> int:
        """Whole minutes, at least 1."""
        return max(1, math.ceil(self.seconds / 60))

    def line(self) -> str:
        """What the command says before it starts."""
        training = f", {self.training_seconds / 60:.0f} of them training CBRL" if self.training_seconds >= 60 else ""
        minutes = self.minutes()
        return f"about {minutes} minute{'s' if minutes > 1 else ''} on a shared 2-core machine{training}"


def estimate(train_impressions: int, seeds_to_train: int, epochs: int, updates_per_epoch: int) -> Estimate:
    """The time a fit takes on ``train_impressions`` train impressions, training ``seeds_to_train`` runs of
    ``epochs`` epochs of ``updates_per_epoch`` updates (module docstring)."""
    per_epoch = PER_EPOCH_IMPRESSION * train_impressions + PER_UPDATE * updates_per_epoch
    return Estimate(
        replay_seconds=PER_IMPRESSION * train_impressions,
        training_seconds=seeds_to_train * epochs * per_epoch,
        fixed_seconds=FIXED,
    )
