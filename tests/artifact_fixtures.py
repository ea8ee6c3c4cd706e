"""Tiny trained runs and their exported artifacts, built once per test session for test_export and test_artifact.

A six-day generated market (three train days), one CBRL, one residual CBRL (``--residual``: a correction
of the PID tuned on the train days) and one non-Bayesian (hard) run of one epoch with a handful of
gradient steps: the weights are barely trained, which is all parity needs, and their episodes still
win and spend (a policy at its initialization bids ratios around 2). And the planner on the same train days
(``rcb export --plan``): no network, the same artifact contract.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SETTING = "sc"


@dataclass(frozen=True)
class Exported:
    market: Path
    cbrl_run: Path
    hard_run: Path
    cbrl_model: Path
    hard_model: Path
    residual_run: Path
    residual_model: Path
    plan_model: Path


_built: dict[str, Exported] = {}


def exported_runs(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """Generate, train and export once; later callers in the session get the same directories."""
    if "runs" not in _built:
        from training.export.onnx import export_run
        from training.export.planner import export_planner
        from training.market.generator import config_with, generate_market
        from training.rl.runs import run_training
        from training.rl.sac import SACConfig

        root = tmp_path_factory.mktemp("exported")
        market = root / "market"
        generate_market(market, config_with(days_id=6, days_ood=0, impressions_per_day=3000, seed=4), workers=1)
        runs = {}
        for name, algo, residual in (("cbrl", "cbrl", False), ("hard", "hard", False), ("residual", "cbrl", True)):
            config = SACConfig(algo=algo, epochs=1, updates_per_epoch=5, batch_size=64, seed=1, residual=residual)
            run_training(market, SETTING, config, root / name)
            export_run(root / name, root / f"model-{name}")
            runs[name] = root / name
        export_planner(market, SETTING, root / "model-plan")
        _built["runs"] = Exported(
            market,
            runs["cbrl"],
            runs["hard"],
            root / "model-cbrl",
            root / "model-hard",
            runs["residual"],
            root / "model-residual",
            root / "model-plan",
        )
    return _built["runs"]


def rewrite_card(directory: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Edit a model directory's ``model.json`` in place, as a hand edit would."""
    card = directory / "model.json"
    raw = json.loads(card.read_text())
    edit(raw)
    card.write_text(json.dumps(raw))


def replace_file(directory: Path, name: str, content: bytes) -> None:
    """Swap in another file and update its checksum, as a careless hand edit would."""
    (directory / name).write_bytes(content)
    rewrite_card(directory, lambda raw: raw["files"].__setitem__(name, hashlib.sha256(content).hexdigest()))
