"""Helpers every command shares: clear errors instead of tracebacks, JSON output, progress bars."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

console = Console(stderr=True, soft_wrap=True)
"""Human-facing output goes to stderr so stdout stays machine-readable with --json."""


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print a one-line error and return the Exit to raise."""
    console.print(f"[bold red]error:[/] {message}")
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


def print_json(obj: object) -> None:
    sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
    sys.stdout.flush()


def progress(quiet: bool = False) -> Progress:
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
