"""The fast replay (training.replay.simulator) agrees with the per-impression reference, and `rcb simulate` works.

Wins are compared exactly; delivery and cost to rounding, because the fast path sums in critical-ratio
order (prefix sums) while the reference sums in arrival order.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pytest
import typer
from conftest import build_market, random_day_log
from reference_replay import direct_replay
from typer.testing import CliRunner

from model.contract import SLOTS_PER_DAY
from rcb.commands.simulate import simulate_command
from training.market.dataset import Market
from training.market.schema import DayLog
from training.replay.simulator import BatchedReplay, DayIndex, replay_day

SUM_TOLERANCE = {"rtol": 1e-12, "atol": 1e-9}


def _replay(log: DayLog, ratios: np.ndarray, budget: float = np.inf) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-slot (delivery, cost, wins) of the fast path, shaped like :func:`direct_replay`'s."""
    steps = replay_day(DayIndex(log), ratios, budget)
    return tuple(np.array([getattr(s, name)[0] for s in steps]) for name in ("delivery", "cost", "wins"))


def _assert_same(fast: tuple[np.ndarray, ...], reference: tuple[np.ndarray, ...]) -> None:
    delivery, cost, wins = fast
    ref_delivery, ref_cost, ref_wins = reference
    np.testing.assert_array_equal(wins, ref_wins)
    np.testing.assert_allclose(delivery, ref_delivery, **SUM_TOLERANCE)
    np.testing.assert_allclose(cost, ref_cost, **SUM_TOLERANCE)


def _hard_ratios(rng: np.random.Generator, log: DayLog) -> np.ndarray:
    """Per-slot ratios mixing random values with the hard cases: 0, exact ties at 1.0, a critical ratio itself."""
    ratios = rng.uniform(0.0, 4.0, SLOTS_PER_DAY)
    ratios[::7] = 0.0
    ratios[1::7] = 1.0  # conftest days have market_price == utility rows: ties that must lose
    for t in range(2, SLOTS_PER_DAY, 7):
        rows = log.slot_rows(t)
        if rows.stop > rows.start:  # a ratio equal to some impression's m/u: decided by the exact predicate
            i = rng.integers(rows.start, rows.stop)
            ratios[t] = log.market_price[i] / log.utility[i]
    return ratios


def _day(slot_rows: dict[int, list[tuple[float, float, float]]], day: int = 0) -> DayLog:
    """A hand-made day: ``slot_rows[t]`` lists slot t's impressions ``(utility, market_price, delivery)`` in
    arrival order; cost is the market price."""
    counts = [len(slot_rows.get(t, [])) for t in range(SLOTS_PER_DAY)]
    rows = [r for t in range(SLOTS_PER_DAY) for r in slot_rows.get(t, [])]
    u, m, d = (np.array([r[k] for r in rows], dtype=np.float64) for k in range(3))
    return DayLog(day, u, m, d, m.copy(), np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))


# --- exactness against the per-impression reference --------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_direct_replay_without_budget(seed: int) -> None:
    rng = np.random.default_rng(seed)
    log = random_day_log(rng, n=4000, day=seed)
    for _ in range(3):
        ratios = _hard_ratios(rng, log)
        _assert_same(_replay(log, ratios), direct_replay(log, ratios))


@pytest.mark.parametrize("fraction", [0.0, 0.05, 0.3, 0.7, 0.999, 2.0])
def test_matches_direct_replay_with_budget(fraction: float) -> None:
    rng = np.random.default_rng(7)
    log = random_day_log(rng, n=4000)
    ratios = rng.uniform(0.5, 3.0, SLOTS_PER_DAY)
    unconstrained_cost = direct_replay(log, ratios)[1].sum()
    budget = fraction * unconstrained_cost
    fast, reference = _replay(log, ratios, budget), direct_replay(log, ratios, budget)
    _assert_same(fast, reference)
    assert fast[1].sum() <= budget


def test_budget_stops_mid_slot() -> None:
    rng = np.random.default_rng(11)
    log = random_day_log(rng, n=4000)
    ratios = np.full(SLOTS_PER_DAY, 2.0)
    _, free_cost, free_wins = direct_replay(log, ratios)
    # Stop halfway through slot 20's spend: slot 20 wins some but not all, later slots win nothing.
    budget = free_cost[:20].sum() + free_cost[20] / 2
    env = BatchedReplay([DayIndex(log)], np.zeros(1, dtype=np.int64), np.array([budget]))
    steps = [env.step(np.array([2.0])) for _ in range(SLOTS_PER_DAY)]
    assert 0 < steps[20].wins[0] < free_wins[20]
    assert steps[20].auctions[0] < log.slot_offsets[21] - log.slot_offsets[20]
    assert all(s.wins[0] == 0 and s.cost[0] == 0 and s.auctions[0] == 0 for s in steps[21:])
    assert env.exhausted[0] and env.cost[0] <= budget
    _assert_same(_replay(log, ratios, budget), direct_replay(log, ratios, budget))


def test_budget_semantics_by_hand() -> None:
    # Slot 0 arrivals cost 1, 2, 3 (all won at ratio 10); slot 1 has one impression costing 0.5.
    log = _day({0: [(1.0, 1.0, 10.0), (1.0, 2.0, 20.0), (1.0, 3.0, 30.0)], 1: [(1.0, 0.5, 5.0)]})
    ratios = np.full(SLOTS_PER_DAY, 10.0)
    # B = 4: wins cost 1 (spent 1), 2 (spent 3); the 3 would make 6 > 4: bidding ends for the day,
    # so the affordable 0.5 of slot 1 is not bought.
    delivery, cost, wins = _replay(log, ratios, 4.0)
    assert (delivery[0], cost[0], wins[0]) == (30.0, 3.0, 2)
    assert (delivery[1], cost[1], wins[1]) == (0.0, 0.0, 0)
    # B = 6: spending exactly the budget is allowed (C <= B); the 0.5 of slot 1 then overspends.
    delivery, cost, wins = _replay(log, ratios, 6.0)
    assert (delivery[0], cost[0], wins[0], cost[1], wins[1]) == (60.0, 6.0, 3, 0.0, 0)
    # B = 6.5: everything fits exactly.
    assert _replay(log, ratios, 6.5)[2].sum() == 4
    for budget in (0.0, 0.5, 4.0, 6.0, 6.5):
        _assert_same(_replay(log, ratios, budget), direct_replay(log, ratios, budget))


def test_exact_ties_lose_and_ratio_zero_wins_nothing() -> None:
    # market_price == utility: ratio 1.0 bids exactly the price and must lose (win iff b > m);
    # one ulp above 1.0 wins them all. Free impressions (m = 0) are lost at ratio 0 (0 > 0 is false).
    log = _day({0: [(u, u, 1.0) for u in (0.3, 1.0, 7.5, 123.25)], 1: [(2.0, 0.0, 1.0), (0.1, 0.0, 1.0)]})
    ratios = np.zeros(SLOTS_PER_DAY)
    ratios[0] = 1.0
    assert _replay(log, ratios)[2][:2].tolist() == [0, 0]
    ratios[0], ratios[1] = np.nextafter(1.0, 2.0), 1e-9
    assert _replay(log, ratios)[2][:2].tolist() == [4, 2]
    # The random conftest days put a tie in every slot's first rows; ratio 1.0 everywhere agrees with the reference.
    tied = random_day_log(np.random.default_rng(3), n=3000)
    ones = np.ones(SLOTS_PER_DAY)
    _assert_same(_replay(tied, ones), direct_replay(tied, ones))


def test_many_episodes_on_mixed_days() -> None:
    rng = np.random.default_rng(5)
    logs = [random_day_log(rng, n=2500, day=d) for d in range(3)]
    indexes = [DayIndex(log) for log in logs]
    n_episodes = 12
    episode_days = np.array([0, 1, 2, 0, 1, 2, 2, 2, 0, 1, 0, 1])
    ratios = rng.uniform(0.0, 4.0, (n_episodes, SLOTS_PER_DAY))
    ratios[3, :] = 0.0  # an episode that never wins
    free_cost = np.array([direct_replay(logs[episode_days[k]], ratios[k])[1].sum() for k in range(n_episodes)])
    budgets = np.full(n_episodes, np.inf)
    budgets[[1, 4, 6, 9]] = free_cost[[1, 4, 6, 9]] * np.array([0.05, 0.2, 0.5, 0.9])  # run out at various slots
    budgets[10] = 0.0

    env = BatchedReplay(indexes, episode_days, budgets)
    steps = [env.step(ratios[:, t]) for t in range(SLOTS_PER_DAY)]
    assert env.done

    for k in range(n_episodes):
        reference = direct_replay(logs[episode_days[k]], ratios[k], budgets[k])
        fast = tuple(np.array([getattr(s, name)[k] for s in steps]) for name in ("delivery", "cost", "wins"))
        _assert_same(fast, reference)
        np.testing.assert_allclose(env.delivery[k], fast[0].sum(), **SUM_TOLERANCE)
        np.testing.assert_allclose(env.cost[k], fast[1].sum(), **SUM_TOLERANCE)
        assert env.cost[k] <= budgets[k]
    # Exhausted episodes stay at zero once they ran out.
    for k in np.flatnonzero(env.exhausted):
        slot_sizes = indexes[episode_days[k]].auctions
        stop = next(t for t in range(SLOTS_PER_DAY) if steps[t].auctions[k] < slot_sizes[t])
        assert all(steps[t].wins[k] == 0 and steps[t].cost[k] == 0 for t in range(stop + 1, SLOTS_PER_DAY))
        assert all(steps[t].auctions[k] == 0 for t in range(stop + 1, SLOTS_PER_DAY))
    assert set(np.flatnonzero(env.exhausted)) >= {1, 4, 6}
    assert not env.exhausted[np.isinf(budgets)].any()


@pytest.mark.parametrize("budget_fraction", [np.inf, 0.4])
def test_bucketed_traffic_matches_direct_replay(budget_fraction: float) -> None:
    """Different ratios on disjoint traffic buckets: totals and per-bucket stats match a per-impression walk."""
    rng = np.random.default_rng(31)
    log = random_day_log(rng, n=6000, day=4)
    index = DayIndex(log, buckets=5)
    assert np.bincount(index.bucket, minlength=5).min() > 900  # a fair split of the traffic
    ratios = rng.uniform(0.0, 4.0, (SLOTS_PER_DAY, 5))
    budget = budget_fraction * float(log.cost[4.0 * log.utility > log.market_price].sum())
    env = BatchedReplay([index], np.zeros(2, dtype=np.int64), np.array([budget, np.inf]))
    per_slot = [env.step(np.stack([ratios[t], ratios[t]])) for t in range(SLOTS_PER_DAY)]
    fast = tuple(np.array([getattr(r, name)[0] for r in per_slot]) for name in ("delivery", "cost", "wins"))
    _assert_same(fast, direct_replay(log, ratios, budget, bucket=index.bucket))
    for r in per_slot:  # buckets add up to the totals, for the budgeted and the unbudgeted episode
        assert r.by_bucket is not None
        np.testing.assert_allclose(r.by_bucket.delivery.sum(axis=1), r.delivery, rtol=1e-12)
        np.testing.assert_array_equal(r.by_bucket.wins.sum(axis=1), r.wins)
        np.testing.assert_array_equal(r.by_bucket.auctions.sum(axis=1), r.auctions)
    # One bucket alone: what bucket 2 won at slot 30 is exactly its own impressions' wins.
    rows = np.arange(log.slot_offsets[30], log.slot_offsets[31])
    mine = rows[index.bucket[rows] == 2]
    won = ratios[30, 2] * log.utility[mine] > log.market_price[mine]
    assert per_slot[30].by_bucket.wins[1, 2] == won.sum()
    # The same ratio on every bucket is the unbucketed replay.
    same = np.repeat(ratios[:, :1], 5, axis=1)
    _assert_same(_replay(log, ratios[:, 0]), direct_replay(log, same, bucket=index.bucket))


def test_reset_replays_identically() -> None:
    rng = np.random.default_rng(9)
    log = random_day_log(rng, n=2000)
    env = BatchedReplay([DayIndex(log)], np.zeros(2, dtype=np.int64), np.array([np.inf, 50.0]))
    ratios = rng.uniform(0.0, 4.0, (SLOTS_PER_DAY, 2))
    first = [env.step(r).cost.copy() for r in ratios]
    totals = env.cost.copy()
    env.reset()
    assert env.slot == 0 and env.cost.sum() == 0 and not env.exhausted.any()
    second = [env.step(r).cost.copy() for r in ratios]
    np.testing.assert_array_equal(np.array(first), np.array(second))
    np.testing.assert_array_equal(env.cost, totals)


@pytest.mark.parametrize("buckets", [1, 3])
def test_a_regime_replays_the_log_with_scaled_prices_and_delivery(buckets: int) -> None:
    """Training's domain randomization: episode k's regime (price p, value v) is exactly the log with market prices
    and costs times p and delivery times v, budget stop included; an unscaled episode beside it is untouched."""
    rng = np.random.default_rng(17)
    log = random_day_log(rng, n=4000, day=2)
    p, v = 1.3, 0.8
    scaled_log = replace(log, market_price=log.market_price * p, cost=log.cost * p, delivery=log.delivery * v)
    shape = (SLOTS_PER_DAY, buckets) if buckets > 1 else (SLOTS_PER_DAY,)
    ratios = rng.uniform(0.0, 4.0, shape)
    budget = 0.5 * float(scaled_log.cost[2.0 * scaled_log.utility > scaled_log.market_price].sum())
    regime = (np.array([p, 1.0, p]), np.array([v, 1.0, v]))
    env = BatchedReplay(
        [DayIndex(log, buckets=buckets)], np.zeros(3, dtype=np.int64), np.array([budget] * 2 + [np.inf]), regime
    )
    expected = BatchedReplay(
        [DayIndex(scaled_log, buckets=buckets)], np.zeros(2, dtype=np.int64), np.array([budget, np.inf])
    )
    plain = BatchedReplay([DayIndex(log, buckets=buckets)], np.zeros(1, dtype=np.int64), np.array([budget]))
    for t in range(SLOTS_PER_DAY):
        got, want, unscaled = (
            env.step(np.stack([ratios[t]] * 3)),
            expected.step(np.stack([ratios[t]] * 2)),
            plain.step(ratios[t][None]),
        )
        np.testing.assert_array_equal(got.wins[[0, 2]], want.wins)
        np.testing.assert_allclose(got.delivery[[0, 2]], want.delivery, **SUM_TOLERANCE)
        np.testing.assert_allclose(got.cost[[0, 2]], want.cost, **SUM_TOLERANCE)
        assert (got.wins[1], got.cost[1]) == (unscaled.wins[0], unscaled.cost[0])
        if buckets > 1:
            np.testing.assert_allclose(got.by_bucket.cost[[0, 2]], want.by_bucket.cost, **SUM_TOLERANCE)
    assert env.exhausted[0] and env.exhausted[0] == expected.exhausted[0]  # the budget stopped it, as in the log
    np.testing.assert_allclose(env.cost[[0, 2]], expected.cost, **SUM_TOLERANCE)
    for bad in ((np.ones(2), np.ones(3)), (np.array([1.0, 0.0, 1.0]), np.ones(3)), (np.ones(3), np.full(3, np.inf))):
        with pytest.raises(ValueError, match="regime scales"):
            BatchedReplay([DayIndex(log)], np.zeros(3, dtype=np.int64), None, bad)


def test_step_and_construction_errors() -> None:
    log = random_day_log(np.random.default_rng(1), n=500)
    index = DayIndex(log)
    env = BatchedReplay([index], np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match="shape"):
        env.step(np.ones(2))
    with pytest.raises(ValueError, match="shape"):
        env.step(np.ones((3, 1, 1)))
    with pytest.raises(ValueError, match="bucket"):
        env.step(np.ones((3, 2)))  # the days were indexed with one traffic bucket
    with pytest.raises(ValueError, match=">= 0"):
        env.step(np.array([1.0, -0.1, 1.0]))
    with pytest.raises(ValueError, match="finite"):
        env.step(np.array([1.0, np.nan, 1.0]))
    assert env.slot == 0  # a rejected step does not advance
    for _ in range(SLOTS_PER_DAY):
        env.step(np.ones(3))
    with pytest.raises(RuntimeError, match="over"):
        env.step(np.ones(3))
    with pytest.raises(ValueError, match="budgets"):
        BatchedReplay([index], np.zeros(3, dtype=np.int64), np.ones(2))


# --- `rcb simulate` ----------------------------------------------------------------------------------------


@pytest.fixture
def market(tmp_path: Path) -> Market:
    # Like conftest's tiny_market, but makes the directory first (write_day does not create it).
    root = tmp_path / "market"
    root.mkdir()
    return build_market(root)


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer(pretty_exceptions_enable=False)
    app.command("simulate")(simulate_command)
    app.command("noop")(lambda: None)  # a second command keeps `simulate` a subcommand, as in rcb
    return app


def _simulate(cli: typer.Typer, market: Market, *args: str):
    return CliRunner().invoke(cli, ["simulate", str(market.root), *args])


def test_cli_json_sc_matches_reference(cli: typer.Typer, market: Market) -> None:
    rng = np.random.default_rng(2)
    ratios = np.round(rng.uniform(0.0, 4.0, SLOTS_PER_DAY), 3)
    result = _simulate(cli, market, "--day", "2", "--setting", "sc", "--ratios", ",".join(map(str, ratios)), "--json")
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    ref_delivery, ref_cost, ref_wins = direct_replay(market.load(2), ratios)
    assert out["day"] == 2 and out["setting"] == "sc" and out["roi_target"] == 1.0 and out["budget"] is None
    assert [s["slot"] for s in out["slots"]] == list(range(SLOTS_PER_DAY))
    assert [s["ratio"] for s in out["slots"]] == ratios.tolist()
    assert [s["wins"] for s in out["slots"]] == ref_wins.tolist()
    np.testing.assert_allclose([s["delivery"] for s in out["slots"]], ref_delivery, **SUM_TOLERANCE)
    np.testing.assert_allclose(out["cost"], ref_cost.sum(), **SUM_TOLERANCE)
    assert out["roi"] == pytest.approx(out["delivery"] / out["cost"])
    assert out["feasible"] == (out["roi"] >= 1.0)
    assert out["budget_exhausted"] is False
    impressions = np.diff(market.load(2).slot_offsets)
    assert [s["auctions"] for s in out["slots"]] == impressions.tolist()


def test_cli_json_mc_uses_manifest_constraints(cli: typer.Typer, market: Market) -> None:
    entry = market.entry(1)
    result = _simulate(cli, market, "--day", "1", "--setting", "mc", "--ratios", "3.0", "--json")
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    # The fixture's budget is half the spend at ratio 1.5, so ratio 3.0 everywhere runs out mid-day.
    assert out["roi_target"] == entry.mc.roi_target and out["budget"] == entry.mc.budget
    assert out["budget_exhausted"] is True and out["cost"] <= entry.mc.budget
    ratios = np.full(SLOTS_PER_DAY, 3.0)
    ref_delivery, ref_cost, _ = direct_replay(market.load(1), ratios, entry.mc.budget)
    np.testing.assert_allclose(out["delivery"], ref_delivery.sum(), **SUM_TOLERANCE)
    np.testing.assert_allclose(out["cost"], ref_cost.sum(), **SUM_TOLERANCE)
    assert out["feasible"] == (out["delivery"] / out["cost"] >= entry.mc.roi_target)
    assert out["slots"][-1]["auctions"] == 0


def test_cli_zero_ratios_spend_nothing(cli: typer.Typer, market: Market) -> None:
    result = _simulate(cli, market, "--day", "0", "--setting", "sc", "--ratios", ",".join(["0"] * 48), "--json")
    out = orjson.loads(result.stdout)
    assert (out["delivery"], out["cost"], out["roi"], out["feasible"]) == (0.0, 0.0, None, True)


def test_cli_table(cli: typer.Typer, market: Market) -> None:
    result = _simulate(cli, market, "--day", "0", "--setting", "mc", "--ratios", "1.5")
    assert result.exit_code == 0, result.output
    assert "total" in result.stdout and "23:30" in result.stdout and "feasible" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--day", "0", "--setting", "sc", "--ratios", "1,2,3"], "expected 48"),
        (["--day", "0", "--setting", "sc", "--ratios", ",".join(["1"] * 49)], "expected 48"),
        (["--day", "0", "--setting", "sc", "--ratios", ",".join(["1"] * 47 + ["-0.5"])], "slot 47"),
        (["--day", "0", "--setting", "sc", "--ratios", "nan"], "finite"),
        (["--day", "0", "--setting", "sc", "--ratios", "1,x" + ",1" * 46], "not a number"),
        (["--day", "99", "--setting", "mc", "--ratios", "1"], "no day 99"),
    ],
)
def test_cli_errors_exit_2_without_traceback(cli: typer.Typer, market: Market, args: list[str], message: str) -> None:
    result = _simulate(cli, market, *args)
    assert result.exit_code == 2
    assert message in " ".join(result.stderr.split())  # rich may wrap the line at the runner's width
    assert "Traceback" not in result.output and result.stdout == ""


def test_cli_missing_market(cli: typer.Typer, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["simulate", str(tmp_path), "--day", "0", "--setting", "sc", "--ratios", "1"])
    assert result.exit_code == 2 and "manifest.json" in result.stderr
