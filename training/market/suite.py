"""The market suite: the benchmark market and generator configurations that differ from it in what matters.

A design choice settled on the benchmark market alone is not settled; ``research/scripts/suite.sh`` trains the
default config and evaluates every method on each market here (``rcb market generate --preset NAME``).
Each preset changes one family of traits against :class:`MarketConfig`'s defaults (the benchmark):

* ``bench``: the benchmark market itself.
* ``sparse``: far sparser deliveries: a fifth of the traffic, a conversion rate 2.5x lower, so a
  campaign wins a handful of delivering impressions per slot and ROI readings are noisy.
* ``shifted``: another price scale and optimal ratio level: money in units 50x larger (values, utility,
  prices and budgets alike), and a conversion model that *under*-predicts, so the best constant ratio
  sits near 1.5 instead of below 1.
* ``volatile``: stronger intraday drift and shocks: a 3x diurnal price wave, 2-3x the random-walk
  volatility and several times the shock rate, on ID and OOD days.

The presets are few and hand-made; the zoo (:mod:`training.market.zoo`, ``zoo-00`` .. ``zoo-19``) draws every
trait at once over wide ranges, for markets no choice was tuned on. :func:`preset` names both.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from training.market.generator import ID_FAMILY, OOD_FAMILY, MarketConfig
from training.market.zoo import parse_zoo_name, zoo_config

PRESETS: dict[str, MarketConfig] = {
    "bench": MarketConfig(),
    "sparse": MarketConfig(impressions_per_day=200_000, base_cvr=0.008),
    "shifted": MarketConfig(
        value_scale=50.0,
        id_family=replace(ID_FAMILY, conversion_log_mean=0.0),
        ood_family=replace(OOD_FAMILY, conversion_log_mean=-0.1),
    ),
    "volatile": MarketConfig(
        diurnal_price_amplitude=0.3,
        id_family=replace(ID_FAMILY, volatility=(0.06, 0.15), shock_rate=(0.03, 0.08)),
        ood_family=replace(OOD_FAMILY, volatility=(0.12, 0.25), shock_rate=(0.06, 0.14)),
    ),
}
"""Suite markets by name; each seeded by ``--seed`` like any generated market."""


def preset(name: str, **overrides: Any) -> MarketConfig:  # any of MarketConfig's fields, of several types
    """The named preset, or zoo draw (``zoo-07``), with some fields replaced (the CLI's --days-id, --seed, ...)."""
    if name.startswith("zoo-"):
        return zoo_config(parse_zoo_name(name), **overrides)
    if name not in PRESETS:
        raise ValueError(f"unknown market preset {name!r}; known: {', '.join(PRESETS)}, zoo-00 .. zoo-19")
    return replace(PRESETS[name], **overrides)
