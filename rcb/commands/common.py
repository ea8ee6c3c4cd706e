"""Helpers every command shares: clear errors instead of tracebacks, output checks, JSON, progress bars.

Streams: results (tables, JSON) go to stdout; progress bars, notes, warnings and errors go to stderr,
so ``rcb oracle DIR --setting mc > table.txt`` captures the table alone and ``--json`` stays clean.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

# training/ (pandas, torch, matplotlib, the solvers) is imported inside the functions, so `rcb --help` loads none
# of it (rcb/cli.py).

console = Console(stderr=True, soft_wrap=True)
"""Human-facing messages (progress, notes, warnings, errors) go to stderr."""

DOCS_EPILOG = "Docs: docs/cli.md (commands, exit codes), docs/data-schema.md (logs, manifest), docs/metrics.md."


def stdout_console() -> Console:
    """A console on stdout for result tables (made per call, so a redirected or captured stdout is honoured)."""
    return Console(file=sys.stdout, soft_wrap=True)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print a one-line error and return the Exit to raise."""
    console.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False)  # [..] in a path is text
    return typer.Exit(code)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn the project's expected errors (bad input, missing files) into a clear message and exit 2."""
    from training.market.dataset import MarketError
    from training.market.schema import InvalidRowsError, SchemaError

    try:
        yield
    except (MarketError, SchemaError, InvalidRowsError, FileNotFoundError, ValueError) as exc:
        raise fail(str(exc)) from None


def _creatable_dir(directory: Path, what: str, path: Path) -> None:
    """``directory`` is a writable directory, or its nearest existing ancestor is one (so it can be made).

    Messages name ``path``, the output the user gave.
    """
    probe = directory
    while not probe.exists():
        if probe.is_symlink():  # a dangling link: mkdir would fail
            raise ValueError(f"{what} {path}: {probe} is a broken symbolic link")
        parent = probe.parent
        if parent == probe:
            break
        probe = parent
    if not probe.is_dir():
        raise ValueError(f"{what} {path}: {probe} is not a directory")
    try:  # os.access says yes to root on a read-only file system: try for real (and clean up)
        handle, name = tempfile.mkstemp(dir=probe, prefix=".rcb-write-check-")
    except OSError:
        raise ValueError(f"{what} {path}: {probe} is not writable") from None
    os.close(handle)
    os.unlink(name)


def check_output_dir(path: Path, what: str = "--out") -> Path:
    """Refuse, before any work, an output directory that cannot be written: a file, or under one, or read-only.

    Raises ValueError (which :func:`user_errors` turns into exit 2). Whether an existing directory may
    be overwritten is each command's own check (``--force``, ``--resume``).
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {path}: is a file; expected a directory")
    _creatable_dir(path, what, path)
    return path


def check_output_file(path: Path, what: str = "--out", suffix: str | None = None) -> Path:
    """Refuse, before any work, an output file that cannot be written: a directory, or under a file, or read-only."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path}: is a directory; expected a file path")
    if suffix is not None and path.suffix.lower() != suffix:
        raise ValueError(f"{what} {path}: expected a {suffix} file name")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{what} {path}: is not writable")
    _creatable_dir(path.parent, what, path)
    return path


def print_json(obj: object) -> None:
    sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
    sys.stdout.flush()


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 seed``, ``2 seeds``."""
    return f"{count} {noun if count == 1 else (plural_form or noun + 's')}"


def progress(quiet: bool = False) -> Progress:
    """A bar on stderr; give it a total wherever the amount of work is known."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=quiet,
        transient=False,
    )


class ConstraintRecipeName(StrEnum):
    """How MC constraints are drawn where the logs carry none: ``training.market.constraints.RECIPES``, spelled here
    so ``rcb --help`` need not import the oracle (a test keeps the two equal)."""

    prior = "prior"
    paper = "paper"


CONSTRAINTS_HELP = (
    "MC constraints: prior = budget from the train days' statistics (never the day itself);"
    " paper = the reference code's recipe, from the day's own hindsight oracle."
)
