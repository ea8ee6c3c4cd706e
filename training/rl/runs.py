"""`rcb train`'s run directory: config, checkpoints, learning curves; resumable, and a method for ``rcb evaluate``.

Layout of ``RUN/``:

* ``run.json``: what was trained (market, setting, config, data fingerprint, status, per-epoch history), at the
  schema of :mod:`training.rl.run_schema`, through which every reader goes;
* ``checkpoint.pt``: the latest state (networks, optimizers, replay-free: collection restarts cleanly) and the
  run's record, written first each epoch so an interrupted write is recovered on resume;
* ``best.pt``: the model model selection keeps (:mod:`training.rl.epoch_selection`: the best validation score on
  held-out train days, from epoch N on under ``--select-from N``);
* ``validation-best.pt``: under ``--select-from N`` only, the plain validation argmax (what ``--select-from 0``
  would keep), in ``best.pt``'s format;
* ``epochs/epoch-NNN.pt``: under ``--keep-epochs`` only, every epoch's model in ``best.pt``'s format (about 0.2 MB
  each for CBRL), and ``epochs/controller.pt`` the untrained controller's under ``start_at_controller``, so another
  epoch can be kept afterwards (``rcb reselect``);
* ``curves.csv`` and ``curves.png``: train and validation score per epoch.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import pickle
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure

from model.contract import Setting
from model.controller import ControllerGains
from model.features import obs_dim
from training.bidders.tuned import tuned_baseline
from training.files import atomic_write, atomic_write_text
from training.market.dataset import Market
from training.replay.dayset import DaySet, traffic_profile
from training.rl.config import ALGOS, SACConfig, reference_of
from training.rl.encoder import PosteriorEncoder, transition_dim
from training.rl.ensemble import ensemble_of
from training.rl.epoch_selection import CONTROLLER_EPOCH, EPOCHS_DIR, kept_epoch, run_scores, snapshot_name, start_of
from training.rl.fine_tuning import initial_networks
from training.rl.loop import EpochLog, train
from training.rl.networks import TanhGaussianPolicy
from training.rl.policy_bidder import PolicyBidder
from training.rl.run_schema import (
    FORMAT,
    RUN_FILE,
    SCHEMA,
    RunError,
    config_differences,
    migrate,
    pooled_fingerprint,
    read_record,
)
from training.rl.sac import SACAgent

__all__ = [
    "ALGOS",
    "RUN_FILE",
    "VALIDATION_BEST_FILE",
    "PolicyBidder",
    "RunError",
    "best_bidder",
    "load_best",
    "load_ensemble_bidder",
    "load_run_bidder",
    "pooled_fingerprint",
    "reference_controller",
    "run_body",
    "run_training",
    "training_markets",
    "write_curves",
]

VALIDATION_BEST_FILE = "validation-best.pt"
"""Under ``--select-from N``: the plain validation argmax's model beside ``best.pt``."""


def _atomic_save(obj: Any, path: Path) -> None:
    atomic_write(path, lambda tmp: torch.save(obj, tmp))


def _write_json(body: dict[str, Any], path: Path) -> None:
    atomic_write_text(path, json.dumps(body, indent=1, default=str))


def run_training(
    data: Path | list[Path],
    setting: Setting,
    config: SACConfig,
    out: Path,
    resume: bool = False,
    on_epoch: Callable[[EpochLog], None] | None = None,
    keep_epochs: bool = False,
    on_start: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Train (or resume) a run into ``out``; return the final ``run.json`` body.

    ``data``: one market, or several whose train days are pooled (:meth:`DaySet.pool`). The first is the run's
    home market: a residual run corrects the PID tuned on its train days, and ``run.json``'s ``market`` names it.
    ``keep_epochs``: also save every epoch's model in ``epochs/`` (:data:`EPOCHS_DIR`); a resumed run that did
    keeps doing so. ``on_start(epochs_done)``: called once every refusal has been made (before anything is written,
    the train days loaded or the controller tuned), so a caller draws its progress bar only for a run that will
    train."""
    paths = [data] if isinstance(data, Path) else list(data)
    markets = training_markets(paths)
    market = markets[0]
    fingerprint = pooled_fingerprint([m.split_fingerprint("train") for m in markets])  # what the policy is fitted to
    config.resolve(setting)  # the setting's defaults, before a resume compares them with the run's choices
    run_file = out / RUN_FILE
    history: list[dict[str, Any]] = []
    previous: dict[str, Any] = {}
    state = None
    if run_file.exists():
        if not resume:
            raise RunError(f"{out} already holds a run; pass --resume to continue it or choose another --out")
        previous = read_record(out)
        if previous.get("reselected_from"):
            raise RunError(
                f"{out} is a reselection of {previous['reselected_from']} (rcb reselect) and holds no checkpoint;"
                " resume that run, then reselect again"
            )
        if previous.get("data_fingerprint") != fingerprint or previous.get("setting") != str(setting):
            raise RunError(f"{out} was trained on other data or another setting; it cannot be resumed here")
        if previous["config"]["algo"] != config.algo:
            raise RunError(f"{out} trains {previous['config']['algo']}, not {config.algo}")
        state = torch.load(out / "checkpoint.pt", weights_only=False)
        history = previous.get("history", [])
        if len(state.get("history") or []) > len(history):  # cut short between checkpoint.pt and run.json
            history = migrate({"history": state["history"]}, out)["history"]
            previous["controller_validation_score"] = state.get("controller_validation_score")
        epochs_done = len(history)
        if config.epochs < epochs_done:
            raise RunError(
                f"{out} has trained {epochs_done} epochs; resume it with --epochs {epochs_done} or more, not"
                f" {config.epochs}"
            )
        # the record must not take a config the run was not trained with: its epochs so far used the recorded one
        changed = config_differences(previous["config"], config, setting, ignore=("controller", "epochs"))
        if changed and config.epochs == epochs_done:
            raise RunError(
                f"{out} is finished; resuming it trains nothing, yet its config differs ({'; '.join(changed)})"
            )
        if changed:
            raise RunError(
                f"{out} was trained with another config so far ({'; '.join(changed)}); resume it with the options it"
                " was started with (rcb train --resume keeps those not given)"
            )
        if config.residual:  # the reference controller the run started with
            config.controller = previous["config"]["controller"]
    elif resume:
        raise RunError(f"{out}: nothing to resume (no {RUN_FILE}); drop --resume to start a new run")
    start_epoch = len(history)
    # fine-tuning: the source is read and checked before anything is written (a resumed run has its own networks)
    init = initial_networks(Path(config.init_from), setting, config) if config.init_from and state is None else None
    if on_start:
        on_start(start_epoch)
    out.mkdir(parents=True, exist_ok=True)
    days = DaySet.load(market, "train", setting)
    if config.residual and config.controller is None:  # the home market's PID, tuned on its train days
        config.controller = reference_controller(market, setting, days)
    days = DaySet.pool([days, *(DaySet.load(other, "train", setting) for other in markets[1:])])
    # start_at_controller: the untrained policy (the controller) is the first candidate of model selection
    scores = run_scores({**previous, "history": history}) if state is not None else {}
    select_from = config.select_from
    assert select_from is not None  # resolve() filled it
    body: dict[str, Any] = {
        "format": FORMAT,
        "schema": SCHEMA,
        "market": str(paths[0]),
        **({"pooled_markets": [str(path) for path in paths]} if len(paths) > 1 else {}),
        "setting": str(setting),
        "config": config.to_dict(),
        "data_fingerprint": fingerprint,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "status": "training",
        "history": history,
    }
    if init is not None:  # what the run started from, as it was then (the source may be retrained later)
        body["initialized_from"] = init.source
    elif state is not None and previous.get("initialized_from"):
        body["initialized_from"] = previous["initialized_from"]
    if CONTROLLER_EPOCH in scores:
        body["controller_validation_score"] = scores[CONTROLLER_EPOCH]
    if state is not None and previous.get("keep_epochs"):  # a resumed run keeps its snapshots going
        keep_epochs = True
    if keep_epochs:
        body["keep_epochs"] = True

    def keep_best(epoch: int, score: float, model: dict[str, Any]) -> None:
        """best.pt: this epoch's model (:func:`model_of`) if the selection rule now keeps it; validation-best.pt
        likewise for the plain argmax under ``select_from``; the epoch's snapshot under ``keep_epochs``."""
        scores[epoch] = score
        if kept_epoch(scores, select_from) == epoch:
            _atomic_save(model, out / "best.pt")
        if select_from and kept_epoch(scores) == epoch:  # what select_from 0 keeps, so the two compare on one run
            _atomic_save(model, out / VALIDATION_BEST_FILE)
        if keep_epochs:
            (out / EPOCHS_DIR).mkdir(exist_ok=True)
            _atomic_save(model, out / EPOCHS_DIR / snapshot_name(epoch))

    def model_of(agent: SACAgent, epoch: int) -> dict[str, Any]:
        """The agent's actor and encoder at ``epoch`` as a model file (:func:`model_file`)."""
        encoder = agent.encoder.state_dict() if agent.encoder is not None else None
        return model_file(agent.actor.state_dict(), encoder, config.to_dict(), epoch)

    def controller_start(score: float, agent: SACAgent) -> None:
        """The untrained policy bids the controller: epoch -1 of model selection."""
        body["controller_validation_score"] = score  # run.json is first written after epoch 0's checkpoint
        keep_best(CONTROLLER_EPOCH, score, model_of(agent, CONTROLLER_EPOCH))

    def checkpoint(log: EpochLog, agent: SACAgent) -> None:
        """The epoch's record and models, in the order a crash can be recovered from: checkpoint.pt (which holds
        the record too), then run.json, then the model files, which a resume rewrites from the checkpoint's
        networks."""
        history.append(asdict(log))
        record = {"history": history, "controller_validation_score": body.get("controller_validation_score")}
        _atomic_save({**agent_state(agent, log.epoch + 1), **record}, out / "checkpoint.pt")
        scores[log.epoch] = log.validation_score
        body["kept_epoch"] = kept_epoch(scores, select_from)  # what best.pt holds once keep_best below has run
        _write_json(body, run_file)
        keep_best(log.epoch, log.validation_score, model_of(agent, log.epoch))
        write_curves(history, out, body.get("controller_validation_score"), start_of(body))
        if on_epoch:
            on_epoch(log)

    # A crash after the checkpoint may have cut the last epoch's model files and curves short: rewrite them from
    # the checkpoint, whose networks are that epoch's, stamped with the config it was trained with (idempotent).
    # Only a checkpoint that holds the record is known to hold that epoch's networks (an older one may be an epoch
    # ahead of run.json).
    if state is not None and history and "history" in state and state.get("next_epoch") == len(history):
        last_epoch = int(history[-1]["epoch"])
        healed = model_file(state["actor"], state["encoder"], previous["config"], last_epoch)
        keep_best(last_epoch, scores[last_epoch], healed)
        write_curves(history, out, body.get("controller_validation_score"), start_of(body))
    if config.epochs > start_epoch:
        train(
            config,
            days,
            on_epoch=checkpoint,
            start_epoch=start_epoch,
            state=state,
            on_start=controller_start,
            init=None if init is None else init.networks,
        )
    body["status"] = "done"
    body["train_seconds"] = sum(h.get("seconds", 0.0) for h in history)
    kept = kept_epoch(scores, select_from)
    body["best_validation_score"] = float("-inf") if kept is None else scores[kept]
    body["kept_epoch"] = kept
    _write_json(body, run_file)
    return body


def training_markets(paths: list[Path]) -> list[Market]:
    """The markets a run trains on, opened and checked: at least one, each with train days, no train days twice
    (a copy elsewhere is the same days twice). Raises :class:`RunError` or what opening a market raises."""
    if not paths:
        raise RunError("training needs at least one market")
    markets = [Market.open(path) for path in paths]
    seen: dict[str, Path] = {}
    for path, market in zip(paths, markets, strict=True):
        if not market.split("train"):
            raise RunError(f"{path} has no train days: a run learns from the train split")
        train_days = market.split_fingerprint("train")
        if train_days in seen:
            raise RunError(f"{seen[train_days]} and {path} hold the same train days: name each market once")
        seen[train_days] = path
    return markets


def reference_controller(market: Market, setting: Setting, days: DaySet | None = None) -> dict[str, Any]:
    """The controller a run is measured against and corrects: the PID tuned on ``market``'s train days (``rcb
    evaluate``'s tuning, cached beside the market) and those days' traffic profile, as :attr:`SACConfig.controller`
    and a model card hold them. ``days``: the train days if already loaded (else their logs are read, and the
    oracles solved only when the tuning is not cached). Raises what opening the market or tuning raises."""
    loaded: list[DaySet] = [] if days is None else [days]

    def train_days() -> DaySet:  # loaded at most once, and only when the tuning is not cached
        if not loaded:
            loaded.append(DaySet.load(market, "train", setting))
        return loaded[0]

    pid, _ = tuned_baseline(market, "pid", setting, train_days)
    logs = loaded[0].logs if loaded else [market.load(entry.day) for entry in market.split("train")]
    gains = ControllerGains.with_profile(None, pid.params()).tuned()
    return {**gains, "traffic_profile": [round(float(x), 8) for x in traffic_profile(logs)]}


def model_file(
    actor: dict[str, Any], encoder: dict[str, Any] | None, config: dict[str, Any], epoch: int
) -> dict[str, Any]:
    """What best.pt, validation-best.pt and every epoch snapshot hold: the actor's and encoder's weights, the config
    they were trained with (at the run's :data:`SCHEMA`) and their epoch (-1: the untrained controller)."""
    return {"actor": actor, "encoder": encoder, "config": config, "epoch": epoch, "schema": SCHEMA}


def agent_state(agent: SACAgent, next_epoch: int) -> dict[str, Any]:
    """A resumable checkpoint: :meth:`SACAgent.state_dict` and the epoch to resume at."""
    return {"next_epoch": next_epoch, **agent.state_dict()}


def write_curves(
    history: list[dict[str, Any]], out: Path, controller_score: float | None = None, start: str = "the controller"
) -> None:
    """``curves.csv`` and ``curves.png``: train and validation score per epoch, curriculum stages marked;
    ``controller_score``: the untrained policy's validation score, a dashed line labelled ``start`` (what that
    policy is: the controller, or a fine-tuned run's carried policy, :func:`start_of`)."""
    columns = list(dict.fromkeys(key for h in history for key in h))  # a resumed older run's first epochs lack some
    with (out / "curves.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(history)
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    epochs = [h["epoch"] for h in history]
    ax.plot(epochs, [h["train_score"] for h in history], "o-", label="train days")
    ax.plot(epochs, [h["validation_score"] for h in history], "s-", label="validation days")
    by_seed = [h.get("validation_scores") or [h["validation_score"]] for h in history]
    if any(len(scores) > 1 for scores in by_seed):  # --selection-seeds K: the spread the mean is taken over
        low, high = [min(scores) for scores in by_seed], [max(scores) for scores in by_seed]
        ax.fill_between(epochs, low, high, color="C1", alpha=0.2, lw=0, label="validation, seeds' range")
    if controller_score is not None:
        ax.axhline(controller_score, color="C1", ls="--", lw=1, label=f"{start.removeprefix('the ')}, validation days")
    for epoch, h in enumerate(history):
        if epoch == 0 or h["stage"] != history[epoch - 1]["stage"]:
            ax.axvline(h["epoch"] - 0.5, color="grey", lw=0.8, ls=":")
            ax.text(h["epoch"] - 0.4, 0.02, h["stage"], fontsize=7, rotation=90, va="bottom", color="grey")
    ax.set_xlabel("epoch")
    ax.set_ylabel("score = mean D/D* x 1[feasible]")
    ax.set_ylim(0, 1)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=110)


def run_body(run: Path, finished: bool = True) -> dict[str, Any]:
    """A run directory's migrated ``run.json`` body (:func:`~training.rl.run_schema.migrate`), refused where the run
    has no ``best.pt``. ``finished``: refuse a run still training or interrupted too (its best.pt is the best of the
    epochs so far, not the run's model: what export, evaluation and ensembles must not take for it)."""
    if not (run / RUN_FILE).exists() or not (run / "best.pt").exists():
        raise RunError(f"{run}: not a finished training run (no {RUN_FILE} or best.pt)")
    body = read_record(run)
    if finished and body.get("status") != "done":
        raise RunError(
            f"{run}: not a finished training run (status {body.get('status')!r}); finish it with rcb train --resume"
        )
    return body


def load_best(run: Path, finished: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run directory's ``best.pt`` (actor, encoder, config, epoch; on the CPU; its config migrated) and its
    ``run.json`` body (:func:`run_body`, ``finished`` as there)."""
    body = run_body(run, finished)
    try:
        saved = torch.load(run / "best.pt", weights_only=False, map_location="cpu")
    except (RuntimeError, EOFError, pickle.UnpicklingError) as exc:  # a truncated or foreign file
        raise RunError(f"{run}: cannot load its best actor from best.pt ({exc})") from None
    return migrate(saved, run / "best.pt"), body


def load_run_bidder(run: Path) -> tuple[PolicyBidder, dict[str, Any]]:
    """The best actor of a run directory, deterministic, behind the Bidder interface."""
    saved, body = load_best(run)
    return best_bidder(saved), body


def load_ensemble_bidder(
    runs: list[Path], loaded: list[tuple[dict[str, Any], dict[str, Any]]] | None = None
) -> tuple[PolicyBidder, list[dict[str, Any]]]:
    """The runs' best actors as one deterministic bidder (:mod:`training.rl.ensemble`) and their run bodies.

    The runs must share the setting and the train data (the same market's train split). ``loaded``: their
    :func:`load_best` answers, when the caller has read them already."""
    if not runs:
        raise RunError("an ensemble needs at least one run")
    loaded = loaded if loaded is not None else [load_best(Path(run)) for run in runs]
    members = [(best_bidder(saved), body) for saved, body in loaded]
    bodies = [body for _, body in members]
    for what in ("setting", "data_fingerprint"):
        if len({str(body.get(what)) for body in bodies}) != 1:
            raise RunError(f"the ensemble's runs differ in {what}: {', '.join(str(r) for r in runs)}")
    if len({repr(m.controller) for m, _ in members}) != 1:
        raise RunError(f"the ensemble's runs have different reference controllers: {', '.join(str(r) for r in runs)}")
    try:
        actor, encoder = ensemble_of([m.policy for m, _ in members], [m.encoder for m, _ in members])
    except ValueError as exc:
        raise RunError(f"{', '.join(str(r) for r in runs)}: {exc}") from None
    bidder = PolicyBidder(
        actor,  # type: ignore[arg-type]
        stochastic=False,
        encoder=encoder,  # type: ignore[arg-type]
        controller=members[0][0].controller,
    )
    return bidder, bodies


def best_bidder(saved: dict[str, Any]) -> PolicyBidder:
    """The deterministic bidder of a loaded ``best.pt`` (its config migrated, :func:`load_best`)."""
    config = migrate(saved, "the model")["config"]
    residual = bool(config["residual"])
    latent = config["latent_dim"] if saved["encoder"] is not None else 0
    policy = TanhGaussianPolicy(
        obs_dim(residual) + latent, config["hidden"], config["action_step"], config["start_ratio"], residual=residual
    )
    policy.load_state_dict(saved["actor"])
    encoder = None
    if saved["encoder"] is not None:
        encoder = PosteriorEncoder(transition_dim(residual), config["latent_dim"])
        encoder.load_state_dict(saved["encoder"])
        encoder.eval()
    policy.eval()
    return PolicyBidder(
        policy, stochastic=False, encoder=encoder, controller=reference_of(residual, config.get("controller"))
    )
