"""research/headroom.py: twin days, the informed bidders' choice, and its rows against rcb evaluate's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from model.contract import Setting
from research import headroom
from training.evaluation.evaluate import EvaluationError, evaluate, split_days
from training.market.dataset import MANIFEST, Market
from training.market.generator import MarketConfig, config_with, generate_day, generate_market, generate_twin
from training.market.suite import PRESETS
from training.replay.oracle import ORACLE_GRID

SMALL = config_with(days_id=8, days_ood=2, impressions_per_day=20_000, seed=3)


def command() -> tuple[typer.Typer, CliRunner]:
    """``python -m research.headroom`` as an app, and a runner that keeps each error message on one line."""
    app = typer.Typer(add_completion=False)
    app.command()(headroom.main)
    return app, CliRunner(env={"COLUMNS": "250"})


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Market:
    return generate_market(tmp_path_factory.mktemp("headroom") / "market", SMALL, workers=1)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_generator_config_survives_the_manifest(name: str):
    config = PRESETS[name]
    assert MarketConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(TypeError):
        MarketConfig.from_dict({**config.to_dict(), "no_such_field": 1})


def test_a_twin_keeps_the_days_regime_and_redraws_its_impressions():
    config = config_with(impressions_per_day=200_000, seed=1)
    day, regime = generate_day(4, False, config)
    twin, again, other = (generate_twin(4, False, config, k) for k in (0, 0, 1))
    assert np.array_equal(twin.utility, again.utility)  # deterministic
    assert not np.array_equal(twin.utility[:1000], day.utility[:1000])
    assert not np.array_equal(twin.utility[:1000], other.utility[:1000])

    def slot_log_price(log) -> np.ndarray:
        # price / utility**elasticity removes the impression's own utility; what is left per slot is the regime's
        # price path (plus per-impression noise whose median is 0).
        ratio = np.log(log.market_price) - config.price_utility_elasticity * np.log(log.utility)
        return np.array(
            [np.median(ratio[a:b]) for a, b in zip(log.slot_offsets[:-1], log.slot_offsets[1:], strict=True)]
        )

    path = np.asarray(regime["log_price_path"])
    for log in (day, twin):
        assert np.corrcoef(slot_log_price(log), path)[0, 1] > 0.95
    # the same expected traffic: per-slot counts within Poisson noise of each other
    counts = np.diff(day.slot_offsets), np.diff(twin.slot_offsets)
    assert np.all(np.abs(counts[0] - counts[1]) < 6 * np.sqrt(counts[0] + 1))


def test_a_budget_is_spent_slot_by_slot():
    delivery = np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]])
    cost = np.array([[1.0, 3.0], [1.0, 3.0], [1.0, 3.0]])
    d, c = headroom.budgeted_totals(delivery, cost, np.inf)
    assert d.tolist() == [3.0, 6.0] and c.tolist() == [3.0, 9.0]
    d, c = headroom.budgeted_totals(delivery, cost, 4.5)
    assert c.tolist() == [3.0, 4.5]  # the second ratio spends its budget half-way through slot 2
    assert d.tolist() == [3.0, 3.0]


def test_the_informed_ratio_maximizes_expected_feasible_delivery():
    grid = ORACLE_GRID.size
    delivery = np.tile(np.linspace(1.0, 10.0, grid), (2, 1))
    cost = delivery / np.linspace(3.0, 0.5, grid)  # ROI falls from 3 to 0.5 as the ratio grows
    cost[1] *= 1.2  # the second twin is less lucky
    chosen = headroom.best_constant(delivery, cost, 1.0, 0.0)
    roi = delivery / cost
    expected = np.where(roi >= 1.0, delivery, 0.0).mean(axis=0)
    assert chosen == ORACLE_GRID[int(np.argmax(expected))]
    assert headroom.best_constant(delivery, cost, 1.0, 0.2) < chosen  # a margin bids lower
    assert headroom.best_constant(delivery, cost, 10.0, 0.0) == ORACLE_GRID[0]  # nothing feasible: the smallest


def test_the_rows_match_rcb_evaluates(market: Market):
    episodes, summary, figures = headroom.headroom(market.root, Setting.SC, "test", twins=2)
    evaluation = evaluate(market, "sc", "test", ["pid", "rm", "oracle-day"], seeds=1)
    reference = evaluation.episodes
    for ours, theirs in (("pid", "pid"), ("rm", "rm")):
        a = episodes[episodes["method"] == ours].sort_values("day")
        b = reference[reference["method"] == theirs].sort_values("day")
        assert np.allclose(a["delivery"], b["delivery"]) and np.allclose(a["cost"], b["cost"])
        assert summary[ours]["ans_median"] == pytest.approx(evaluation.summary[theirs]["ans_median"])
    hindsight = episodes[episodes["method"] == "hindsight-constant"].sort_values("day")
    oracle = reference[reference["method"] == "oracle-day"].sort_values("day")
    assert np.allclose(hindsight["delivery"], oracle["delivery"])  # SC: the day-wise oracle's ratio
    assert set(summary) >= {headroom.informed(k, m) for k in ("pid", "constant") for m in headroom.MARGINS}
    pid = summary["pid"]
    for kind in ("pid", "constant"):
        got = figures[kind]
        if got["row"] is not None:
            assert summary[got["row"]]["csr"] >= pid["csr"] - 1e-9
            assert got["gain"] == pytest.approx(summary[got["row"]]["ans_median"] - pid["ans_median"])


def test_with_budgets_the_hindsight_row_is_the_day_wise_oracle_too(market: Market):
    episodes, _, _ = headroom.headroom(market.root, Setting.MC, "test", twins=1, from_slots=())
    oracle = evaluate(market, "mc", "test", ["oracle-day"], seeds=1).episodes.sort_values("day")
    hindsight = episodes[episodes["method"] == "hindsight-constant"].sort_values("day")
    assert np.allclose(hindsight["delivery"], oracle["delivery"]) and np.allclose(hindsight["cost"], oracle["cost"])


def test_an_imported_or_edited_market_is_refused(market: Market, tmp_path: Path):
    import shutil

    copy = tmp_path / "edited"
    shutil.copytree(market.root, copy)
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest["source"]["config"]["seed"] = 4
    (copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(EvaluationError, match="not what the manifest's generator config draws"):
        headroom.headroom(copy, Setting.SC, "test", twins=1)
    manifest["source"]["config"] = {**manifest["source"]["config"], "seed": 3, "new_knob": 1}
    (copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(EvaluationError, match="not one this version reads"):
        headroom.headroom(copy, Setting.SC, "test", twins=1)
    manifest["source"] = {"kind": "import"}
    (copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(EvaluationError, match="not a generated market"):
        headroom.headroom(copy, Setting.SC, "test", twins=1)


def test_the_command_writes_its_table_plot_and_refuses_learned_rows_of_other_days(market: Market, tmp_path: Path):
    app, runner = command()
    out = tmp_path / "out"
    result = runner.invoke(app, [str(market.root), "--split", "test", "--twins", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "headroom, informed pid" in result.output
    assert {p.name for p in out.iterdir()} == {"episodes.csv", "headroom.json", "headroom.png", "by-slot.png"}
    saved = json.loads((out / "headroom.json").read_text())
    assert saved["figures"]["days"] == len(market.split("test"))

    # A learned row from another split's episodes is refused, one from the same days drawn.
    elsewhere = evaluate(market, "sc", "ood", ["pid"], seeds=1).episodes
    elsewhere.to_csv(tmp_path / "ood.csv", index=False)
    result = runner.invoke(app, [str(market.root), "--twins", "1", "--learned", f"pid@{tmp_path / 'ood.csv'}"])
    assert result.exit_code == 2 and "other days" in result.output
    result = runner.invoke(app, [str(market.root), "--twins", "1", "--learned", f"cbrl@{tmp_path / 'ood.csv'}"])
    assert result.exit_code == 2 and "methods there: pid" in result.output
    result = runner.invoke(app, [str(market.root), "--twins", "1", "--json", "--learned", f"rm@{out / 'episodes.csv'}"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["learned"]["rm"]["ans_median"] == pytest.approx(
        saved["summary"]["rm"]["ans_median"]
    )


def test_a_twin_told_part_of_the_regime_draws_the_rest_from_the_family(monkeypatch: pytest.MonkeyPatch):
    import training.market.generator as generator

    config = config_with(impressions_per_day=1000, seed=2)
    _, regime = generate_day(5, True, config)
    seen: list[dict] = []
    monkeypatch.setattr(generator, "draw_impressions", lambda day, rng, regime, config: seen.append(regime))
    for known in (("market", "conversion"), ("conversion",), ("market",), ()):
        generate_twin(5, True, config, 0, known)
    everything, conversion_only, market_only, family_only = seen
    assert sorted(f for part in generator.REGIME_PARTS.values() for f in part) == sorted(regime)  # every field, once
    assert family_only["conversion_scale"] != regime["conversion_scale"]
    assert family_only["log_price_path"] != regime["log_price_path"]
    assert everything == regime
    assert conversion_only["conversion_scale"] == regime["conversion_scale"]
    assert conversion_only["log_price_path"] != regime["log_price_path"]
    assert market_only["log_price_path"] == regime["log_price_path"]
    assert market_only["traffic_path"] == regime["traffic_path"]
    assert market_only["conversion_scale"] != regime["conversion_scale"]
    with pytest.raises(ValueError, match="unknown regime parts"):
        generate_twin(5, True, config, 0, ("weather",))


def test_the_informed_bidders_know_only_what_they_are_told(market: Market):
    days, _ = split_days(market, "test", Setting.SC)
    generator = headroom.check_generated(market, days)
    everything = headroom.informed_ratios(days, generator, 2)
    conversion_only = headroom.informed_ratios(days, generator, 2, ("conversion",))
    assert not np.array_equal(everything[0.0], conversion_only[0.0])


def test_signal_rates_count_what_a_ratio_wins(market: Market):
    days, _ = split_days(market, "test", Setting.SC)
    rates = headroom.signal_rates(days, np.full(len(days), 2.0))
    won = [(2.0 * log.utility > log.market_price) for log in days.logs]
    assert rates["wins_per_slot"] == pytest.approx(np.median([w.sum() / 48 for w in won]))
    delivering = [(w & (log.delivery > 0)).sum() / 48 for w, log in zip(won, days.logs, strict=True)]
    assert rates["delivering_wins_per_slot"] == pytest.approx(np.median(delivering))
    assert 0 < rates["delivering_wins_per_slot"] < rates["wins_per_slot"]


def test_learning_the_regime_at_slot_0_is_the_informed_constant_and_later_is_the_pid_before(market: Market):
    episodes, _, figures = headroom.headroom(market.root, Setting.SC, "test", twins=2, from_slots=(0, 24))
    by = {m: rows.sort_values("day") for m, rows in episodes.groupby("method")}
    for m in headroom.MARGINS:
        now, constant = by[headroom.informed_from(0, m)], by[headroom.informed("constant", m)]
        assert np.array_equal(now["delivery"].to_numpy(), constant["delivery"].to_numpy())
    # Told at slot 24, the day is the PID's until then and differs after.
    days, _ = split_days(market, "test", Setting.SC)
    late = by[headroom.informed_from(24, 0.0)]
    assert not np.array_equal(late["delivery"].to_numpy(), by["pid"]["delivery"].to_numpy())
    pid, _ = headroom.tuned_baseline(market, "pid", Setting.SC, lambda: days)
    from training.bidders.base import play

    outcome = play(
        headroom.SwitchAt(pid, np.full(len(days), 4.0), np.full(len(days), 48)),
        days.indexes(),
        days.episode_days(),
        days.registration(),
        0,
    )
    assert np.allclose(outcome.delivery, by["pid"]["delivery"].to_numpy())  # never told: the PID itself
    assert set(figures["from_slot"]) == {"0", "24"}
    assert figures["from_slot"]["0"]["gain"] == figures["constant"]["gain"]


def test_from_slots_are_checked_before_any_work(market: Market):
    app, runner = command()
    for bad in ("3,x", "0,48"):
        result = runner.invoke(app, [str(market.root), "--from-slots", bad])
        assert result.exit_code == 2 and "--from-slots" in result.output
    result = runner.invoke(app, [str(market.root), "--know", "family", "--know", "market"])
    assert result.exit_code == 2 and "or family alone" in result.output


def test_told_only_the_family_the_twins_are_other_days(market: Market):
    app, runner = command()
    result = runner.invoke(app, [str(market.root), "--know", "family", "--twins", "2", "--from-slots", "", "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)["figures"]
    assert figures["known"] == [] and figures["from_slot"] == {}


def test_another_first_twin_is_another_set_of_twins(market: Market):
    days, _ = split_days(market, "test", Setting.SC)
    generator = headroom.check_generated(market, days)
    first = headroom.informed_ratios(days, generator, 1)
    other = headroom.informed_ratios(days, generator, 1, first_twin=5)
    again = headroom.informed_ratios(days, generator, 1, first_twin=5)
    assert np.array_equal(other[0.0], again[0.0]) and not np.array_equal(first[0.0], other[0.0])


def test_twins_drawn_in_worker_processes_give_the_same_ratios(market: Market):
    days, _ = split_days(market, "test", Setting.SC)
    generator = headroom.check_generated(market, days)
    alone = headroom.informed_ratios(days, generator, 2)
    pooled = headroom.informed_ratios(days, generator, 2, workers=2)
    assert all(np.array_equal(alone[m], pooled[m]) for m in headroom.MARGINS)
