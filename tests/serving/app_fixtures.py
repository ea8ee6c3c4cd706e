"""Service apps for the route tests: the tiny exported models of ``artifact_fixtures`` behind a TestClient.

The ``models`` and ``client`` fixtures live in conftest.py; these are the factories and request builders.
``TestClient`` as a context manager runs the lifespan (model load, store open).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from loadtest.run_server import ServerProcess, free_port, start_process
from model.contract import SLOTS_PER_DAY
from service.config import Settings
from service.main import create_app
from training.replay.dayset import DaySet
from training.replay.simulator import BatchedReplay

TOKEN = "s3cret-token-for-tests"


def settings_for(model_dir: Path, store: str = "memory", **overrides: Any) -> Settings:
    """Route tests run the bare model (``shield=False``) unless they ask for the shield."""
    overrides.setdefault("shield", False)
    return Settings(model_dir=model_dir, store=store, log_level="WARNING", **overrides)


@contextmanager
def serving(model_dir: Path, store: str = "memory", **overrides: Any) -> Iterator[TestClient]:
    with TestClient(create_app(settings_for(model_dir, store, **overrides)), raise_server_exceptions=False) as client:
        yield client


def play_day(client: TestClient, days: DaySet, k: int) -> tuple[list[float], list[dict[str, Any]]]:
    """Day ``k`` of ``days`` played through the API, the simulator as the ad engine: campaign ``episode-{k}``,
    episode ``offline``, registered with the day's constraints, then every slot's stats reported. The ratios it bid
    (the registration's, then each answer's: ``SLOTS_PER_DAY + 1``) and the slot answers."""
    campaign, budget = f"episode-{k}", float(days.budget[k])
    registration = {
        "episode": "offline",
        "roi_target": float(days.roi_target[k]),
        "budget": None if np.isinf(budget) else budget,
    }
    ratios, answers = [client.put(f"/v1/campaigns/{campaign}", json=registration).json()["bid_ratio"]], []
    env = BatchedReplay([days.indexes()[k]], np.array([0]), np.array([budget]))
    for slot in range(SLOTS_PER_DAY):
        step = env.step(np.array([ratios[-1]]))
        stats = {
            "delivery": float(step.delivery[0]),
            "cost": float(step.cost[0]),
            "wins": int(step.wins[0]),
            "auctions": int(step.auctions[0]),
        }
        reply = client.post(
            "/v1/slot-update", json={"campaign_id": campaign, "episode": "offline", "slot": slot, **stats}
        )
        assert reply.status_code == 200, reply.text
        answers.append(reply.json())
        ratios.append(answers[-1]["bid_ratio"])
    return ratios, answers


def register(
    client: TestClient,
    campaign: str = "c1",
    episode: str = "e1",
    roi_target: float = 1.0,
    budget: float | None = None,
    **headers: str,
) -> Any:
    return client.put(
        f"/v1/campaigns/{campaign}",
        json={"episode": episode, "roi_target": roi_target, "budget": budget},
        headers=headers,
    )


def update(
    campaign: str = "c1",
    episode: str = "e1",
    slot: int = 0,
    delivery: float = 3.0,
    cost: float = 2.0,
    wins: int = 4,
    auctions: int = 100,
) -> dict[str, Any]:
    return {
        "campaign_id": campaign,
        "episode": episode,
        "slot": slot,
        "delivery": delivery,
        "cost": cost,
        "wins": wins,
        "auctions": auctions,
    }


def metric(text: str, name: str) -> float:
    """The sum of a Prometheus metric's samples (every label set) in ``/metrics``' text."""
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + " ") or line.startswith(name + "{")
    ]
    return sum(values)


def rcb_serve(model: Path, store: str = "memory", *args: str, ready_timeout: float = 60, **env: str) -> ServerProcess:
    """``rcb serve`` as its own process on a free port (a context manager), ready when /readyz answers 200 (with
    ``--workers N``, from N processes: every worker has subscribed to the store's notices).

    ``env`` adds ``RCB_*`` settings (e.g. ``RCB_NOISE_SEED="4"``); ``args`` more ``rcb serve`` flags.
    """
    port = free_port()
    cmd = [sys.executable, "-m", "rcb.cli", "serve", "--model", str(model), "--store", store, "--port", str(port)]
    cmd += ["--log-level", "warning", *args]
    workers = int(args[args.index("--workers") + 1]) if "--workers" in args else 1
    return start_process(
        cmd, port, cpu=None, ready_path="/readyz", env=env, ready_timeout=ready_timeout, workers=workers
    )


def rcb_replay(url: str, market: Path, out: Path, *args: str) -> Any:
    """``rcb replay`` of the market's test days against ``url`` (the CLI, in this process), JSON output."""
    from artifact_fixtures import SETTING
    from typer.testing import CliRunner

    from rcb.cli import app

    cmd = ["replay", "--url", url, "--data", str(market), "--setting", SETTING, "--split", "test", "--out", str(out)]
    return CliRunner().invoke(app, [*cmd, *args, "--json"])
