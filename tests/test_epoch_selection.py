"""The epoch-selection rule (training.rl.epoch_selection): which epoch best.pt holds, for training and rcb reselect."""

from __future__ import annotations

from training.rl.epoch_selection import CONTROLLER_EPOCH, kept_epoch, run_scores, snapshot_name


def test_best_is_the_validation_argmax_with_the_controller_a_candidate():
    scores = {CONTROLLER_EPOCH: 0.5, 0: 0.3, 1: 0.6, 2: 0.4}
    assert kept_epoch(scores) == 1
    assert kept_epoch({**scores, CONTROLLER_EPOCH: 0.9}) == CONTROLLER_EPOCH
    assert kept_epoch({}) is None


def test_ties_go_to_the_earlier_epoch():
    assert kept_epoch({0: 0.5, 1: 0.7, 2: 0.7, 3: 0.2}) == 1
    assert kept_epoch({CONTROLLER_EPOCH: 0.7, 0: 0.7}) == CONTROLLER_EPOCH


def test_select_from_leaves_out_the_early_epochs_and_the_controller():
    scores = {CONTROLLER_EPOCH: 0.9, 0: 0.8, 1: 0.85, 2: 0.3, 3: 0.4, 4: 0.35}
    assert kept_epoch(scores, 2) == 3
    assert kept_epoch(scores, 4) == 4
    assert kept_epoch(scores, 0) == CONTROLLER_EPOCH


def test_before_select_from_is_reached_the_best_so_far_is_kept():
    """A run stopped before its first eligible epoch still holds a model: the argmax so far, controller included;
    the first eligible epoch then replaces it whatever its score."""
    early = {CONTROLLER_EPOCH: 0.5, 0: 0.6, 1: 0.4}
    assert kept_epoch(early, 6) == 0
    assert kept_epoch({**early, 6: 0.1}, 6) == 6


def test_run_scores_reads_history_and_the_controller():
    body = {"history": [{"epoch": 0, "validation_score": 0.2}, {"epoch": 1, "validation_score": 0.3}]}
    assert run_scores(body) == {0: 0.2, 1: 0.3}
    assert run_scores({**body, "controller_validation_score": 0.25}) == {0: 0.2, 1: 0.3, CONTROLLER_EPOCH: 0.25}
    assert snapshot_name(7) == "epoch-007.pt" and snapshot_name(CONTROLLER_EPOCH) == "controller.pt"


def test_a_non_finite_score_is_never_preferred():
    assert kept_epoch({0: float("nan"), 1: 0.5, 2: 0.9}) == 2
    assert kept_epoch({0: 0.1, 1: float("nan")}) == 0
