"""Where an export goes: the refusals every export (``rcb export``, ``--plan``) makes before any work."""

from __future__ import annotations

from pathlib import Path

from model.artifact import CARD_FILE


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
