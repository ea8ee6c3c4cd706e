"""`rcb evaluate`: run methods over a split for several seeds; episodes, summary, tables and plots.

A method is a baseline name (``rm``, ``pid``, ``cem``: tuned on the market's train days only, tuned
parameters cached beside the data), a reference row (``oracle-day``, ``oracle-slot``: hindsight,
for scale only), a training run directory, or an exported model ``onnx:MODEL_DIR`` (``rcb export``).
Every bidder runs through :func:`training.bidders.base.play`, so every number comes from the same
harness. Seeds ``0..N-1`` seed the bidders' own randomness (CEM's exploration; CBRL's posterior
samples); deterministic methods give the same episodes for every seed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import glob
import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd

from model.artifact import ArtifactError, ModelCard, fine_tuning_sources, read_card
from model.contract import Setting
from model.controller import ControllerGains
from model.shield import ShieldConfig
from training.bidders import cem, pid, planner, rm
from training.bidders.base import Bidder
from training.bidders.onnx import OnnxBidder
from training.bidders.shielded import ShieldedBidder
from training.evaluation.curves import CurveError, split_group
from training.evaluation.report import per_seed_metrics
from training.files import atomic_write_text
from training.market.dataset import Market, MarketError
from training.replay.dayset import VALIDATION, DaySet, split_validation
from training.replay.metrics import DEFAULT_GAMMA, is_feasible, normalized_delivery, roi
from training.replay.oracle import ORACLE_GRID, OracleKind, market_oracle
from training.replay.oracle.cache import SEMANTICS_VERSION as ORACLE_SEMANTICS

BASELINES: dict[str, ModuleType] = {"rm": rm, "pid": pid, "cem": cem, "plan": planner}
"""Tunable baselines: each module has ``tune(train, seed, progress)`` and ``from_params(params, train)`` (``train``
for a baseline that keeps more than its parameters: the planner's scenarios are the train days). Optional: a
``TUNER_VERSION`` (part of the tuning-cache key) and ``without_own_days(bidder, train_rows)`` (a baseline that
carries the train days themselves plays train and validation days leave-one-out: each without its own)."""
REFERENCES: dict[str, OracleKind] = {"oracle-day": OracleKind.DAY, "oracle-slot": OracleKind.SLOT}
"""Hindsight reference rows (not bidders: they see the whole day)."""
TUNING_SEED = 0
"""Baselines are tuned once, with this seed, whatever the evaluation seeds."""
TUNING_VERSION = "1"
"""Bump when a tuner changes, so cached tuned parameters are recomputed."""
TUNING_CACHE = Path(".rcb-cache/tuning")
ONNX_PREFIX = "onnx:"
"""``onnx:MODEL_DIR`` names an exported model as a method."""
SHIELD_PREFIX = "shield:"
"""``shield:METHOD`` plays METHOD behind the safety shield (:mod:`model.shield`), as the service can."""
ENSEMBLE_PREFIX = "ensemble:"
"""``ensemble:LABEL=GLOB`` plays a group's runs as one bidder (:mod:`training.rl.ensemble`), once per seed."""

Progress = Callable[[str], None]


class EvaluationError(ValueError):
    """A request `rcb evaluate` cannot serve (unknown method, empty split, ...)."""


def known_methods() -> list[str]:
    return [*BASELINES, *REFERENCES]


def is_run_dir(method: str) -> bool:
    """A training run directory (``rcb train --out RUN``) is a method too."""
    return (Path(method) / "run.json").is_file()


def is_model_method(method: str) -> bool:
    """``onnx:MODEL_DIR``: an exported model artifact (validated in full when it is loaded)."""
    return method.startswith(ONNX_PREFIX) and (Path(method[len(ONNX_PREFIX) :]) / "model.json").is_file()


def runs_matching(pattern: str) -> list[Path]:
    """The training run directories a glob matches, sorted: the members of ``LABEL=GLOB`` here and of ``rcb export
    --run 'GLOB'``, so both read one pattern as the same runs in the same order."""
    return [p for p in sorted(Path(p) for p in glob.glob(pattern)) if is_run_dir(str(p))]


def run_group(method: str) -> tuple[str, list[Path]] | None:
    """``LABEL=GLOB``: the training runs of one method, one per seed (``cbrl=runs/sc/cbrl-s*``), or None.

    Run ``k`` of the sorted match plays with evaluation seed ``k``, and its episodes are the method's
    seed ``k``: the table's spread over seeds is then the spread over training seeds.
    """
    try:
        group = split_group(method)
    except CurveError as exc:
        raise EvaluationError(str(exc)) from None
    if group is None:
        return None
    label, pattern = group
    runs = runs_matching(pattern)
    if not runs:
        raise EvaluationError(f"{method!r}: {pattern} matches no training run directory (with a run.json)")
    return label, runs


def unshielded(method: str) -> tuple[str, bool]:
    """``(METHOD, True)`` for ``shield:METHOD``, else ``(method, False)``."""
    if method.startswith(SHIELD_PREFIX):
        return method[len(SHIELD_PREFIX) :], True
    return method, False


def method_label(method: str) -> str:
    """The name a method's rows carry: a run group's label (``shield:`` kept), else the method as written."""
    inner, shielded = unshielded(method)
    try:
        group = split_group(inner)  # the label only: no glob (run_group checked the runs when the list was parsed)
    except CurveError as exc:
        raise EvaluationError(str(exc)) from None
    if group is None:
        return method
    return SHIELD_PREFIX + group[0] if shielded else group[0]


def parse_methods(text: str) -> list[str]:
    listed = [m.strip() for m in text.split(",") if m.strip()]
    if not listed:
        raise EvaluationError("no methods given")
    references = [m for m in listed if m.startswith(SHIELD_PREFIX) and unshielded(m)[0] in REFERENCES]
    if references:
        raise EvaluationError(f"{', '.join(references)}: the hindsight references are not bidders; nothing to shield")
    methods = [unshielded(m)[0] for m in listed]
    groups = [m for m in methods if run_group(m) is not None]
    missing_models = [m for m in methods if m.startswith(ONNX_PREFIX) and not is_model_method(m)]
    if missing_models:
        raise EvaluationError(
            f"{', '.join(missing_models)}: no model.json there; {ONNX_PREFIX}MODEL_DIR names a directory written by"
            " rcb export"
        )
    unknown = [
        m for m in methods if m not in BASELINES and m not in REFERENCES and not is_run_dir(m) and m not in groups
    ]
    unknown = [m for m in unknown if not is_model_method(m)]
    if unknown:
        raise EvaluationError(
            f"unknown method(s) {', '.join(unknown)}; known: {', '.join(known_methods())}, a training run directory"
            f", {ONNX_PREFIX}MODEL_DIR (a directory written by rcb export), LABEL=GLOB (training runs, one per seed)"
            f" or {ENSEMBLE_PREFIX}LABEL=GLOB (those runs as one bidder)"
        )
    if len({method_label(m) for m in listed}) != len(listed):
        raise EvaluationError(f"a method is listed twice in {text!r}")
    return listed


def method_warnings(listed: list[str]) -> list[str]:
    """What a parsed method list probably does not mean, to print before the work (nothing is refused).

    ``shield:LABEL=GLOB`` shields the *runs* labelled LABEL, one bidder per seed. Listed beside
    ``ensemble:LABEL=...``, it reads as the shielded ensemble, which is ``shield:ensemble:LABEL=GLOB``.
    """
    ensembles = set()
    for method in listed:
        group = split_group(unshielded(method)[0])
        if group is not None and group[0].startswith(ENSEMBLE_PREFIX):
            ensembles.add(group[0][len(ENSEMBLE_PREFIX) :])
    warnings = []
    for method in listed:
        inner, shielded = unshielded(method)
        group = split_group(inner)
        if shielded and group is not None and group[0] in ensembles:
            label, pattern = group
            warnings.append(
                f"{method!r} plays the runs labelled {label!r} one by one behind the shield, not the ensemble"
                f" {ENSEMBLE_PREFIX}{label}; for the shielded ensemble write"
                f" {SHIELD_PREFIX}{ENSEMBLE_PREFIX}{label}={pattern}"
            )
    return warnings


def calibration_warnings(listed: list[str], market: Market, split: str) -> list[str]:
    """Models whose card's bid scale was chosen on the days about to be scored (``rcb calibrate`` reads a market's
    train days): their figures there are in-sample, to print before the work (nothing is refused)."""
    if split not in ("train", "validation"):
        return []
    warnings = []
    for method in listed:
        card = exported_card(method)
        scale = card.bid_scale if card is not None else None
        if scale is not None and scale.data_fingerprint == market.split_fingerprint("train"):
            warnings.append(
                f"{method!r}: its bid scale {scale.scale:g} was chosen on this market's train days, so its figures on"
                f" --split {split} are in-sample; score it on test or OOD days"
            )
    return warnings


def exported_card(method: str) -> ModelCard | None:
    """The card of an exported model's method (``onnx:MODEL_DIR``, shielded or not), or None: another kind of method,
    or a card that cannot be read (it fails where the model is loaded, with its own message)."""
    method = unshielded(method)[0]
    if not method.startswith(ONNX_PREFIX):
        return None
    try:
        return read_card(Path(method[len(ONNX_PREFIX) :]))
    except ArtifactError:
        return None


def _tuning_key(market: Market, method: str, setting: Setting) -> str:
    fields = {
        "method": method,
        "setting": str(setting),
        "version": TUNING_VERSION,
        "seed": TUNING_SEED,
        "train_days": market.split_fingerprint("train"),
        # a tuning's score is D / D* on the train days: an oracle whose answers change changes what was best
        "oracle": hashlib.sha256(f"{ORACLE_SEMANTICS} {ORACLE_GRID.tolist()}".encode()).hexdigest(),
    }
    # a baseline module may version its own tuner (the planner's likelihood changed in session 23)
    if (tuner := getattr(BASELINES.get(method), "TUNER_VERSION", None)) is not None:
        fields["tuner"] = tuner
    payload = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _read_tuning(path: Path) -> dict[str, Any] | None:
    """A cached tuning record, or None where there is none or it cannot be read (then the baseline is tuned again)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def tuned_baseline(
    market: Market, method: str, setting: Setting, train: Callable[[], DaySet], progress: Progress | None = None
) -> tuple[Bidder, dict[str, Any]]:
    """The baseline tuned on the train days (from the cache when the train data are unchanged)."""
    module = BASELINES[method]
    key = _tuning_key(market, method, setting)
    path = market.root / TUNING_CACHE / f"{method}-{setting}.json"
    cached = _read_tuning(path)
    if cached is not None and cached.get("key") == key and isinstance(cached.get("params"), dict):
        try:
            # a market that fails to load here (the planner rebuilds its scenarios) is an error, not a retune
            return module.from_params(cached["params"], train), cached
        except (KeyError, TypeError):
            pass  # parameters missing or of the wrong type: tune again
    bidder, score = module.tune(train(), seed=TUNING_SEED, progress=progress)
    record = {"key": key, "method": method, "setting": str(setting), "train_score": score, "params": bidder.params()}
    with contextlib.suppress(OSError):  # read-only market: tuned again next time
        atomic_write_text(path, json.dumps(record, indent=1))
    return bidder, record


@dataclass
class Evaluation:
    episodes: pd.DataFrame
    summary: dict[str, dict[str, Any]]
    meta: dict[str, Any]


def episode_rows(method: str, seed: int, days: DaySet, delivery: np.ndarray, cost: np.ndarray) -> pd.DataFrame:
    feasible = is_feasible(delivery, cost, days.roi_target, days.budget)
    return pd.DataFrame(
        {
            "method": method,
            "seed": seed,
            "day": days.days,
            "delivery": delivery,
            "cost": cost,
            "roi": roi(delivery, cost),
            "feasible": feasible,
            "oracle_delivery": days.oracle_delivery,
            "roi_target": days.roi_target,
            "budget": days.budget,
            "score": normalized_delivery(delivery, days.oracle_delivery) * feasible,
        }
    )


def summarize(episodes: pd.DataFrame, methods: list[str], gamma: float = DEFAULT_GAMMA) -> dict[str, dict[str, Any]]:
    """Per method: median and mean over seeds of each seed's ANS; CSR, ANDR, G-metric over seeds (SPEC 6).

    Built on :func:`per_seed_metrics`, the same numbers the boxplots draw. ``gamma`` is the G-metric's
    (the value validated for USCB in the setting, where known).

    Days whose hindsight oracle delivers nothing (``D* = 0``: no bidder can reach L there, which the
    ``prior`` constraint recipe allows) are scored by the rule of :func:`training.replay.metrics.normalized_delivery`
    (1 if the episode stayed feasible, else 0) and reported apart: ``n_zero_oracle`` counts the method's
    episodes on them, ``csr_zero_oracle`` is its feasible share there (``nan`` if none) and
    ``ans_reachable_median`` its median ANS over the other days alone. ``n_above_oracle`` counts the method's
    feasible episodes that delivered more than a positive ``D*`` (the slot-wise oracle is the paper's reference,
    not a strict bound: docs/metrics.md), so a D/D* above 1 is never hidden in a mean.
    """
    table = per_seed_metrics(episodes, gamma)
    reachable = per_seed_metrics(episodes[episodes["oracle_delivery"] > 0], gamma)
    zero = episodes[episodes["oracle_delivery"] <= 0]
    above = episodes[
        (episodes["oracle_delivery"] > 0) & episodes["feasible"] & (episodes["delivery"] > episodes["oracle_delivery"])
    ]

    def over_seeds(values: pd.Series, how: str) -> float:
        values = values.dropna()
        return float(getattr(values, how)()) if len(values) else float("nan")

    summary: dict[str, dict[str, Any]] = {}
    for method in methods:
        rows = table[table["method"] == method]
        summary[method] = {
            "ans_median": over_seeds(rows["ans"], "median"),
            "ans_mean": over_seeds(rows["ans"], "mean"),
            "csr": over_seeds(rows["csr"], "mean"),
            "csr_median": over_seeds(rows["csr"], "median"),
            "andr": over_seeds(rows["andr"], "mean"),
            "andr_median": over_seeds(rows["andr"], "median"),
            "gmetric": over_seeds(rows["gmetric"], "mean"),
            "n_episodes": int(rows["n_episodes"].sum()),
            "n_seeds": len(rows),
            "n_zero_oracle": int((zero["method"] == method).sum()),
            "csr_zero_oracle": float(zero.loc[zero["method"] == method, "feasible"].mean())
            if (zero["method"] == method).any()
            else float("nan"),
            "ans_reachable_median": over_seeds(reachable.loc[reachable["method"] == method, "ans"], "median"),
            "n_above_oracle": int((above["method"] == method).sum()),
            "gmetric_gamma": gamma,
        }
    return summary


def split_days(
    market: Market, split: str, setting: Setting, progress: Progress | None = None
) -> tuple[DaySet, Callable[[], DaySet]]:
    """The days of ``split`` (``validation``: the train days training held out for model selection) and a loader
    of the train days that reads them once, when first asked (baselines and the shield's PID are tuned there)."""
    if split not in ("test", "ood", "train", VALIDATION):
        raise EvaluationError(f"unknown split {split!r}; expected test, ood or validation (or train)")
    if not market.split("train" if split == VALIDATION else split):
        raise EvaluationError(f"{market.root}: split {split!r} has no days")
    train_cache: list[DaySet] = []
    if split == VALIDATION:
        train_cache.append(DaySet.load(market, "train", setting, progress=progress))
        days = train_cache[0].subset(split_validation(train_cache[0])[1])
    else:
        days = DaySet.load(market, split, setting, progress=progress)

    def train() -> DaySet:
        if not train_cache:
            train_cache.append(days if split == "train" else DaySet.load(market, "train", setting, progress=progress))
        return train_cache[0]

    return days, train


def evaluate(
    market: Market,
    setting: Setting | str,
    split: str,
    methods: list[str],
    seeds: int,
    progress: Progress | None = None,
    gamma: float = DEFAULT_GAMMA,
) -> Evaluation:
    """Run every method over ``split`` for ``seeds`` seeds; return episodes, summary and metadata.

    A deterministic bidder (RM, PID, a non-Bayesian policy; :attr:`Bidder.deterministic`) and the
    hindsight references play once: their seeds would be identical copies. ``gamma``: the G-metric's.
    """
    setting = Setting(setting)
    if seeds < 1:
        raise EvaluationError("seeds must be >= 1")
    if any(m in BASELINES for m in methods) and not market.split("train"):
        raise EvaluationError(f"{market.root}: baselines are tuned on the train split, which has no days")
    check_split(methods, market, split)
    days, train = split_days(market, split, setting, progress)
    market_gains: list[ControllerGains] = []

    def market_pid() -> ControllerGains:  # read at most once per evaluation
        if not market_gains:
            market_gains.append(market_shield_gains(market, setting, train, progress))
        return market_gains[0]

    def shielded_by(inner: Bidder) -> ShieldedBidder:
        """``inner`` behind the band :func:`shield_config` gives it, centred on the controller :func:`shield_gains`
        gives it: a model's card controller or a residual run's own reference (as the service would serve them),
        else the market's PID."""
        return ShieldedBidder(
            inner, shield_gains(inner, market, setting, train, progress, market_pid), shield_config(inner)
        )

    frames: list[pd.DataFrame] = []
    tuned: dict[str, dict[str, Any]] = {}
    for listed in methods:
        method, shielded = unshielded(listed)
        group = run_group(method)
        if group is not None and not method.startswith(ENSEMBLE_PREFIX):
            label, runs = group
            wrap = shielded_by if shielded else None
            label = SHIELD_PREFIX + label if shielded else label
            frames.extend(_play_run_group(label, runs, setting, days, tuned, progress, wrap))
            continue
        if method in REFERENCES:
            answers = market_oracle(market, setting, kind=REFERENCES[method], days=days.days)
            delivery = np.array([a.delivery for a in answers])
            cost = np.array([a.cost for a in answers])
            frames.append(episode_rows(method, 0, days, delivery, cost))
            if progress:
                progress("episodes")
            continue
        bidder, record = method_bidder(method, market, setting, train, progress)
        row_label = method_label(listed)  # the method as written, or an ensemble's group label
        bidder, left_out = own_days_left_out(bidder, method, split, days, train)
        if left_out:
            record["left_out"] = "each day played without its own scenario"
        if shielded:
            bidder = shielded_by(bidder)
        # its own copy: METHOD and shield:METHOD listed together each keep their record
        tuned[row_label] = dict(record)
        for seed in range(1 if bidder.deterministic else seeds):
            outcome = days.play(bidder, seed)
            frames.append(episode_rows(row_label, seed, days, outcome.delivery, outcome.cost))
            if isinstance(bidder, ShieldedBidder):
                tuned[row_label]["shield_acted_share"] = round(bidder.acted_share, 4)
                tuned[row_label]["shield"] = asdict(bidder.config)  # the band played (a card's may be its own)
            if progress:
                progress("episodes")
    episodes = pd.concat(frames, ignore_index=True)
    meta = {
        "market": str(market.root),
        "split": split,
        "setting": str(setting),
        "seeds": seeds,
        "methods": [method_label(m) for m in methods],
        "tuned": tuned,
        "gmetric_gamma": gamma,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    summary = summarize(episodes, [method_label(m) for m in methods], gamma)
    return Evaluation(episodes=episodes, summary=summary, meta=meta)


def check_not_in_sample(method: str, market: Market, split: str) -> None:
    """An exported planner (``rcb export --plan``) of this market holds its train days as scenarios: scored on train
    or validation days it would find each day among them. (The ``plan`` baseline plays them leave-one-out.) So does
    the reference of a run trained with ``--reference plan`` (its training planned each of them leave-one-out)."""
    for run_dir, body in run_records(method):
        try:
            controller = body["config"].get("controller") or {}
        except (KeyError, TypeError):
            continue  # an unreadable run fails where it is loaded, with its own message
        if controller.get("kind") == "plan" and controller.get("fingerprint") == market.split_fingerprint("train"):
            raise EvaluationError(
                f"{method} on --split {split}: {run_dir} corrects a planner whose scenarios are this market's train"
                " days (score it on test or OOD days, or compare the runs' best_validation_score)"
            )
    card = exported_card(method)
    if card is not None and card.is_planner and card.training.data_fingerprint == market.split_fingerprint("train"):
        raise EvaluationError(
            f"{method} on --split {split}: a planner exported from this market's train days holds each of them as a"
            " scenario (score it on test or OOD days; the plan baseline plays these days leave-one-out)"
        )


def validation_folds_of(method: str) -> list[tuple[str, int]]:
    """The validation fold each run behind ``method`` held out (``rcb train --validation-fold``): a run directory,
    a run group (``LABEL=GLOB``, ``ensemble:``, ``shield:``) or an exported model (its card's members)."""
    method = unshielded(method)[0]
    if method.startswith(ONNX_PREFIX):
        card = exported_card(method)
        if card is None:
            return []
        config = card.training.config
        folds = config.get("member_validation_folds") or [config.get("validation_fold", 0)]
        return [(method, int(fold)) for fold in folds]
    out = []
    for run_dir, body in run_records(method):
        try:
            out.append((str(run_dir), int(body["config"].get("validation_fold", 0))))
        except (KeyError, TypeError, ValueError):
            continue  # an unreadable run fails where it is loaded, with its own message
    return out


def check_sources_validation_fold(methods: list[str], market: Market) -> None:
    """A fine-tuned model (``rcb train --init-from``) learned its source's train days too: refuse ``--split
    validation`` on the source's market when the source held out another fold than 0, the days it read."""
    train_days = market.split_fingerprint("train")
    for listed in methods:
        for where, initialized_from in _initialized_from(listed):
            for source in fine_tuning_sources(initialized_from):
                fold = int(source.get("validation_fold", 0))
                if source["data_fingerprint"] == train_days and fold != 0:
                    raise EvaluationError(
                        f"{where} was fine-tuned from {source.get('run')}, which held out validation fold {fold} of"
                        " this market: --split validation reads fold 0, days that source trained on (score it on"
                        " test or OOD days)"
                    )


def _initialized_from(method: str) -> list[tuple[str, Any]]:
    """Each run's (or the exported model's) recorded fine-tuning source behind ``method``."""
    card = exported_card(method)
    if card is not None:
        return [(unshielded(method)[0], card.training.initialized_from)]
    return [(str(run_dir), body.get("initialized_from")) for run_dir, body in run_records(method)]


def run_records(method: str) -> list[tuple[Path, dict[str, Any]]]:
    """Each training run behind ``method`` (:func:`runs_behind`) with its run.json body; a run whose record cannot be
    read or is not an object is left out (it fails where it is loaded, with its own message)."""
    out = []
    for run_dir in runs_behind(method):
        try:
            body = json.loads((run_dir / "run.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(body, dict):
            out.append((run_dir, body))
    return out


def runs_behind(method: str) -> list[Path]:
    """The training run directories a method plays: a run directory or a run group (``LABEL=GLOB``, ``ensemble:``,
    ``shield:``); none for a baseline or an exported model."""
    method = unshielded(method)[0]
    group = run_group(method)
    return group[1] if group is not None else [Path(method)] if is_run_dir(method) else []


def own_days_left_out(
    bidder: Bidder, method: str, split: str, days: DaySet, train: Callable[[], DaySet]
) -> tuple[Bidder, bool]:
    """``bidder`` for ``days`` of ``split``: a baseline that holds the train days (the planner's scenarios) plays
    train and validation days each without its own (leave-one-out, as it is tuned); and whether it left days out."""
    leave_out = getattr(BASELINES.get(method), "without_own_days", None)
    if leave_out is None or split not in ("train", VALIDATION):
        return bidder, False
    rows = np.arange(len(days)) if split == "train" else split_validation(train())[1]
    return leave_out(bidder, np.asarray(rows)[days.episode_days()]), True


def check_split(methods: list[str], market: Market, split: str) -> None:
    """Refuse methods whose score on ``split`` would be in-sample: a run that held out another validation fold
    (:func:`check_validation_fold`), or one that holds ``market``'s train days (:func:`check_not_in_sample`)."""
    if split == VALIDATION:
        check_validation_fold(methods)
        check_sources_validation_fold(methods, market)
    if split in ("train", VALIDATION):
        for listed in methods:
            check_not_in_sample(unshielded(listed)[0], market, split)


def check_validation_fold(methods: list[str]) -> None:
    """``--split validation`` reads fold 0 of the train days: refuse a run (or an exported model with a member) that
    held out another fold, for which those days are training days and the score would be in-sample."""
    for listed in methods:
        for source, fold in validation_folds_of(listed):
            if fold != 0:
                raise EvaluationError(
                    f"{source} held out validation fold {fold}; --split validation reads fold 0, days that run"
                    " trained on (score it on test or OOD days, or compare the runs' best_validation_score)"
                )


def _play_run_group(
    label: str,
    runs: list[Path],
    setting: Setting,
    days: DaySet,
    tuned: dict[str, Any],
    progress: Progress | None,
    wrap: Callable[[Bidder], Bidder] | None = None,
) -> list[pd.DataFrame]:
    """Each run of a group plays the split once, run ``k`` with seed ``k``; its rows are seed ``k``."""
    frames: list[pd.DataFrame] = []
    record: dict[str, Any] = {"runs": [], "best_validation_score": [], "kept_epoch": []}
    for seed, run_dir in enumerate(runs):
        bidder, run = run_bidder(run_dir, setting)
        if wrap is not None:
            bidder = wrap(bidder)
        if record.get("algo", run["algo"]) != run["algo"]:  # one method's rows are one algorithm's seeds
            raise EvaluationError(
                f"{label}: its runs train different algorithms ({runs[0]}: {record['algo']}, {run_dir}:"
                f" {run['algo']}); give each its own label"
            )
        record["algo"] = run["algo"]
        record["runs"].append(str(run_dir))
        record["best_validation_score"].append(run["best_validation_score"])
        record["kept_epoch"].append(run.get("kept_epoch"))
        outcome = days.play(bidder, seed)
        frames.append(episode_rows(label, seed, days, outcome.delivery, outcome.cost))
        if isinstance(bidder, ShieldedBidder):
            record.setdefault("shield_acted_share", []).append(round(bidder.acted_share, 4))
        if progress:
            progress("episodes")
    tuned[label] = record
    return frames


def shield_gains(
    inner: Bidder,
    market: Market,
    setting: Setting,
    train: Callable[[], DaySet],
    progress: Progress | None = None,
    market_pid: Callable[[], ControllerGains] | None = None,
) -> ControllerGains:
    """The controller behind ``inner``'s shield, as the service would run it: an exported model's card (gains,
    traffic profile); a residual run's (or ensemble's) own reference, the controller it was trained around and its
    export writes on the card, whichever market it plays; else (a baseline, a non-residual run) the PID tuned on
    this market's train days, which is what a non-residual run's export writes where it plays its own market (on
    another market it is that market's PID, not the one its card would carry). ``market_pid``: that PID, where the
    caller keeps it (tuned once per evaluation)."""
    if isinstance(inner, OnnxBidder):
        return inner.artifact.controller_gains()
    if isinstance(own := getattr(inner, "controller", None), ControllerGains):
        return own
    return market_pid() if market_pid is not None else market_shield_gains(market, setting, train, progress)


def market_shield_gains(
    market: Market, setting: Setting, train: Callable[[], DaySet], progress: Progress | None = None
) -> ControllerGains:
    """The PID tuned on ``market``'s train days, as a shield's controller (gains and the train days' profile)."""
    params = tuned_baseline(market, "pid", setting, train, progress)[0].params()
    return ControllerGains.with_profile(params["traffic_profile"], params)


def shield_config(inner: Bidder) -> ShieldConfig:
    """The band around ``inner``, as the service would run it: an exported model's card (its ``shield`` section); a
    run (or ensemble) trained behind the shield, the band it trained behind (its export writes it on the card); else
    the defaults."""
    if isinstance(inner, OnnxBidder):
        return inner.artifact.shield_config()
    trained_behind = getattr(inner, "shield_band", None)
    return trained_behind if isinstance(trained_behind, ShieldConfig) else ShieldConfig()


def method_bidder(
    method: str, market: Market, setting: Setting, train: Callable[[], DaySet], progress: Progress | None = None
) -> tuple[Bidder, dict[str, Any]]:
    """The one bidder an unshielded ``method`` names and what an evaluation records of it: a baseline tuned on the
    train days, ``onnx:MODEL_DIR``, ``ensemble:LABEL=GLOB`` or a training run directory (a reference row or a run
    group is not one bidder)."""
    if method.startswith(ENSEMBLE_PREFIX) and (group := run_group(method)) is not None:
        return ensemble_bidder(group[1], setting)
    if method in BASELINES:
        bidder, record = tuned_baseline(market, method, setting, train, progress)
        return bidder, {"train_score": record["train_score"], **record["params"]}
    if method.startswith(ONNX_PREFIX):
        return model_bidder(method, setting)
    if not is_run_dir(method):
        raise EvaluationError(
            f"{method!r}: expected a baseline, {ONNX_PREFIX}MODEL_DIR, {ENSEMBLE_PREFIX}LABEL=GLOB or a training run"
            " directory"
        )
    return run_bidder(Path(method), setting)


def run_bidder(run_dir: Path, setting: Setting) -> tuple[Bidder, dict[str, Any]]:
    """A training run's best actor (torch, imported only here), checked against the evaluation's setting."""
    from training.rl.runs import load_run_bidder

    bidder, run = load_run_bidder(run_dir)
    if run["setting"] != str(setting):
        raise EvaluationError(f"{run_dir} was trained for {run['setting']}, not {setting}")
    return bidder, {
        "algo": run["config"]["algo"],
        "best_validation_score": run.get("best_validation_score"),
        "kept_epoch": run.get("kept_epoch"),
    }


def ensemble_bidder(runs: list[Path], setting: Setting) -> tuple[Bidder, dict[str, Any]]:
    """A group's runs as one bidder (torch; what ``rcb export --run A --run B ...`` writes as one model)."""
    from training.rl.runs import RunError, load_ensemble_bidder

    try:
        bidder, bodies = load_ensemble_bidder(runs)
    except RunError as exc:
        raise EvaluationError(str(exc)) from None
    if bodies[0]["setting"] != str(setting):
        raise EvaluationError(f"{runs[0]} was trained for {bodies[0]['setting']}, not {setting}")
    return bidder, {
        "algo": bodies[0]["config"]["algo"],
        "runs": [str(r) for r in runs],
        "best_validation_score": [b.get("best_validation_score") for b in bodies],
        "kept_epoch": [b.get("kept_epoch") for b in bodies],
    }


def model_bidder(method: str, setting: Setting) -> tuple[Bidder, dict[str, Any]]:
    """``onnx:MODEL_DIR`` loaded (onnxruntime, no torch) and checked against the evaluation's setting."""
    from model.artifact import ArtifactError

    try:
        bidder = OnnxBidder.load(method[len(ONNX_PREFIX) :])
    except ArtifactError as exc:
        raise EvaluationError(f"{method}: {exc}") from None
    card = bidder.artifact.card
    if card.setting != setting:
        raise EvaluationError(f"{method} was trained for {card.setting}, not {setting}")
    record = {
        "algo": card.algorithm,
        "best_validation_score": card.evaluation.best_validation_score,
        "source_run": card.source_run,
        "format_version": card.format_version,
    }
    return bidder, record


def write_outputs(evaluation: Evaluation, out: Path, plots: bool = True) -> dict[str, Path]:
    """episodes.csv, summary.json (SPEC 6: ``{method: {...}}``), meta.json, summary.md and PNG plots in ``out``
    (``plots=False``: no PNGs, and no matplotlib needed)."""
    from training.evaluation.report import write_report  # matplotlib only when writing

    out.mkdir(parents=True, exist_ok=True)
    paths = {"episodes": out / "episodes.csv", "summary": out / "summary.json", "meta": out / "meta.json"}
    evaluation.episodes.to_csv(paths["episodes"], index=False)
    paths["summary"].write_text(json.dumps(_jsonable(evaluation.summary), indent=1))
    paths["meta"].write_text(json.dumps(_jsonable(evaluation.meta), indent=1))
    paths.update(write_report(evaluation.episodes, evaluation.summary, evaluation.meta, out, plots=plots))
    return paths


def _jsonable(obj: Any) -> Any:
    """NaN and inf are not JSON: write them as null."""
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float | np.floating) and not np.isfinite(obj):
        return None
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


__all__ = ["Evaluation", "EvaluationError", "MarketError", "evaluate", "parse_methods", "write_outputs"]
