"""The baseline bidders (RM, PID, CEM) and the loop that plays them (:func:`training.bidders.base.play`).

What is checked: the bidder interface (shapes, range), that a bidder never sees hindsight (the same past gives
the same ratios whatever the rest of the day holds), seeded tuning, PID's control toward the ROI target and the
budget pace on a market whose answer is known, CEM's exploration on real traffic, and play's refusal of bad ratios.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import random_day_log
from reference_replay import direct_replay

from model.contract import RATIO_MAX, RATIO_MIN, SLOTS_PER_DAY
from model.history import History, Registration
from training.bidders import cem, pid, rm
from training.bidders.base import Bidder, Outcome, play
from training.bidders.tuning import candidate_scores
from training.market.dataset import Market
from training.market.generator import config_with, generate_market
from training.market.schema import DayLog
from training.replay.dayset import DaySet
from training.replay.simulator import DayIndex, SlotResult

MODULES = {"rm": rm, "pid": pid, "cem": cem}
FLAT_PROFILE = np.full(SLOTS_PER_DAY, 1.0 / SLOTS_PER_DAY)


def hand_bidder(method: str, profile: np.ndarray = FLAT_PROFILE, **overrides: float) -> Bidder:
    """A bidder with fixed, sensible hyperparameters, built through the module's ``from_params``."""
    params: dict[str, Any] = {
        "rm": {"ratio": 1.3},
        "pid": {"initial_ratio": 1.2, "kp": 0.5, "ki": 0.05, "kd": 0.1, "kp_budget": 1.0, "ki_budget": 0.1},
        "cem": {
            "initial_ratio": 1.2,
            "initial_sigma": 0.3,
            "explore": 5.0,
            "elites": 2.0,
            "smoothing": 0.5,
            "min_sigma": 0.05,
        },
    }[method]
    params.update(overrides)
    if method != "rm":
        params["traffic_profile"] = [float(x) for x in profile]
    return MODULES[method].from_params(params)


class Spy(Bidder):
    """Wraps a bidder; records every call ``play`` makes (argument types included) and every raw answer."""

    def __init__(self, inner: Bidder):
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]
        self.traffic_buckets = inner.traffic_buckets
        self.calls: list[tuple[str, tuple[type, ...], tuple[str, ...]]] = []
        self.bids: list[np.ndarray] = []
        self.results: list[SlotResult] = []
        self.future_leaks: list[int] = []
        self.registration: Registration | None = None

    def start(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("start", tuple(type(a) for a in args), tuple(kwargs)))
        self.registration = args[0]
        self.inner.start(*args, **kwargs)

    def bid(self, *args: Any, **kwargs: Any) -> np.ndarray:
        self.calls.append(("bid", tuple(type(a) for a in args), tuple(kwargs)))
        history = args[0]
        assert history.slot == len(self.bids), "the history must stand at the slot being bid"
        assert history.registration is self.registration, "the history carries the registration given to start()"
        t = history.slot
        future = [history.ratios, history.delivery, history.cost, history.wins, history.auctions]
        if any(np.any(a[:, t:] != 0) for a in future):
            self.future_leaks.append(t)
        answer = np.asarray(self.inner.bid(*args, **kwargs), dtype=np.float64)
        self.bids.append(answer.copy())
        return answer

    def on_result(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("on_result", tuple(type(a) for a in args), tuple(kwargs)))
        self.results.append(args[1])
        self.inner.on_result(*args, **kwargs)

    def params(self) -> dict[str, Any]:
        return self.inner.params()


def assert_only_live_information(spy: Spy) -> None:
    """``play`` handed the bidder a Registration and a seed, then Histories and SlotResults, nothing else."""
    assert spy.calls[0] == ("start", (Registration, int), ())
    rest = spy.calls[1:]
    assert len(rest) == 2 * SLOTS_PER_DAY
    for k, (name, types, kwargs) in enumerate(rest):
        assert kwargs == ()
        if k % 2 == 0:
            assert (name, types) == ("bid", (History,))
        else:
            assert (name, types) == ("on_result", (History, SlotResult))
    for result in spy.results:
        assert result.by_bucket is None or type(result.by_bucket) is SlotResult
    assert spy.future_leaks == [], f"history already filled for future slots at bids {spy.future_leaks}"


def play_one(bidder: Bidder, logs: list[DayLog], registration: Registration, seed: int = 0) -> Outcome:
    """Play every registration's episode on ``logs[0]`` (indexed with the bidder's traffic buckets)."""
    indexes = [DayIndex(log, buckets=bidder.traffic_buckets) for log in logs]
    return play(bidder, indexes, np.zeros(registration.n, dtype=np.int64), registration, seed)


# ---------------------------------------------------------------------------------------------------------------------
# A small generated market, shared by the module


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Market:
    out = tmp_path_factory.mktemp("bidders") / "market"
    return generate_market(out, config_with(days_id=8, days_ood=2, impressions_per_day=20_000, seed=3), workers=1)


@pytest.fixture(scope="module")
def train_sets(market: Market) -> dict[str, DaySet]:
    return {setting: DaySet.load(market, "train", setting) for setting in ("sc", "mc")}


@pytest.fixture(scope="module")
def tuned(train_sets: dict[str, DaySet]) -> dict[tuple[str, str], tuple[Bidder, float]]:
    """Every baseline tuned (seed 0) on the train days of each setting."""
    return {(m, s): MODULES[m].tune(days, seed=0) for m in MODULES for s, days in train_sets.items()}


# ---------------------------------------------------------------------------------------------------------------------
# 1. The interface


@pytest.mark.parametrize("setting", ["sc", "mc"])
@pytest.mark.parametrize("method", ["rm", "pid", "cem"])
@pytest.mark.parametrize("how", ["tuned", "hand"])
def test_bidders_answer_ratios_of_the_right_shape_and_range(
    how: str, method: str, setting: str, market: Market, train_sets: dict[str, DaySet], tuned: dict
):
    """Tuned or hand-built, each baseline answers ``(n,)`` (or ``(n, buckets)``) finite ratios in [0, 4] per slot,
    sees only live information, and its Outcome is the sum of the history's per-slot stats."""
    train = train_sets[setting]
    inner = tuned[(method, setting)][0] if how == "tuned" else hand_bidder(method, profile=train.traffic_profile())
    test = DaySet.load(market, "test", setting)
    spy = Spy(inner)
    outcome = play(spy, test.indexes(inner.traffic_buckets), test.episode_days(), test.registration(), seed=1)
    n = len(test)
    shape = (n,) if inner.traffic_buckets == 1 else (n, inner.traffic_buckets)
    assert (method == "cem") == (inner.traffic_buckets == cem.TRAFFIC_BUCKETS)
    assert len(spy.bids) == SLOTS_PER_DAY
    for ratios in spy.bids:
        assert ratios.shape == shape
        assert np.all(np.isfinite(ratios))
        assert ratios.min() >= RATIO_MIN and ratios.max() <= RATIO_MAX
    assert_only_live_information(spy)
    history = outcome.history
    assert history.done and history.ratios.shape == (n, SLOTS_PER_DAY)
    np.testing.assert_allclose(outcome.delivery, history.delivery.sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(outcome.cost, history.cost.sum(axis=1), rtol=1e-12)
    if setting == "mc":
        assert np.all(outcome.cost <= test.budget + 1e-9), "the simulator's budget stop holds for every bidder"


def test_tuned_params_rebuild_the_same_bidder(train_sets: dict[str, DaySet], tuned: dict, market: Market):
    """``from_params(bidder.params())`` (what the tuning cache stores) is the tuned bidder, to the bit: a run that
    tunes afresh and one that reads the cache play alike (the traffic profile the cache rounds included)."""
    test = DaySet.load(market, "test", "mc")
    for method, module in MODULES.items():
        bidder = tuned[(method, "mc")][0]
        again = module.from_params(bidder.params())
        for name in ("profile", "gains", "settings"):
            if hasattr(bidder, name):
                mine, theirs = getattr(bidder, name), getattr(again, name)
                for key in mine if isinstance(mine, dict) else [None]:
                    pair = (mine, theirs) if key is None else (mine[key], theirs[key])
                    np.testing.assert_array_equal(*pair, err_msg=f"{method}.{name} {key or ''}")
        if method == "pid":  # deterministic: its recorded score is its own on the train days, up to the rounding
            train = train_sets["mc"]
            replay = candidate_scores(lambda _: bidder, 1, train)[0]  # noqa: B023
            assert abs(replay - tuned[(method, "mc")][1]) < 1e-3
        a = play(bidder, test.indexes(bidder.traffic_buckets), test.episode_days(), test.registration(), seed=2)
        b = play(again, test.indexes(again.traffic_buckets), test.episode_days(), test.registration(), seed=2)
        np.testing.assert_array_equal(a.delivery, b.delivery, err_msg=method)
        np.testing.assert_array_equal(a.cost, b.cost, err_msg=method)


# ---------------------------------------------------------------------------------------------------------------------
# 2. No hindsight


def twin_days(day: int = 7) -> tuple[DayLog, DayLog]:
    """Two logs of one day id, identical in slots 0..23 and different afterwards.

    The second half of ``b`` has other prices and deliveries, and its impressions are dealt to the slots in
    another way (the per-slot counts reversed), keeping the total count so traffic buckets match row for row.
    """
    rng = np.random.default_rng(99)
    a = random_day_log(rng, n=20_000, day=day)
    half = int(a.slot_offsets[SLOTS_PER_DAY // 2])
    n = a.n_impressions
    price = a.market_price.copy()
    price[half:] *= rng.lognormal(0.3, 0.5, n - half)
    delivery = a.delivery.copy()
    delivery[half:] = rng.permutation(delivery[half:]) * 2.0
    counts = np.diff(a.slot_offsets)
    counts[SLOTS_PER_DAY // 2 :] = counts[SLOTS_PER_DAY // 2 :][::-1]
    b = DayLog(
        day=day,
        utility=a.utility.copy(),
        market_price=price,
        delivery=delivery,
        cost=price.copy(),
        slot_offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
    )
    assert int(b.slot_offsets[SLOTS_PER_DAY // 2]) == half and b.n_impressions == n
    return a, b


@pytest.mark.parametrize("method", ["rm", "pid", "cem"])
def test_bidders_never_see_the_rest_of_the_day(method: str):
    """Same past, different future: ratios up to and including slot 24 are identical, because slot 24's ratio
    is decided before slot 24 is observed. Play only ever passes Registration, History and SlotResult."""
    a, b = twin_days()
    half = SLOTS_PER_DAY // 2
    spent_at_two = float(a.cost[2.0 * a.utility > a.market_price].sum())
    registration = Registration(
        roi_target=np.array([1.0, 1.2]),
        budget=np.array([np.inf, spent_at_two / 3]),
    )
    spies = []
    for log in (a, b):
        spy = Spy(hand_bidder(method))
        outcome = play_one(spy, [log], registration, seed=11)
        assert_only_live_information(spy)
        spies.append((spy, outcome))
    (spy_a, out_a), (spy_b, out_b) = spies
    for t in range(half + 1):
        np.testing.assert_array_equal(spy_a.bids[t], spy_b.bids[t], err_msg=f"slot {t}")
    # The history shows the same ratios and the same observations for the shared slots.
    np.testing.assert_array_equal(out_a.history.ratios[:, :half], out_b.history.ratios[:, :half])
    np.testing.assert_array_equal(out_a.history.cost[:, :half], out_b.history.cost[:, :half])
    if method != "cem":  # a bucketed bid is shown as a traffic-weighted mean, which weights by slot 24's traffic
        np.testing.assert_array_equal(out_a.history.ratios[:, : half + 1], out_b.history.ratios[:, : half + 1])
    # The two futures really differ, so the test has teeth.
    assert not np.array_equal(out_a.history.cost[:, half:], out_b.history.cost[:, half:])
    if method != "rm":  # adaptive bidders react to what slot 24 showed
        later = [not np.array_equal(spy_a.bids[t], spy_b.bids[t]) for t in range(half + 1, SLOTS_PER_DAY)]
        assert any(later)


# ---------------------------------------------------------------------------------------------------------------------
# 3. Seeded tuning


@pytest.mark.parametrize("setting", ["sc", "mc"])
@pytest.mark.parametrize("method", ["rm", "pid", "cem"])
def test_tuning_is_deterministic_under_a_seed(method: str, setting: str, train_sets: dict[str, DaySet]):
    """Two tunings with the same seed pick the same hyperparameters and report the same train score."""
    train = train_sets[setting]
    first, score_first = MODULES[method].tune(train, seed=5)
    second, score_second = MODULES[method].tune(train, seed=5)
    assert first.params() == second.params()
    assert score_first == score_second
    assert score_first >= 0.0 and np.isfinite(score_first)


@pytest.mark.parametrize("setting", ["sc", "mc"])
def test_cem_tuning_picks_on_five_noise_draws(setting: str, train_sets: dict[str, DaySet]):
    """CEM's winner is the search's top candidate with the best mean over its search score and four replays on fresh
    exploration noise (seeds seed+1..seed+4), computed here by hand; the score returned is that mean."""
    train = train_sets[setting]
    rng = np.random.default_rng([3, 0xCE3])
    candidates = cem.sample_candidates(rng, 12)
    profile = train.traffic_profile()

    def scores(rows: np.ndarray, seed: int) -> np.ndarray:
        tiled = {k: np.repeat(v[rows], len(train)) for k, v in candidates.items()}
        return candidate_scores(lambda _: cem.CEM(profile, **tiled), len(rows), train, seed)

    search = scores(np.arange(12), 3)
    top = np.argsort(-search, kind="stable")[: cem.RESCORED]
    means = np.mean([search[top], *(scores(top, 3 + r) for r in range(1, cem.RESCORE_SEEDS + 1))], axis=0)
    pick = int(top[np.argmax(means)])
    tuned, score = cem.tune(train, seed=3, n_random=12)
    expected = cem.from_params(cem.CEM(profile, **{k: float(v[pick]) for k, v in candidates.items()}).params())
    assert tuned.params() == expected.params()
    assert score == pytest.approx(float(means.max()), abs=1e-12)
    assert len(set(np.round(means, 9))) > 1  # the draws told the candidates apart: the pick is not vacuous


def test_tuning_reports_progress(train_sets: dict[str, DaySet]):
    """Every tuner reports progress through the callback it is given, under its own name."""
    for method, module in MODULES.items():
        stages: list[str] = []
        module.tune(train_sets["sc"], seed=0, progress=stages.append)
        assert stages and set(stages) == {method}


# ---------------------------------------------------------------------------------------------------------------------
# 4. PID on a market whose answer is known


def stationary_day(per_slot: int = 2000, seed: int = 0, day: int = 1) -> DayLog:
    """Every impression has u = 1 and d = 1; prices m = r with r evenly spread over (0, 4), shuffled per slot.

    Bidding ratio beta wins the impressions with r < beta, so ROI(beta) = 1 / mean(r | r < beta) = 2 / beta:
    with L = 1 the ratio where the ROI constraint binds is 2.
    """
    rng = np.random.default_rng(seed)
    spread = (np.arange(per_slot) + 0.5) / per_slot * 4.0
    price = np.concatenate([rng.permutation(spread) for _ in range(SLOTS_PER_DAY)])
    n = price.size
    return DayLog(
        day=day,
        utility=np.ones(n),
        market_price=price,
        delivery=np.ones(n),
        cost=price.copy(),
        slot_offsets=np.arange(SLOTS_PER_DAY + 1, dtype=np.int64) * per_slot,
    )


def test_stationary_day_has_the_roi_curve_the_pid_tests_assume():
    """Sanity of the constructed market: a constant ratio beta earns ROI 2 / beta."""
    day = stationary_day()
    for beta in (0.5, 1.0, 2.0, 3.0):
        out = play_one(rm.ConstantRatio(beta), [day], Registration.of(1.0, None))
        assert out.delivery[0] / out.cost[0] == pytest.approx(2.0 / beta, rel=1e-3)


@pytest.mark.parametrize("initial_ratio", [0.8, 3.5])
def test_pid_drives_the_roi_to_its_target(initial_ratio: float):
    """From a start far below or above the binding ratio 2, PID ends the day with ROI within 5% of L = 1 and
    bids near 2 in the last slots; its first correction goes the right way."""
    bidder = hand_bidder("pid", initial_ratio=initial_ratio, kp=1.0, ki=0.2, kd=0.0)
    out = play_one(bidder, [stationary_day()], Registration.of(1.0, None))
    ratios = out.history.ratios[0]
    assert ratios[0] == pytest.approx(initial_ratio)
    assert out.delivery[0] / out.cost[0] == pytest.approx(1.0, rel=0.05)
    late = ratios[-12:]
    assert np.all(np.abs(late - 2.0) <= 0.15 * 2.0), late
    assert abs(ratios[-1] - 2.0) < abs(ratios[0] - 2.0)
    if initial_ratio < 2.0:  # ROI above target: bid up
        assert ratios[1] > ratios[0]
    else:  # ROI below target: bid down
        assert ratios[1] < ratios[0]


def test_pid_holds_a_ratio_that_already_meets_the_target():
    """Started at the binding ratio, PID stays there (no error, nothing to correct) and meets L."""
    bidder = hand_bidder("pid", initial_ratio=2.0, kp=1.0, ki=0.2, kd=0.0)
    out = play_one(bidder, [stationary_day()], Registration.of(1.0, None))
    np.testing.assert_allclose(out.history.ratios[0], 2.0, rtol=0.02)
    assert out.delivery[0] / out.cost[0] == pytest.approx(1.0, rel=0.01)


@pytest.mark.parametrize("budget_share", [0.1, 0.3])
def test_pid_paces_a_budget_over_the_day(budget_share: float):
    """With a budget well below what the ROI-binding ratio would spend, PID never overspends, keeps spending
    after mid-day (the budget pace follows the traffic profile), spends most of its budget and meets the ROI."""
    day = stationary_day()
    full_spend = float(day.cost[2.0 * day.utility > day.market_price].sum())
    budget = budget_share * full_spend
    bidder = hand_bidder("pid", initial_ratio=1.5, kp=1.0, ki=0.2, kd=0.0, kp_budget=1.0, ki_budget=0.1)
    out = play_one(bidder, [day], Registration.of(1.0, budget))
    cost = out.history.cost[0]
    half = SLOTS_PER_DAY // 2
    assert out.cost[0] <= budget + 1e-9
    assert out.cost[0] >= 0.9 * budget, "a paced bidder uses its budget"
    assert cost[:half].sum() <= 0.7 * budget, "not all spent in the first half"
    assert cost[half:].sum() >= 0.3 * budget, "spending goes on past mid-day"
    assert np.all(cost[-4:] > 0), "still bidding in the last slots"
    assert out.delivery[0] / out.cost[0] >= 1.0


# ---------------------------------------------------------------------------------------------------------------------
# 5. CEM explores with real traffic


@pytest.mark.parametrize("explore", [1, 5, 12])
def test_cem_explores_on_real_traffic(explore: int):
    """The ``explore`` exploring buckets bid their own draws, the rest bid one shared exploit ratio, and every
    bucket's wins and spend (exploration included) are what the day's log gives for those ratios and count
    toward the episode's totals."""
    log = random_day_log(np.random.default_rng(4), n=20_000, day=3)
    buckets = cem.TRAFFIC_BUCKETS
    spy = Spy(hand_bidder("cem", explore=float(explore), elites=1.0))
    out = play_one(spy, [log], Registration.of(1.0, None), seed=9)
    bids = np.stack([b[0] for b in spy.bids])  # (slots, buckets)
    exploit = bids[:, explore:]
    assert np.all(exploit == exploit[:, :1]), "the exploit buckets share one ratio"
    assert np.all(bids[:, :explore] != exploit[:, :1]), "exploring buckets bid their own draws"
    if explore > 1:
        assert np.all(np.ptp(bids[:, :explore], axis=1) > 0)

    # The history is the replay of exactly these per-bucket ratios on the log (exploration spends real traffic).
    index = DayIndex(log, buckets=buckets)
    delivery, cost, wins = direct_replay(log, bids, bucket=index.bucket)
    history = out.history
    np.testing.assert_allclose(history.delivery[0], delivery, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(history.cost[0], cost, rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(history.wins[0], wins)
    assert out.cost[0] == pytest.approx(history.cost[0].sum(), rel=1e-12)
    assert out.delivery[0] == pytest.approx(history.delivery[0].sum(), rel=1e-12)

    # Per-bucket stats add up to the slot's, and the exploring buckets did win and pay.
    explored_cost = 0.0
    for result in spy.results:
        by = result.by_bucket
        assert by is not None and by.cost.shape == (1, buckets)
        assert by.cost.sum() == pytest.approx(result.cost[0], rel=1e-12, abs=1e-12)
        assert by.auctions.sum() == result.auctions[0]
        explored_cost += float(by.cost[0, :explore].sum())
    assert explored_cost > 0

    # The history shows the traffic-weighted mean of the bucket ratios.
    weights = np.stack([r.by_bucket.auctions[0] for r in spy.results]).astype(float)
    np.testing.assert_allclose(history.ratios[0], (bids * weights).sum(axis=1) / weights.sum(axis=1), rtol=1e-12)


def test_cem_exploration_is_seeded():
    """The same seed replays the same exploration; another seed draws other ratios."""
    log = random_day_log(np.random.default_rng(4), n=5000, day=3)
    registration = Registration.of(1.0, None)

    def bids(seed: int) -> np.ndarray:
        spy = Spy(hand_bidder("cem"))
        play_one(spy, [log], registration, seed=seed)
        return np.stack(spy.bids)

    np.testing.assert_array_equal(bids(1), bids(1))
    assert not np.array_equal(bids(1), bids(2))


# ---------------------------------------------------------------------------------------------------------------------
# 6. play() refuses bad ratios


class Fixed(Bidder):
    """Bids ``value`` in every slot; with traffic buckets, 1.0 everywhere but ``value`` in the last bucket."""

    name = "fixed"

    def __init__(self, value: float, buckets: int = 1):
        self.value = value
        self.traffic_buckets = buckets

    def bid(self, history: History) -> np.ndarray:
        if self.traffic_buckets == 1:
            return np.full(history.n, self.value)
        ratios = np.full((history.n, self.traffic_buckets), 1.0)
        ratios[:, -1] = self.value
        return ratios


@pytest.mark.parametrize("value", [4.0001, 5.0, -0.01, np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("buckets", [1, 4])
def test_play_rejects_ratios_outside_the_action_range(value: float, buckets: int):
    """A ratio above 4, below 0, NaN or infinite (even in one traffic bucket) is a bidder bug: ValueError."""
    log = random_day_log(np.random.default_rng(0), n=2000)
    with pytest.raises(ValueError, match="outside"):
        play_one(Fixed(value, buckets), [log], Registration.of(1.0, None, n=2))


@pytest.mark.parametrize("value", [0.0, 4.0])
def test_play_accepts_the_ends_of_the_action_range(value: float):
    """0 and 4 are valid ratios; 0 wins nothing."""
    log = random_day_log(np.random.default_rng(0), n=2000)
    out = play_one(Fixed(value), [log], Registration.of(1.0, None))
    assert (out.cost[0] == 0) == (value == 0.0)


def test_play_rejects_a_ratio_late_in_the_day():
    """The check runs every slot, not only the first."""

    class Late(Bidder):
        name = "late"

        def bid(self, history: History) -> np.ndarray:
            return np.full(history.n, np.nan if history.slot == SLOTS_PER_DAY - 1 else 1.0)

    log = random_day_log(np.random.default_rng(0), n=2000)
    with pytest.raises(ValueError, match="late"):
        play_one(Late(), [log], Registration.of(1.0, None))
