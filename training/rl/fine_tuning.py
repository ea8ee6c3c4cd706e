"""Fine-tuning (``rcb train --init-from RUN``): the run a new run starts from, read and checked before any work.

The new run takes the source's last epoch's learned networks (:data:`training.rl.sac.NETWORKS`: actor, critics and
their targets, posterior encoder, temperature) and starts its own optimizers, schedule and curriculum afresh
(:meth:`training.rl.sac.SACAgent.load_networks`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from model.contract import Setting
from training.rl.config import SACConfig
from training.rl.run_schema import RUN_FILE, RunError, read_record
from training.rl.sac import NETWORKS, check_networks_fit

NETWORK_MEANING = ("hidden", "latent_dim", "action_step", "start_ratio")
"""The :class:`SACConfig` fields, beside the algorithm and the residual choice, that size the networks or give
their outputs their meaning (a step is not a saved weight: the same actor moves the ratio by another amount)."""


@dataclass(frozen=True)
class InitialNetworks:
    """A fine-tuned run's starting point (:attr:`SACConfig.init_from`): the source run's last epoch's networks
    and what run.json records of it."""

    networks: dict[str, Any]
    source: dict[str, Any]
    """``run`` (its directory), ``market``, ``data_fingerprint`` (its train days), ``epochs`` trained, its
    ``validation_fold`` and, if the source was fine-tuned too, its own ``initialized_from``."""


def initial_networks(source: Path, setting: Setting, config: SACConfig) -> InitialNetworks:
    """Read and check the run a new run is fine-tuned from: a finished ``rcb train`` run (not a reselection) of
    the same setting, algorithm and kind (residual or not) and :data:`NETWORK_MEANING`, whose checkpoint holds its
    last epoch's networks, every tensor of which fits this run's (:func:`training.rl.sac.check_networks_fit`).
    :class:`RunError` says what is wrong."""
    if not (source / RUN_FILE).is_file():
        raise RunError(f"--init-from {source}: not a run directory (no {RUN_FILE})")
    try:
        recorded = read_record(source)
    except (OSError, json.JSONDecodeError) as exc:
        raise RunError(f"--init-from {source}: unreadable run record ({exc})") from None
    if recorded.get("reselected_from"):
        raise RunError(f"--init-from {source}: a reselection (rcb reselect) holds no networks to start from")
    if recorded.get("status") != "done":
        raise RunError(f"--init-from {source}: the run is not finished (resume it first)")
    if recorded.get("setting") != str(setting):
        raise RunError(f"--init-from {source}: trained for {recorded.get('setting')}, not {setting}")
    kept = recorded.get("config", {})
    if kept.get("algo") != config.algo:
        raise RunError(f"--init-from {source}: trains {kept.get('algo')}, not {config.algo}")
    if bool(kept["residual"]) != config.residual:

        def kind(is_residual: bool) -> str:
            return "a correction of its pid" if is_residual else "not a residual policy"

        raise RunError(
            f"--init-from {source}: its policy is {kind(bool(kept['residual']))},"
            f" this run's is {kind(bool(config.residual))}"
        )
    for name in NETWORK_MEANING:
        if kept[name] != getattr(config, name):
            raise RunError(
                f"--init-from {source}: its networks were trained with {name} {kept[name]},"
                f" this run's is {getattr(config, name)}"
            )
    try:
        state = torch.load(source / "checkpoint.pt", weights_only=False)
        if not isinstance(state, dict):
            raise ValueError("not a checkpoint")
    except Exception as exc:  # whatever unpickling a damaged file raises, it is one message
        raise RunError(f"--init-from {source}: unreadable checkpoint.pt ({exc})") from None
    networks = {key: state.get(key) for key in NETWORKS}
    try:  # every tensor, now: before the train days are loaded, the controller tuned or the run directory made
        check_networks_fit(config, networks)
    except ValueError as exc:
        raise RunError(f"--init-from {source}: {exc}") from None
    source_record = {
        "run": str(source),
        "market": recorded.get("market"),
        "data_fingerprint": recorded.get("data_fingerprint"),
        "epochs": len(recorded.get("history", [])),
        "validation_fold": int(kept["validation_fold"]),
        **({"initialized_from": recorded["initialized_from"]} if recorded.get("initialized_from") else {}),
    }
    return InitialNetworks(networks=networks, source=source_record)
