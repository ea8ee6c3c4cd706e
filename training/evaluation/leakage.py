"""What would make a method's score on a split in-sample, and what ``rcb evaluate`` does about it.

Refused before any work (:func:`check_split`): on ``--split validation`` (fold 0 of the train days) a run, or an
exported model's member, that held out another fold, for which those days are training days; a model fine-tuned
from a source that did so; on train or validation days a planner exported from this market's train days, which holds
each of them as a scenario. Warned about (:func:`calibration_warnings`): a model whose card's bid scale was chosen
on the days about to be scored. Played leave-one-out (:func:`own_days_left_out`): a baseline that carries the train
days themselves (the planner's scenarios) plays each train or validation day without its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from model.artifact import fine_tuning_sources
from training.bidders.base import Bidder
from training.bidders.tuned import BASELINES
from training.evaluation.methods import (
    ONNX_PREFIX,
    EvaluationError,
    exported_card,
    run_records,
    unshielded,
)
from training.market.dataset import Market
from training.replay.dayset import VALIDATION, DaySet, split_validation


def check_split(methods: list[str], market: Market, split: str) -> None:
    """Refuse methods whose score on ``split`` would be in-sample: a run that held out another validation fold
    (:func:`check_validation_fold`, :func:`check_sources_validation_fold`), or an exported planner that holds
    ``market``'s train days (:func:`check_not_in_sample`)."""
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


def check_not_in_sample(method: str, market: Market, split: str) -> None:
    """An exported planner (``rcb export --plan``) of this market holds its train days as scenarios: scored on train
    or validation days it would find each day among them. (The ``plan`` baseline plays them leave-one-out.)"""
    card = exported_card(method)
    if card is not None and card.is_planner and card.training.data_fingerprint == market.split_fingerprint("train"):
        raise EvaluationError(
            f"{method} on --split {split}: a planner exported from this market's train days holds each of them as a"
            " scenario (score it on test or OOD days; the plan baseline plays these days leave-one-out)"
        )


def calibration_warnings(listed: list[str], market: Market, split: str) -> list[str]:
    """Models whose card's bid scale was chosen on the days about to be scored (``rcb calibrate`` reads a market's
    train days): their figures there are in-sample, to print before the work (nothing is refused)."""
    if split not in ("train", VALIDATION):
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
