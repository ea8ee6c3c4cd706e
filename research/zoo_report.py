"""The market zoo's report (``research/scripts/zoo.sh``): what ``rcb fit`` serves against the best single baseline.

What is served on each market ``rcb fit`` was not tuned on, against the best single baseline tuned on the same train
days.

``python -m research.zoo_report OUT [--plot PNG]`` reads ``OUT/<market>/<setting>-<split>/summary.json`` (written by
``rcb evaluate`` with ``rm,pid,cem,plan,shield:onnx:MODEL,oracle-day``) and the served model's card
(``MODEL/model.json``, its ``fit`` section: what was chosen and its kind; ``MODEL`` is read from the
``shield:onnx:MODEL`` label), writes ``OUT/ZOO.md`` and the plot (default ``OUT/zoo.png``) and prints the Markdown.

Per market, setting and split, one row:

* **served**: the fit's chosen candidate and its kind, played as served (``shield:onnx:MODEL``: a learned model behind
  the shield around the market's PID, a controller model as it is), its median ANS over seeds (mean CSR);
* **best baseline**: the highest median ANS of RM, PID, CEM and the planner (``plan``), each tuned on the train days;
* **gap**: served ANS - best baseline ANS;
* **target**: gap >= -:data:`GAP_FLOOR` and served CSR >= PID's CSR - :data:`CSR_SLACK`;
* **ahead**: gap >= :data:`AHEAD_MARGIN`.

Then the distribution over markets per setting and split: median and worst gap, how many markets hold the target,
how many are ahead, and the kinds served.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.artifact import CARD_FILE

BASELINES = ("rm", "pid", "cem", "plan")
"""The single baselines the served model is measured against, in the order ties go (the first listed wins)."""
SERVED_PREFIX = "shield:onnx:"
"""The served model's method: ``shield:onnx:MODEL`` (a controller model plays there as it is)."""
GAP_FLOOR = 0.01
"""The served model may trail the best baseline's median ANS by at most this much."""
CSR_SLACK = 0.05
"""The served model's CSR may fall at most this far below the PID's."""
AHEAD_MARGIN = 0.03
"""A market where the served model leads the best baseline by this much or more counts as ahead."""
TOLERANCE = 1e-9
"""Figures are means and medians of floats: a gap equal to a bar, to the last bit, meets it."""
SPLITS = ("test", "ood")
"""The splits the report reads, in this order."""


@dataclass(frozen=True)
class Row:
    """One market's served model against its baselines on one split."""

    market: str
    setting: str
    split: str
    days: int
    chosen: str | None
    """The fit's chosen candidate (``pid``, ``rm``, ``plan``, ``cbrl``, ...), None where no card was read."""
    kind: str | None
    """Its kind when served (``controller``, ``planner``, ``policy``)."""
    served_ans: float | None
    served_csr: float | None
    baseline: str | None
    """The best single baseline by median ANS."""
    baseline_ans: float | None
    baseline_csr: float | None
    pid_csr: float | None

    @property
    def gap(self) -> float | None:
        if self.served_ans is None or self.baseline_ans is None:
            return None
        return self.served_ans - self.baseline_ans

    @property
    def holds(self) -> bool | None:
        """Gap >= -GAP_FLOOR and served CSR >= PID's - CSR_SLACK (None where a figure is missing)."""
        gap = self.gap
        if gap is None or self.served_csr is None or self.pid_csr is None:
            return None
        return gap >= -GAP_FLOOR - TOLERANCE and self.served_csr >= self.pid_csr - CSR_SLACK - TOLERANCE

    @property
    def ahead(self) -> bool | None:
        gap = self.gap
        return None if gap is None else gap >= AHEAD_MARGIN - TOLERANCE


@dataclass(frozen=True)
class Distribution:
    """The rows of one setting and split, over markets."""

    setting: str
    split: str
    markets: int
    """Markets with a served row and a baseline (the ones the figures below read)."""
    missing: tuple[str, ...]
    """Markets with an evaluation but no served row or no baseline."""
    median_gap: float | None
    worst_gap: float | None
    worst_market: str | None
    holding: int
    ahead: int
    served: dict[str, int]
    """Chosen candidate -> markets it was served on."""


def summaries(root: Path) -> list[tuple[str, str, str, dict[str, dict[str, Any]]]]:
    """``(market, setting, split, summary)`` of every ``root/<market>/<setting>-<split>/summary.json`` with a split of
    :data:`SPLITS`, sorted by market, setting and split."""
    found = []
    for path in root.glob("*/*-*/summary.json"):
        setting, split = path.parent.name.split("-", 1)
        if split in SPLITS:
            found.append((path.parent.parent.name, setting, split, json.loads(path.read_text())))
    return sorted(found, key=lambda item: (item[0], item[1], SPLITS.index(item[2])))


def served_method(summary: dict[str, dict[str, Any]]) -> str | None:
    """The summary's ``shield:onnx:MODEL`` label (the served model), or None."""
    return next((method for method in summary if method.startswith(SERVED_PREFIX)), None)


def fit_of(model_dir: Path) -> dict[str, Any] | None:
    """The card's ``fit`` section of ``model_dir`` (None: no card, or a card no fit wrote)."""
    path = model_dir / CARD_FILE
    if not path.is_file():
        return None
    fit = json.loads(path.read_text()).get("fit")
    return fit if isinstance(fit, dict) else None


def best_baseline(summary: dict[str, dict[str, Any]]) -> str | None:
    """The baseline of :data:`BASELINES` with the highest median ANS (ties: the first listed), or None."""
    best = None
    for method in BASELINES:
        row = summary.get(method)
        if row is not None and (best is None or row["ans_median"] > summary[best]["ans_median"]):
            best = method
    return best


def _days(summary: dict[str, dict[str, Any]]) -> int:
    counted = summary.get("pid") or next(iter(summary.values()))
    return int(counted["n_episodes"]) // max(int(counted.get("n_seeds", 1)), 1)


def row_of(market: str, setting: str, split: str, summary: dict[str, dict[str, Any]]) -> Row:
    """One row from a split's summary and the served model's card (its path as the label names it, relative to the
    current directory where it is relative, as ``rcb evaluate`` read it)."""
    method = served_method(summary)
    fit = fit_of(Path(method[len(SERVED_PREFIX) :])) if method else None
    served = summary.get(method) if method else None
    baseline = best_baseline(summary)
    base = summary.get(baseline) if baseline else None
    pid = summary.get("pid")
    return Row(
        market=market,
        setting=setting,
        split=split,
        days=_days(summary),
        chosen=fit.get("chosen") if fit else None,
        kind=fit.get("kind") if fit else None,
        served_ans=served["ans_median"] if served else None,
        served_csr=served["csr"] if served else None,
        baseline=baseline,
        baseline_ans=base["ans_median"] if base else None,
        baseline_csr=base["csr"] if base else None,
        pid_csr=pid["csr"] if pid else None,
    )


def rows(root: Path) -> list[Row]:
    """Every row under ``root`` (:func:`summaries`' order)."""
    return [row_of(market, setting, split, summary) for market, setting, split, summary in summaries(root)]


def distributions(found: list[Row]) -> list[Distribution]:
    """One :class:`Distribution` per setting and split present, settings sorted, splits in :data:`SPLITS`' order."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in found:
        groups.setdefault((row.setting, row.split), []).append(row)
    out = []
    for (setting, split), group in sorted(groups.items(), key=lambda item: (item[0][0], SPLITS.index(item[0][1]))):
        scored = [r for r in group if r.gap is not None]
        gaps = [r.gap for r in scored if r.gap is not None]
        worst = min(scored, key=lambda r: r.gap if r.gap is not None else 0.0) if scored else None
        served = Counter(r.chosen or "?" for r in scored)
        out.append(
            Distribution(
                setting=setting,
                split=split,
                markets=len(scored),
                missing=tuple(r.market for r in group if r.gap is None),
                median_gap=statistics.median(gaps) if gaps else None,
                worst_gap=worst.gap if worst else None,
                worst_market=worst.market if worst else None,
                holding=sum(bool(r.holds) for r in scored),
                ahead=sum(bool(r.ahead) for r in scored),
                served=dict(sorted(served.items(), key=lambda item: (-item[1], item[0]))),
            )
        )
    return out


def _figures(ans: float | None, csr: float | None) -> str:
    return "—" if ans is None or csr is None else f"{ans:.3f} ({csr:.2f})"


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.3f}"


def _flag(value: bool | None) -> str:
    return "—" if value is None else ("yes" if value else "no")


def _served(row: Row) -> str:
    if row.chosen is None:
        return "—"
    return f"{row.chosen} ({row.kind})" if row.kind else row.chosen


def row_table(found: list[Row]) -> list[str]:
    """The per-market Markdown table."""
    header = [
        "market",
        "setting",
        "split",
        "days",
        "served",
        "served ANS (CSR)",
        "best baseline",
        "its ANS (CSR)",
        "gap",
        "PID CSR",
        f"target (gap >= -{GAP_FLOOR:g}, CSR >= PID's - {CSR_SLACK:g})",
        f"ahead (gap >= {AHEAD_MARGIN:g})",
    ]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join([":---"] * 3 + ["---:", ":---", "---:", ":---"] + ["---:"] * 3 + [":---"] * 2) + "|",
    ]
    for r in found:
        cells = [
            r.market,
            r.setting.upper(),
            r.split,
            str(r.days),
            _served(r),
            _figures(r.served_ans, r.served_csr),
            r.baseline.upper() if r.baseline else "—",
            _figures(r.baseline_ans, r.baseline_csr),
            _signed(r.gap),
            "—" if r.pid_csr is None else f"{r.pid_csr:.2f}",
            _flag(r.holds),
            _flag(r.ahead),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def distribution_table(found: list[Distribution]) -> list[str]:
    """The distribution over markets, one Markdown row per setting and split."""
    header = ["setting", "split", "markets", "median gap", "worst gap", "holding the target", "ahead by 0.03", "served"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([":---"] * 2 + ["---:"] * 5 + [":---"]) + "|"]
    for d in found:
        worst = "—" if d.worst_gap is None else f"{d.worst_gap:+.3f} ({d.worst_market})"
        served = ", ".join(f"{name} {count}" for name, count in d.served.items()) or "—"
        markets = str(d.markets) + (f" (no figures: {', '.join(d.missing)})" if d.missing else "")
        cells = [
            d.setting.upper(),
            d.split,
            markets,
            _signed(d.median_gap),
            worst,
            f"{d.holding} / {d.markets}",
            f"{d.ahead} / {d.markets}",
            served,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown(root: Path, plot_name: str | None = None) -> str:
    """The report: the per-market rows, the distribution, the legend (and the plot's link, where drawn)."""
    found = rows(root)
    text = [
        "# Market zoo: what rcb fit serves against the best single baseline",
        "",
        "## Per market",
        "",
        *row_table(found),
        "",
        "## Over markets",
        "",
        *distribution_table(distributions(found)),
        "",
    ]
    if plot_name:
        text += [f"![gap per market]({plot_name})", ""]
    text += [
        "Cells: median ANS over evaluation seeds (mean CSR). served: the candidate `rcb fit` chose on held-out train"
        " days (its kind), fitted on all the train days and played as served (`shield:onnx:MODEL`: a learned model"
        " behind the shield around the market's PID, a controller model as it is); best baseline: the highest median"
        " ANS of RM, PID, CEM and the planner (PLAN), each tuned on the same train days; gap: served - best baseline;"
        " PID CSR: the PID's mean CSR on the split. served (over markets): markets per chosen candidate.",
        "",
    ]
    return "\n".join(text)


def plot(root: Path, png: Path) -> None:
    """The gap per market, sorted, one panel per setting and split, with the -GAP_FLOOR and AHEAD_MARGIN lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: dict[tuple[str, str], list[Row]] = {}
    for row in rows(root):
        if row.gap is not None:
            panels.setdefault((row.setting, row.split), []).append(row)
    if not panels:
        raise ValueError(f"{root}: no summary.json with a served row and a baseline to plot")
    keys = sorted(panels, key=lambda key: (key[0], SPLITS.index(key[1])))
    width = max(4.0, 0.32 * max(len(group) for group in panels.values()) + 1.5)
    fig, axes = plt.subplots(1, len(keys), figsize=(width * len(keys), 4.6), squeeze=False)
    kinds = sorted({r.kind or "?" for group in panels.values() for r in group})
    colours = {kind: f"C{i}" for i, kind in enumerate(kinds)}
    for ax, key in zip(axes[0], keys, strict=True):
        group = sorted(panels[key], key=lambda r: r.gap if r.gap is not None else 0.0)
        gaps = [r.gap if r.gap is not None else 0.0 for r in group]
        ax.bar(range(len(group)), gaps, color=[colours[r.kind or "?"] for r in group])
        ax.axhline(-GAP_FLOOR, color="k", linestyle="--", linewidth=1, label=f"-{GAP_FLOOR:g} (target)")
        ax.axhline(AHEAD_MARGIN, color="grey", linestyle=":", linewidth=1, label=f"+{AHEAD_MARGIN:g} (ahead)")
        ax.axhline(0.0, color="k", linewidth=0.5)
        ax.set_xticks(range(len(group)), [r.market for r in group], rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("served ANS - best baseline ANS")
        ax.set_title(f"{key[0].upper()} {key[1]}")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in kinds]
    lines, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles + lines, [f"served: {k}" for k in kinds] + labels, loc="upper center", ncol=len(kinds) + 2)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m research.zoo_report", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="research/scripts/zoo.sh's OUT (e.g. out/zoo)")
    parser.add_argument("--plot", type=Path, help="where to draw the gaps (default OUT/zoo.png)")
    args = parser.parse_args(argv)
    root: Path = args.out_dir
    if not root.is_dir():
        print(f"{root}: no such directory (run research/scripts/zoo.sh first)", file=sys.stderr)
        return 2
    if not summaries(root):
        print(f"{root}: no <market>/<setting>-test|ood/summary.json to report", file=sys.stderr)
        return 2
    png: Path = args.plot or root / "zoo.png"
    try:
        plot(root, png)
        link = str(png.relative_to(root)) if png.is_relative_to(root) else str(png.resolve())
    except ValueError as exc:  # no market has both a served row and a baseline
        print(f"no plot: {exc}", file=sys.stderr)
        link = None
    text = markdown(root, link)
    (root / "ZOO.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
