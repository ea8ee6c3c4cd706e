"""What a fit reports: every candidate's row on the held-out days, the plot of them, and the card's ``fit`` section.

A row is a candidate's median ANS and mean CSR with their 95% bootstrap intervals (:mod:`training.fit.intervals`),
whether the rule let it be chosen and whether it was. ``fit.json`` holds the card's section and the time each step
took, ``fit.md`` the table, ``fit.png`` the plot (ANS with its interval per candidate, the PID's as a line, the
eligible ones filled).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.files import atomic_write_text
from training.fit.intervals import BOOTSTRAP_SEED, LEVEL, RESAMPLES, Figures
from training.fit.rule import PID, RULE, Choice, Kind
from training.fit.workdir import code_version, write_json


@dataclass(frozen=True)
class Line:
    """One candidate's row of the report."""

    name: str
    kind: Kind
    about: str
    figures: Figures
    eligible: bool
    chosen: bool

    def record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "about": self.about,
            **self.figures.record(),
            "eligible": self.eligible,
            "chosen": self.chosen,
        }


def lines_of(
    names: list[str], kinds: dict[str, Kind], about: dict[str, str], figures: dict[str, Figures], choice: Choice
) -> list[Line]:
    """The report's rows, in the order listed."""
    return [Line(n, kinds[n], about[n], figures[n], n in choice.eligible, n == choice.chosen) for n in names]


def _interval(low: float, high: float, decimals: int) -> str:
    return f"[{low:.{decimals}f}, {high:.{decimals}f}]"


def markdown(lines: list[Line], days: int, setting: str) -> str:
    """The table: one row per candidate, the chosen one marked."""
    head = [
        f"Held-out train days: {days} ({setting}); median ANS and mean CSR with {LEVEL:.0%} intervals (a bootstrap"
        " over the days)",
        "",
        "| candidate | kind | median ANS | 95% interval | CSR | 95% interval | eligible | |",
        "|:---|:---|---:|:---|---:|:---|:---:|:---|",
    ]
    rows = []
    for line in lines:
        f = line.figures
        if line.name == PID:
            eligible = "the PID"
        elif line.kind == "reference":
            eligible = "n/a"
        else:
            eligible = "yes" if line.eligible else "no"
        rows.append(
            f"| {line.name} | {line.kind} | {f.ans:.3f} | {_interval(f.ans_low, f.ans_high, 3)} | {f.csr:.2f} |"
            f" {_interval(f.csr_low, f.csr_high, 2)} | {eligible} | {'**chosen**' if line.chosen else ''} |"
        )
    return "\n".join([*head, *rows]) + "\n"


def plot(lines: list[Line], path: Path, title: str) -> None:
    """``fit.png``: each candidate's median ANS with its interval, the PID's as a dashed line, the eligible ones filled
    (a hollow marker: not eligible; grey: a reference row), the chosen one starred."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(6.0, 1.0 * len(lines) + 1) + 2.6, 4.2))
    ax = fig.subplots()
    pid = next(line for line in lines if line.name == PID)
    ax.axhline(pid.figures.ans, color="C0", ls="--", lw=1, label=f"PID {pid.figures.ans:.3f}")
    for x, line in enumerate(lines):
        f = line.figures
        colour = "grey" if line.kind == "reference" else ("C2" if line.eligible else "C3")
        ax.errorbar(
            [x],
            [f.ans],
            yerr=[[f.ans - f.ans_low], [f.ans_high - f.ans]],
            fmt="o",
            color=colour,
            markerfacecolor=colour if line.eligible else "white",
            markersize=8,
            capsize=4,
        )
        if line.chosen:
            ax.plot([x], [f.ans], marker="*", color="gold", markeredgecolor="black", markersize=18, zorder=5)
        ax.annotate(
            f"CSR {f.csr:.2f}", (x, f.ans_high), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8
        )
    ax.set_xticks(range(len(lines)), [line.name for line in lines], rotation=20, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(lines) - 0.4)
    ax.plot([], [], "o", color="C2", label="eligible: CSR at least the PID's")
    ax.plot([], [], "o", color="C3", markerfacecolor="white", label="not eligible")
    ax.plot([], [], "o", color="grey", markerfacecolor="white", label="reference (no served form)")
    ax.plot([], [], "*", color="gold", markeredgecolor="black", markersize=12, linestyle="none", label="chosen")
    ax.set_ylabel(f"median ANS, {LEVEL:.0%} interval")
    ax.set_ylim(min(-0.05, min(line.figures.ans_low for line in lines) - 0.05), 1.12)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def fit_section(
    lines: list[Line],
    choice: Choice,
    days: dict[str, Any],
    market: str,
    setting: str,
    seeds: int,
    served: str,
    training: dict[str, Any],
) -> dict[str, Any]:
    """The card's ``fit`` section: what was chosen, against what (every candidate's row), on which days, by which
    rule, and how the chosen one was fitted for serving."""
    chosen = next(line for line in lines if line.chosen)
    return {
        "chosen": chosen.name,
        "kind": chosen.kind,
        "rule": RULE,
        "rule_code": "training/fit/rule.py",
        "market": market,
        "setting": setting,
        **days,
        "play_seeds": seeds,
        "interval": {"level": LEVEL, "resamples": RESAMPLES, "seed": BOOTSTRAP_SEED, "over": "the held-out days"},
        "pid_csr": round(choice.pid_csr, 4),
        "candidates": [line.record() for line in lines],
        "served": served,
        "training": training,
        "code": code_version(),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def write_report(
    directory: Path, lines: list[Line], section: dict[str, Any], seconds: dict[str, float], title: str
) -> dict[str, Path]:
    """``fit.json`` (the card's section and each step's seconds), ``fit.md`` and ``fit.png`` in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"json": directory / "fit.json", "table": directory / "fit.md", "plot": directory / "fit.png"}
    write_json(paths["json"], {"fit": section, "seconds": {k: round(v, 1) for k, v in seconds.items()}})
    atomic_write_text(paths["table"], markdown(lines, len(section["held_out_days"]), section["setting"]))
    plot(lines, paths["plot"], title)
    return paths
