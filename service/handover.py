"""The live hand-over in the service: a campaign whose model is failing it goes to its controller for the day.

After the runner decides a batch (:meth:`service.runner.ModelRunner.decide`), :func:`hand_over` plays the rule of
:mod:`model.handover` on each campaign: one already handed over in this episode (its stored
:attr:`model.state.CampaignState.handover_slot`) and one the rule hands over now bid the controller's ratio (the
card's ``safety_controller``, else the PID the fallback runs: :attr:`ModelRunner.fallback`), answered as
``decided_by: handover``. The flag lives in the stored state, so every replica and a restart agree, and a new
episode's registration starts without it.

The hand-over is part of the safety layer: it runs where the shield runs, on the ratio the shield lets through, and
``RCB_SHIELD=0`` (``rcb serve --no-shield``) serves the bare model, every ratio the model's, as ``rcb evaluate
onnx:MODEL_DIR`` plays it. Behind the default band the rule cannot fire: once the day's ROI is below the target with
2% of B spent, the band tops out at 90% of the controller's ratio, so the shield already holds the model below it. It
fires behind a band that lets the model bid above the controller under threat (a card's ``shield`` section with
``tight_above > 0``): there the controller is the more cautious, and takes over.
A controller model is its own controller: nothing to hand over to. A row the fallback decided (the model could not
run) is not judged (the model did not bid it) unless the campaign is already handed over. The rule reads only
campaigns that spent something: the cheap checks come first, and the controller's ratio is computed only for the
campaigns that may be handed over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from model.handover import HandoverConfig, evidence, handed_over
from model.state import CampaignState, stack_histories
from service.runner import Decided, ModelRunner

HANDOVER = "handover"
"""The ``decided_by`` of a ratio the controller bid because the campaign was handed over."""


def hand_over(
    runner: ModelRunner,
    states: Sequence[CampaignState],
    decided: Decided,
    config: HandoverConfig | None = None,
) -> tuple[Decided, list[bool]]:
    """``decided`` with the handed-over campaigns' rows bid by the controller, and per row whether this decision is
    the one that hands the campaign over (what ``rcb_handovers_total`` counts once the write lands)."""
    config = config or HandoverConfig()
    n = len(states)
    newly = [False] * n
    if not runner.use_shield or runner.controller_source()["source"] == "model":
        return decided, newly  # the bare model served (the ratios of ``onnx:MODEL_DIR``), or a controller model
    candidates = [
        k
        for k, s in enumerate(states)
        if s.handed_over
        or (
            not s.done
            and decided.decided_by[k] != "fallback"
            and s.total_cost > 0
            and s.total_delivery < s.roi_target * s.total_cost  # ROI below L: a superset of the rule's
        )
    ]
    if not candidates:
        return decided, newly
    law = runner.fallback
    ratio, decided_by = decided.ratio.copy(), list(decided.decided_by)
    by_slot: dict[int, list[int]] = {}
    for k in candidates:
        by_slot.setdefault(states[k].slot, []).append(k)
    for rows in by_slot.values():
        history = stack_histories([states[k] for k in rows])
        already = np.array([states[k].handed_over for k in rows])
        if not already.any() and not evidence(history, config).any():
            continue  # not enough of the day to judge yet
        controller = np.asarray(law.ratios(history), dtype=np.float64)
        bid, handed = handed_over(history, decided.ratio[rows], controller, already, config)
        for j, k in enumerate(rows):
            if handed[j]:
                ratio[k], decided_by[k] = bid[j], HANDOVER
                newly[k] = not already[j]
    if not any(d == HANDOVER for d in decided_by):
        return decided, newly
    return replace(decided, ratio=ratio, decided_by=decided_by), newly
