"""The hindsight oracles (paper appendix, "Slot-wise Oracle"): exactness, simulator agreement, cache, CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import typer
from conftest import random_day_log
from typer.testing import CliRunner

import training.replay.oracle.cache as oracle_cache
from model.contract import SLOTS_PER_DAY
from model.roi import is_feasible as meets
from rcb.commands.oracle import oracle_command
from training.market.dataset import Market
from training.market.logs import write_day
from training.replay.metrics import is_feasible
from training.replay.oracle import (
    ABSTAIN_RATIO,
    ORACLE_GRID,
    OracleResult,
    day_oracle,
    market_oracle,
    prune_items,
    slot_curves,
    slot_oracle,
    solve_slot_knapsack,
)
from training.replay.simulator import DayIndex, replay_day, replay_totals

# ---------------------------------------------------------------------------------------------------------------------
# The group knapsack against brute force


def brute_force(delivery: np.ndarray, cost: np.ndarray, roi_target: float, budget: float) -> float | None:
    """Best total delivery over all G**T choices (None if none is feasible), summed slot by slot."""
    n_slots, n_columns = delivery.shape
    total_d, total_c = np.float64(0.0), np.float64(0.0)
    for t in range(n_slots):  # broadcasting adds slot t along its own axis: the same left fold as the simulator
        shape = (1,) * t + (n_columns,) + (1,) * (n_slots - t - 1)
        total_d = total_d + delivery[t].reshape(shape)
        total_c = total_c + cost[t].reshape(shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        feasible = (total_c <= budget) & ((total_c == 0) | (total_d / total_c >= roi_target))
    return float(total_d[feasible].max()) if feasible.any() else None


def random_curves(rng: np.random.Generator, n_slots: int, n_columns: int, monotone: bool) -> tuple[np.ndarray, ...]:
    """Item curves: nested won sets like a real slot (``monotone``) or arbitrary (D, C) pairs."""
    if monotone:
        delivery = np.cumsum(rng.exponential(1.0, (n_slots, n_columns)) * rng.binomial(1, 0.7, (n_slots, n_columns)), 1)
        cost = np.cumsum(rng.exponential(1.0, (n_slots, n_columns)), axis=1)
    else:
        delivery = rng.exponential(2.0, (n_slots, n_columns)) * rng.binomial(1, 0.8, (n_slots, n_columns))
        cost = rng.exponential(2.0, (n_slots, n_columns))
    return np.round(delivery, 3), np.round(cost, 3)  # rounding makes exact ties between items likely


def instances(seed: int, count: int):
    """Random small instances with ROI-binding, budget-binding and hard (maybe infeasible) constraints."""
    rng = np.random.default_rng(seed)
    for k in range(count):
        n_slots, n_columns = int(rng.integers(4, 7)), int(rng.integers(3, 6))
        if n_columns**n_slots > 8000:
            n_slots = 5
        delivery, cost = random_curves(rng, n_slots, n_columns, monotone=k % 2 == 0)
        if k % 3 == 0:  # an abstain column: always feasible, possibly only with zero delivery
            delivery[:, 0] = 0.0
            cost[:, 0] = 0.0
        roi_all = delivery.sum() / cost.sum()
        roi_target = float(roi_all * rng.choice([0.5, 1.0, 1.3, 3.0]))
        budget = [math.inf, float(cost.max(axis=1).sum() * rng.uniform(0.2, 0.9))][k % 4 >= 2]
        yield delivery, cost, roi_target, budget


@pytest.mark.parametrize("bound_fixing", [True, False])
def test_knapsack_matches_brute_force(bound_fixing: bool) -> None:
    n_infeasible = n_binding_budget = 0
    for delivery, cost, roi_target, budget in instances(seed=7 + bound_fixing, count=40):
        expected = brute_force(delivery, cost, roi_target, budget)
        got = solve_slot_knapsack(delivery, cost, roi_target, budget, bound_fixing=bound_fixing)
        if expected is None:
            n_infeasible += 1
            assert got is None
            continue
        assert got is not None
        assert got.delivery == pytest.approx(expected, rel=1e-9, abs=1e-12)
        # The reported totals are those of the reported choice, and they are feasible.
        rows = np.arange(delivery.shape[0])
        assert got.delivery == pytest.approx(delivery[rows, got.choice].sum(), rel=1e-12)
        assert bool(meets(got.delivery, got.cost, roi_target, budget))
        n_binding_budget += bool(math.isfinite(budget) and got.cost > 0.5 * budget)
    assert n_infeasible > 0 and n_binding_budget > 0  # the instances do exercise these cases


def test_zero_delivery_optimum_is_found() -> None:
    """Only "win nothing" meets an impossible ROI target: the optimum is the all-zero choice, D = 0."""
    rng = np.random.default_rng(3)
    delivery, cost = random_curves(rng, 5, 4, monotone=True)
    delivery[:, 0] = cost[:, 0] = 0.0
    got = solve_slot_knapsack(delivery, cost, roi_target=1e6)
    assert got is not None and got.delivery == 0.0 and got.cost == 0.0
    assert np.all(got.choice == 0)


def test_prune_keeps_exactly_the_undominated_first_columns() -> None:
    delivery = np.array([[0.0, 0.0, 1.0, 1.0, 3.0, 2.0, 3.0]])
    cost = np.array([[0.0, 0.0, 1.0, 2.0, 2.0, 3.0, 2.0]])
    items = prune_items(delivery, cost)
    # column 1 duplicates 0, 3 is dominated by 2 (same D, more C), 5 by 4, 6 duplicates 4.
    assert sorted(items.column.tolist()) == [0, 2, 4]


# ---------------------------------------------------------------------------------------------------------------------
# On a real day: the simulator agrees, and the oracles compare as they should


@pytest.fixture(scope="module")
def day_index() -> DayIndex:
    return DayIndex(random_day_log(np.random.default_rng(21), n=6000))


def budget_for(index: DayIndex, fraction: float) -> float:
    _, cost = slot_curves(index, np.array([1.5]))
    return float(cost.sum() * fraction)


@pytest.mark.parametrize(("roi_target", "budget_fraction"), [(1.0, None), (1.1, 0.4), (0.9, 2.0), (1.6, 0.5)])
def test_slot_oracle_replays_to_its_numbers(day_index: DayIndex, roi_target: float, budget_fraction: float | None):
    budget = math.inf if budget_fraction is None else budget_for(day_index, budget_fraction)
    found = slot_oracle(day_index, roi_target, budget)
    assert found.ratios.shape == (SLOTS_PER_DAY,)
    assert set(found.ratios.tolist()) <= set(ORACLE_GRID.tolist()) | {ABSTAIN_RATIO}
    steps = replay_day(day_index, found.ratios, budget)
    assert sum(s.delivery[0] for s in steps) == pytest.approx(found.delivery, rel=1e-12)
    assert replay_totals(day_index, found.ratios, budget) == (found.delivery, found.cost)
    assert bool(is_feasible(found.delivery, found.cost, roi_target, budget)[0])
    assert found.delivery > 0

    # Without bound fixing (HiGHS on the whole MILP) the optimum is the same.
    d, c = slot_curves(day_index)
    d, c = np.pad(d, ((0, 0), (0, 1))), np.pad(c, ((0, 0), (0, 1)))
    plain = solve_slot_knapsack(d, c, roi_target, budget, bound_fixing=False)
    assert plain is not None and plain.delivery == pytest.approx(found.delivery, rel=1e-9)

    # The day-wise oracle is one of the slot-wise oracle's options (up to the budget stop): never better here.
    daywise = day_oracle(day_index, roi_target, budget)
    assert np.all(daywise.ratios == daywise.ratios[0])
    assert bool(is_feasible(daywise.delivery, daywise.cost, roi_target, budget)[0])
    assert found.delivery >= daywise.delivery
    assert replay_totals(day_index, daywise.ratios, budget) == (daywise.delivery, daywise.cost)


def test_day_oracle_is_the_best_feasible_constant_ratio(day_index: DayIndex) -> None:
    grid = np.round(np.arange(0.2, 3.01, 0.2), 2)
    roi_target, budget = 1.2, budget_for(day_index, 0.3)
    found = day_oracle(day_index, roi_target, budget, grid=grid)
    options = [(replay_totals(day_index, np.full(SLOTS_PER_DAY, r), budget), r) for r in grid]
    feasible = [(d, r) for (d, c), r in options if bool(meets(d, c, roi_target, budget))]
    best_delivery = max(d for d, _ in feasible)
    assert found.delivery == best_delivery
    assert found.ratios[0] == min(r for d, r in feasible if d == best_delivery)


def test_an_impossible_roi_target_abstains(day_index: DayIndex) -> None:
    found = slot_oracle(day_index, roi_target=1e9)
    assert found.delivery == 0.0 and found.cost == 0.0
    for t, ratio in enumerate(found.ratios):
        assert ratio == ABSTAIN_RATIO or day_index.slot_outcome(t, np.array([ratio])).wins[0] == 0
    assert day_oracle(day_index, roi_target=1e9).delivery == 0.0


# ---------------------------------------------------------------------------------------------------------------------
# Over a market: cache hits, misses, staleness, read-only


@pytest.fixture
def count_solves(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str, str]]:
    calls: list[tuple[int, str, str]] = []
    real = oracle_cache.solve_day

    def counting(market, entry, setting, kind):
        calls.append((entry.day, str(setting), str(kind)))
        return real(market, entry, setting, kind)

    monkeypatch.setattr(oracle_cache, "solve_day", counting)
    return calls


def test_cache_hit_miss_and_staleness(tiny_market: Market, count_solves: list) -> None:
    first = market_oracle(tiny_market, "mc", days=[0, 1])
    assert len(count_solves) == 2
    assert market_oracle(tiny_market, "mc", days=[1, 0]) == first  # hits, in day order
    assert len(count_solves) == 2
    cache = tiny_market.root / oracle_cache.CACHE_DIR
    assert sorted(p.name for p in cache.iterdir()) == ["slot-mc-day0.json", "slot-mc-day1.json"]  # no temp files

    market_oracle(tiny_market, "sc", days=[0])  # another setting (and kind) is another entry
    market_oracle(tiny_market, "mc", kind="day", days=[0])
    assert count_solves[2:] == [(0, "sc", "slot"), (0, "mc", "day")]

    # Changed data: day 1's file is rewritten with other impressions -> recomputed; day 0 still hits.
    write_day(random_day_log(np.random.default_rng(99), n=3000, day=1), tiny_market.root / tiny_market.entry(1).file)
    again = market_oracle(tiny_market, "mc", days=[0, 1])
    assert count_solves[4:] == [(1, "mc", "slot")]
    assert again[0] == first[0] and again[1] != first[1]

    # Changed constraints -> recomputed; a corrupt cache file -> recomputed.
    tiny_market.entry(0).mc = type(tiny_market.entry(0).mc)(roi_target=1.2, budget=tiny_market.entry(0).mc.budget)
    (cache / "slot-mc-day1.json").write_text("{not json")
    market_oracle(tiny_market, "mc", days=[0, 1])
    assert count_solves[5:] == [(0, "mc", "slot"), (1, "mc", "slot")]


def test_read_only_market_still_works(tiny_market: Market, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(oracle_cache, "_write_cache", refuse)
    warnings: list[str] = []
    results = market_oracle(tiny_market, "sc", days=[0, 1, 2], on_warning=warnings.append)
    assert len(results) == 3 and len(warnings) == 1
    assert "Permission denied" in warnings[0]


def test_result_round_trips() -> None:
    result = OracleResult(3, "test", "mc", 1.1, None, 5.0, 4.0, [0.5] * SLOTS_PER_DAY)
    assert OracleResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


# ---------------------------------------------------------------------------------------------------------------------
# The command line


def cli() -> typer.Typer:
    app = typer.Typer(pretty_exceptions_enable=False)
    app.command("oracle")(oracle_command)

    @app.callback()
    def main() -> None:
        """rcb, as far as this test is concerned."""

    return app


@pytest.mark.parametrize("setting", ["sc", "mc"])
def test_cli_json_lines(tiny_market: Market, setting: str) -> None:
    result = CliRunner().invoke(cli(), ["oracle", str(tiny_market.root), "--setting", setting, "--json"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["day"] for r in records] == [e.day for e in tiny_market.days]
    for record, entry in zip(records, tiny_market.days, strict=True):
        assert set(record) == {"day", "split", "setting", "roi_target", "budget", "delivery", "cost", "ratios"}
        assert record["split"] == entry.split and record["setting"] == setting
        assert len(record["ratios"]) == SLOTS_PER_DAY
        assert all(0.0 <= r <= 4.0 for r in record["ratios"])
        budget = math.inf if record["budget"] is None else record["budget"]
        assert (record["budget"] is None) == (setting == "sc")
        assert bool(is_feasible(record["delivery"], record["cost"], record["roi_target"], budget)[0])
        assert record["delivery"] > 0


def test_cli_split_table_and_errors(tiny_market: Market, tmp_path: Path) -> None:
    runner = CliRunner()
    root = str(tiny_market.root)
    got = runner.invoke(cli(), ["oracle", root, "--setting", "mc", "--split", "ood", "--kind", "day", "--json"])
    assert got.exit_code == 0, got.output
    assert [json.loads(line)["split"] for line in got.stdout.splitlines()] == ["ood", "ood"]

    table = runner.invoke(cli(), ["oracle", root, "--setting", "sc", "--split", "test"])
    assert table.exit_code == 0 and "delivery" in table.stdout  # the result table goes to stdout

    for args, message in [
        (["oracle", root, "--setting", "xx"], "xx"),
        (["oracle", str(tmp_path / "nowhere"), "--setting", "sc"], "no such directory"),
        (["oracle", str(tmp_path), "--setting", "sc"], "manifest.json"),
        (["oracle", root, "--setting", "sc", "--split", "holdout"], "holdout"),
    ]:
        bad = runner.invoke(cli(), args)
        assert bad.exit_code == 2, bad.output
        output = " ".join(bad.output.replace("│", " ").split())  # rich wraps long lines
        assert message in output and "Traceback" not in output
