"""Where an export goes: the refusals every export (``rcb export``, ``--plan``, ``--controller``) makes first."""

from __future__ import annotations

from pathlib import Path

from model.artifact import CARD_FILE
from training.market.dataset import Market


class ExportError(ValueError):
    """A run that cannot be exported, or an export that does not reproduce what it exports."""


def check_destination(out: Path, force: bool) -> None:
    """``out`` can take a model directory: not the current directory (or one holding it), not a file, not a
    directory holding something other than a model, and not a model unless ``force``."""
    here = Path.cwd().resolve()
    if out.resolve() == here or out.resolve() in here.parents:  # the swap would move the shell's directory away
        raise ExportError(f"--out {out} is the current directory or holds it; name a model directory, e.g. ./model")
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not (out / CARD_FILE).exists():
            raise ExportError(f"{out} is a non-empty directory that holds no model artifact; choose another --out")
        if not force:
            raise ExportError(f"{out} already holds a model artifact; pass --force to overwrite it")


def check_market_export(market_dir: Path, out: Path, force: bool, needs_train_days: str) -> Market:
    """The refusals an export fitted on a market's train days makes before any work, for a caller to make before its
    progress bar: ``out`` taken (without ``force``), ``market_dir`` not a market or without train days
    (``needs_train_days`` says why they are needed). Returns the market."""
    check_destination(Path(out), force)
    market = Market.open(Path(market_dir))
    if not market.split("train"):
        raise ExportError(f"{market_dir} has no train days: {needs_train_days}")
    return market
