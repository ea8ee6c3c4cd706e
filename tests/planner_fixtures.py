"""The small generated market the planner's tests (and the planner probes' in research/tests) plan on."""

from __future__ import annotations

import pytest

from model.contract import Setting
from training.evaluation.evaluate import split_days
from training.market.dataset import Market
from training.market.generator import config_with, generate_market
from training.replay.dayset import DaySet

SMALL = config_with(days_id=8, days_ood=2, impressions_per_day=20_000, seed=3)


def small_market(tmp_path_factory: pytest.TempPathFactory) -> Market:
    return Market.open(generate_market(tmp_path_factory.mktemp("plan") / "market", SMALL, workers=1).root)


def sc_train_days(market: Market) -> DaySet:
    _, train = split_days(market, "test", Setting.SC)
    return train()
