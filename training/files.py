"""Writing files and model directories so that a reader (or a crash) never sees half of one."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Call ``write(tmp)`` on a unique temporary file beside ``path``, then move it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def swap_into_place(built: Path, out: Path) -> None:
    """Replace ``out`` by ``built`` with renames: a reader sees the old artifact, none, or the new one."""
    if not out.exists():
        os.replace(built, out)
        return
    retired = out.with_name(f".{out.name}.{uuid.uuid4().hex}.old")
    os.replace(out, retired)
    os.replace(built, out)
    shutil.rmtree(retired, ignore_errors=True)


def built_in(out: Path) -> Path:
    """The directory :func:`built_beside` builds in and swaps in: ``out``'s, or a symlinked ``out``'s target's. It
    must be writable even where ``out`` already exists."""
    return (out.resolve() if out.is_symlink() else out).parent


@contextlib.contextmanager
def built_beside(out: Path, before_swap: Callable[[], None] | None = None) -> Iterator[Path]:
    """A fresh directory beside ``out`` to build an artifact in: when the block ends without an error it replaces
    ``out`` (:func:`swap_into_place`); whatever happens, nothing of it is left behind.

    A symlinked ``out`` (``models/current -> models/v12``) has its target replaced and the link kept (the swap
    replaced the link by a directory). Swaps take a lock on ``out``'s parent directory: two exports into one
    ``out`` at once both finish, the later swap serving (unlocked, one could find the other's half-done swap and
    fail)."""
    out = out.resolve() if out.is_symlink() else out
    out.parent.mkdir(parents=True, exist_ok=True)
    building = out.with_name(f".{out.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    building.mkdir()
    try:
        yield building
        with swap_lock(out):
            if before_swap is not None:  # e.g. the destination checked again, where no other swap can run
                before_swap()
            swap_into_place(building, out)
    finally:
        shutil.rmtree(building, ignore_errors=True)


@contextlib.contextmanager
def swap_lock(out: Path) -> Iterator[None]:
    """An exclusive lock on the directory holding ``out`` (flock on its descriptor: no lock file left beside the
    model, released if the process dies). Swaps into one parent directory run one at a time; each takes
    milliseconds."""
    descriptor = os.open(out.parent, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing the last descriptor releases the lock
