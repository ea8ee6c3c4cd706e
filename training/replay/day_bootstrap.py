"""Bootstrap days: training's episodes replay a resample of their day's impressions, not the day itself.

A logged day replays deterministically: the same ratios win the same impressions and the same few of them
convert. On a sparse market (about 19 delivering impressions a slot) a day's outcome is mostly that luck, and
a policy with a posterior encoder that sees each of 24 train days four times an epoch for 24 epochs can learn
the days themselves (which early slots foretell which late ones) instead of the market. More days of logs
let the learner beat its controller on held-out days (RESULTS.md, 120 train days); a user has the days they
have. The bootstrap draws new luck from the same regime: every impression of the day enters the resample
``Poisson(1)`` times (its slot, utility, price, delivery and cost kept), so a slot's count, delivery and cost
vary around the day's as a fresh day of the same regime would, to first order, while the regime (prices,
conversion rates, traffic shape) stays the logged day's. Unlike domain randomization
(:mod:`training.rl.domain_randomization`), which rescales a day and keeps its luck, this keeps the regime and
redraws the luck.

One resample a day per epoch, shared by the day's episodes. The registration (L, B) and the reward's normalizer
``D*`` stay the logged day's: within an episode ``D*`` is a constant, and a resample's own oracle would cost a MILP
per episode (so a lucky resample may score above 1). Model selection and every evaluation play the logged days.

On the suite's SC ``sparse`` it lifts the late epochs on validation and learn days but not the early ones, so it
pays together with model selection among the last quarter of the epochs: CBRL trains with both in SC
(:data:`training.rl.config.LATE_SELECTION`), MC with neither (RESULTS.md).
"""

from __future__ import annotations

import numpy as np

from training.market.schema import DayLog
from training.replay.simulator import DayIndex


def bootstrap_log(log: DayLog, rng: np.random.Generator) -> DayLog:
    """A Poisson(1) resample of ``log``: each row repeated ``Poisson(1)`` times in place (slot and arrival order
    kept), the slot offsets recounted."""
    return _repeated(log, rng.poisson(1.0, log.n_impressions))


def bootstrap_index(index: DayIndex, rng: np.random.Generator) -> DayIndex:
    """The replay index of :func:`bootstrap_log` ``(index.log, rng)`` (the same draw from ``rng``), built from the
    logged day's index instead of sorting the resample again (:meth:`DayIndex.resampled`): what collection on
    bootstrap days replays, at about a third of the cost (BENCHMARKS.md)."""
    copies = rng.poisson(1.0, index.log.n_impressions)
    resample = _repeated(index.log, copies)
    if index.buckets != 1:
        return DayIndex(resample, index.buckets)
    return index.resampled(resample, copies)


def _repeated(log: DayLog, copies: np.ndarray) -> DayLog:
    """``log`` with row ``i`` repeated ``copies[i]`` times in place."""
    rows = np.repeat(np.arange(log.n_impressions), copies)
    copied_before = np.concatenate([[0], np.cumsum(copies)])  # a slot starts after the copies of the rows before it
    return DayLog(
        day=log.day,
        utility=log.utility[rows],
        market_price=log.market_price[rows],
        delivery=log.delivery[rows],
        cost=log.cost[rows],
        slot_offsets=copied_before[log.slot_offsets].astype(log.slot_offsets.dtype),
    )
