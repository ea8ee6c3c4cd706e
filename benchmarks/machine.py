"""What every benchmark prints first: the machine its figures come from."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import numpy as np


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def describe_machine() -> str:
    """CPU model, cores (and how many this process may use), Python and numpy versions, OS."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{cpu_model()}; {os.cpu_count()} logical cores ({usable} usable); Python {platform.python_version()}, "
        f"numpy {np.__version__}; {platform.system()} {platform.machine()}"
    )
