"""research/planner_evidence.py and research/depth_gate.py: the planner probes' commands and the depth-gated shield."""

from __future__ import annotations

import numpy as np
import pytest
import typer
from planner_fixtures import sc_train_days, small_market
from typer.testing import CliRunner

from model import planner as law
from model.controller import ControllerGains
from model.history import History
from model.shield import shield
from research import planner_evidence
from research.depth_gate import DepthGatedShield
from training.bidders import planner
from training.bidders.base import Bidder, play
from training.market.dataset import Market
from training.replay.dayset import DaySet


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Market:
    return small_market(tmp_path_factory)


@pytest.fixture(scope="module")
def train(market: Market) -> DaySet:
    return sc_train_days(market)


@pytest.fixture(scope="module")
def scenarios(train: DaySet) -> law.Scenarios:
    return planner.scenarios_of(train)


def test_the_probe_command_refuses_the_train_days_it_plans_on(market: Market):

    app = typer.Typer(add_completion=False)
    app.command()(planner_evidence.main)
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, [str(market.root), "--split", "validation"])
    assert result.exit_code != 0 and "scenarios are the train days" in result.output


def test_the_depth_gated_shield_is_the_planner_until_its_flag_and_the_shielded_planner_after(
    train: DaySet, scenarios: law.Scenarios
):
    """``python -m research.depth_gate``: alerts never reached bid the planner alone; alerts always reached shield it
    from slot 1 (slot 0 has observed nothing, so it is never flagged) to the day's end."""

    tuned = planner.Planner(scenarios, 0.0, 0.3)
    gains = ControllerGains()

    class FromSlotOne(planner.Planner):
        def bid(self, history: History) -> np.ndarray:
            ratio = super().bid(history)
            return shield(history, ratio, gains).ratio if history.slot >= 1 else ratio

    def played(bidder: Bidder) -> tuple[np.ndarray, np.ndarray]:
        outcome = play(bidder, train.indexes(), train.episode_days(), train.registration(), 0)
        return outcome.delivery, outcome.cost

    never = DepthGatedShield(tuned, gains, (np.inf, np.inf))
    assert all(np.array_equal(a, b) for a, b in zip(played(never), played(tuned), strict=True))
    assert (never.first_flag == -1).all()
    always = DepthGatedShield(tuned, gains, (-1.0, -1.0))
    shielded = played(FromSlotOne(scenarios, 0.0, 0.3))
    assert all(np.array_equal(a, b) for a, b in zip(played(always), shielded, strict=True))
    assert (always.first_flag == 1).all()
    assert not np.array_equal(shielded[1], played(tuned)[1])  # the shield acted: the two cases differ
