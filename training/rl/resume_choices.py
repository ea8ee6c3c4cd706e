"""What a resumed training run keeps from its run.json, and what a run recorded before an option existed.

One table for the two places that need it: :func:`training.rl.runs.run_training` refuses to resume a run with
another model-selection choice than it started with, and ``rcb train --resume`` fills the choices the command
line leaves out. Torch-free, so that ``rcb train --help`` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SelectionChoice:
    """A model-selection choice a resumed run must keep: its earlier epochs were scored with it."""

    field: str
    """The ``SACConfig`` field (and run.json config key) that holds it."""
    option: str
    """The ``rcb train`` option that sets it."""
    before_the_option: Any
    """What a run recorded before the option existed did (its run.json has no such key)."""
    refusal: str
    """How a refusal names the run's choice (``{}`` is the value)."""

    def recorded(self, config: dict[str, Any]) -> Any:
        """The run's choice, read from its recorded config."""
        return type(self.before_the_option)(config.get(self.field, self.before_the_option))


SELECTION_CHOICES: dict[str, SelectionChoice] = {
    choice.field: choice
    for choice in (
        SelectionChoice("validation_fold", "--validation-fold", 0, "holds out validation fold {}"),
        SelectionChoice("selection_days", "--selection-days", "all", "selects on {!r} days"),
        SelectionChoice("selection_seeds", "--selection-seeds", 1, "selects on {} noise stream(s)"),
        SelectionChoice("selection_epoch", "--selection-epoch", "best", "keeps its {!r} epoch"),
        SelectionChoice("select_from", "--select-from", 0, "selects from epoch {}"),
    )
}
"""Model selection's choices, by ``SACConfig`` field."""

TRAINING_CHOICES: dict[str, Any] = {
    "residual": False,
    "roi_margin": 0.0,
    "regime_spread": 0.0,
    "bootstrap_days": False,
    "relaxed_stages": True,
    "start_at_controller": False,
    "reference": "pid",
    "bootstrap_belief": "shared",
    "train_shielded": False,
    "train_shield": None,
}
"""Choices of what is learned that ``rcb train --resume`` keeps when they are not given, by ``SACConfig`` field,
with what a run recorded before the option existed did. (``n_step`` and ``correction_penalty`` are kept too;
theirs is ``SACConfig``'s default, which the CLI reads without importing torch.)"""

BEFORE_THE_OPTIONS: dict[str, Any] = {
    **TRAINING_CHOICES,
    **{key: choice.before_the_option for key, choice in SELECTION_CHOICES.items()},
}
"""What a run recorded before each of these options existed did, by ``SACConfig`` field; a field not named here
behaved then as its default does now."""
