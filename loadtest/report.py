"""Reporting: the rich table, ``summary.json`` and ``latency.png`` (p50/p99 per 1-second window)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from loadtest.openloop import windows
from loadtest.scenarios import ScenarioResult


def _fmt(v, nd: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:,.{nd}f}" if isinstance(v, float) else f"{v:,}"


def _rows(result: ScenarioResult) -> list[tuple[str, dict]]:
    rows = [(name, s) for name, s in result.summary["streams"].items()]
    if result.scenario == "mixed":
        rows += [("bid during burst", result.summary["bid_during_burst"])]
        rows += [("bid outside burst", result.summary["bid_outside_burst"])]
    return rows


def print_table(result: ScenarioResult, console: Console | None = None) -> None:
    console = console or Console()
    title = f"{result.scenario} @ {result.params['url']}  (latency from the intended send time)"
    t = Table(title=title)
    for col in ("stream", "requests", "target/s", "achieved/s", "throughput/s", "errors"):
        t.add_column(col, justify="right")
    for col in ("p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "p99 all ms", "send lag p99 ms"):
        t.add_column(col, justify="right")
    for name, s in _rows(result):
        lat = s["latency_ms"]
        # p99 over every request: where it falls among the unanswered, it is beyond the client's timeout
        p99_all = s["latency_all_ms"]["p99"]
        every = _fmt(p99_all) if p99_all is not None or not s["unanswered"] else "[red]timeout[/red]"
        err = str(s["errors"]) + (f" {s['error_counts']}" if s["errors"] else "")
        t.add_row(
            name,
            _fmt(s["requests"]),
            _fmt(float(s["target_rate"]), 0),
            _fmt(s["achieved_rate"], 1),
            _fmt(s["throughput"], 1),
            f"[red]{err}[/red]" if s["errors"] else err,
            *(_fmt(lat[k]) for k in ("p50", "p90", "p99", "p99.9", "max")),
            every,
            _fmt(s["send_lag_ms"]["p99"]),
        )
    console.print(t)
    burst = result.summary["streams"].get("burst")
    if burst is not None:
        console.print(f"burst wall time: {_fmt(burst['burst_wall_s'], 3)} s for {burst['requests']:,} requests")
    if result.setup is not None:
        console.print(f"setup: {result.setup['requests']:,} campaigns registered, 0 errors")


def write_summary(result: ScenarioResult, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = result.to_json()
    data["windows_1s"] = {name: windows(s) for name, s in result.run.streams.items()}
    data["started_at"] = result.run.started_at
    path = out / "summary.json"
    path.write_text(json.dumps(_clean(data), indent=2, allow_nan=False))
    return path


def _clean(o):
    if isinstance(o, float) and math.isnan(o):
        return None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_clean(v) for v in o]
    return o


def plot_latency(result: ScenarioResult, path: str | Path) -> Path:
    """Latency (from the intended send time) over the run: every request as a faint dot, p50 and p99 per
    1-second window as lines; the slot burst window shaded for ``mixed``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5))
    colors = {"bid": "tab:blue", "burst": "tab:orange", "setup": "tab:gray"}
    for name, s in result.run.streams.items():
        c = colors.get(name)
        ok = s.responded & np.isfinite(s.latency)
        if ok.any():
            sample = np.flatnonzero(ok)
            if sample.size > 20000:
                sample = sample[:: sample.size // 20000]
            ax.scatter(s.intended[sample], s.latency[sample] * 1e3, s=1, alpha=0.15, color=c)
        w = windows(s, 1.0)
        mid = np.asarray(w["t"]) + 0.5
        ax.plot(mid, w["p50"], "-o", ms=3, color=c, label=f"{name} p50 (1 s windows)")
        ax.plot(mid, w["p99"], "--s", ms=3, color=c, label=f"{name} p99 (1 s windows)")
        beyond = np.isnan(np.asarray(w["p99"], dtype=float)) & (np.asarray(w["unanswered"]) > 0)
        if beyond.any():  # the window's p99 is an unanswered request: drawn at the client's timeout
            top = float(result.params.get("timeout", 10.0)) * 1e3
            ax.scatter(
                mid[beyond],
                np.full(beyond.sum(), top),
                marker="^",
                color="red",
                s=20,
                label=f"{name} p99 beyond the timeout",
            )
        err = ~s.ok
        if err.any():
            ax.scatter(s.intended[err], np.full(err.sum(), 0.0), marker="x", color="red", s=12, label=f"{name} errors")
    if "burst_window_s" in result.summary:
        b0, b1 = result.summary["burst_window_s"]
        ax.axvspan(b0, b1, color="tab:orange", alpha=0.1, label="slot burst")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_xlabel("intended send time (s)")
    ax.set_ylabel("latency from intended send (ms)")
    ax.set_title(f"{result.scenario}: target {result.params['rate']:g}/s, {result.params['url']}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
