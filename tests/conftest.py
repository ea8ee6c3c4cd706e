"""Shared fixtures: small random days, a tiny market directory built without the generator, and the session's tiny
exported models (artifact_fixtures) with a market they were not trained on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from artifact_fixtures import Exported, exported_runs

from model.contract import SLOTS_PER_DAY
from training.market.dataset import DayEntry, Market, MCConstraints
from training.market.logs import write_day
from training.market.schema import DayLog


def random_day_log(rng: np.random.Generator, n: int = 5000, day: int = 0, conversion: float = 0.3) -> DayLog:
    """A day of ``n`` impressions with lognormal utilities/prices, sparse delivery, some exact ties.

    Values are float32-representable so a Parquet round trip is exact.
    """
    counts = rng.multinomial(n, np.ones(SLOTS_PER_DAY) / SLOTS_PER_DAY)
    utility = rng.lognormal(0.0, 1.0, n)
    market_price = utility * rng.lognormal(0.2, 0.7, n)
    market_price[: n // 50] = utility[: n // 50]  # exact ties at ratio 1.0 (strict '>' must lose them)
    delivery = rng.binomial(1, conversion, n) * utility * rng.lognormal(0.0, 0.3, n) / conversion
    as32 = lambda x: x.astype(np.float32).astype(np.float64)  # noqa: E731
    return DayLog(
        day=day,
        utility=as32(utility),
        market_price=as32(market_price),
        delivery=as32(delivery),
        cost=as32(market_price),
        slot_offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
    )


def build_market(root: Path, n_days: int = 6, n: int = 3000, seed: int = 0) -> Market:
    """Write a small market: days split train/test/ood in thirds, MC constraints L=1.1, B=cost of ratio 1.5/2."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    entries = []
    for day in range(n_days):
        log = random_day_log(rng, n=n, day=day)
        name = f"day_{day:03d}.parquet"
        write_day(log, root / name)
        split = ("train", "test", "ood")[day * 3 // n_days]
        won = 1.5 * log.utility > log.market_price
        entries.append(
            DayEntry(
                day=day,
                split=split,
                file=name,
                n_impressions=log.n_impressions,
                mc=MCConstraints(roi_target=1.1, budget=float(log.cost[won].sum() / 2)),
            )
        )
    market = Market(root=root, days=entries, source={"kind": "test-fixture", "seed": seed})
    market.save()
    return market


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture
def tiny_market(tmp_path: Path) -> Market:
    return build_market(tmp_path / "market")


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """The session's tiny trained runs and their exported models (built once: artifact_fixtures.exported_runs)."""
    return exported_runs(tmp_path_factory)


@pytest.fixture(scope="session")
def served_market(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A market the fixture models were not trained on: another seed of the generator (they trained on seed 4's)."""
    from training.market.generator import config_with, generate_market

    market = tmp_path_factory.mktemp("served") / "market"
    generate_market(market, config_with(days_id=6, days_ood=0, impressions_per_day=3000, seed=9), workers=1)
    return market
