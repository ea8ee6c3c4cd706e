"""The market suite's per-market table (``research/scripts/suite.sh``): CBRL and the shield against PID on every market.

``python -m research.suite_report OUT [--plot PNG] [--name NAME]`` reads
``OUT/<market>/<setting>-<split>/summary.json`` (written by ``rcb evaluate``) and prints one Markdown row per
(market, setting, split) with the issue's two bars:

* **CBRL first**: median ANS over training seeds >= PID's + 0.03, with mean CSR >= PID's (for the runs, their
  ensemble, the selected model and the selected model behind the shield, the form the service ships);
* **shield bound**: every shielded learned method's CSR >= PID's CSR - 0.05.

Where the suite also evaluated the validation days (``<setting>-validation``), the **selected** column is
what :mod:`research.selection`'s rule ships for that market: the ensemble, or the best single run (its one
seed's episodes), chosen on validation days only, and played on test and OOD. Beside it, the shielded
selected model's daily gap over PID with a 95% paired bootstrap interval over the days
(:mod:`research.significance`): a row is 30 days, so one day moves CSR by 0.033.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from research.selection import Selection, select
from research.significance import PairedGap, paired_gap
from training.evaluation.report import per_seed_metrics

ANS_MARGIN = 0.03
"""CBRL must beat PID's median ANS by this much (the suite target)."""
CSR_SLACK = 0.05
"""A shielded method's CSR may fall at most this far below PID's (the shield's bound)."""


def _cell(row: dict[str, Any] | None) -> str:
    if not row:
        return "—"
    return f"{row['ans_median']:.3f} ({row['csr']:.2f})"


METHOD_COLUMNS = (
    ("RM", "rm"),
    ("PID", "pid"),
    ("CEM", "cem"),
    ("CBRL", "cbrl"),
    ("shield:CBRL", "shield:cbrl"),
    ("CBRL ensemble", "ensemble:cbrl"),
    ("shield:ensemble", "shield:ensemble:cbrl"),
)
"""The table's method columns: header, and the method's label in ``summary.json``."""
RIVAL_COLUMNS = (("Hard", "hard"), ("CRL", "crl"), ("USCB", "uscb"), ("RCPO", "rcpo"))
"""The paper's RL rivals, shown when the suite trained them (``RIVALS`` of ``research/scripts/suite.sh``)."""
VERDICT_COLUMNS = (
    ("CBRL >= PID + 0.03, CSR >= PID's", "cbrl_first"),
    ("ensemble >= PID + 0.03, CSR >= PID's", "ensemble_first"),
    ("selected >= PID + 0.03, CSR >= PID's", "selected_first"),
    ("shield:selected >= PID + 0.03, CSR >= PID's", "shielded_first"),
    ("shield CSR >= PID's - 0.05", "shield_bound"),
)
"""The table's verdict columns: header, and the key of :func:`verdicts`."""


def summaries(root: Path) -> list[tuple[str, str, str, dict[str, dict[str, Any]]]]:
    """``(market, setting, split, summary)`` of every ``root/<market>/<setting>-<split>/summary.json``, sorted."""
    found = []
    for path in sorted(root.glob("*/*-*/summary.json")):
        setting, split = path.parent.name.split("-", 1)
        found.append((path.parent.parent.name, setting, split, json.loads(path.read_text())))
    return found


def _model_rows(summary: dict[str, dict[str, Any]], shielded: bool) -> dict[str, Any] | None:
    """The shipped model's row (``onnx:...``), shielded or not."""
    for method, row in summary.items():
        if (method.startswith("onnx:") and not shielded) or (method.startswith("shield:onnx:") and shielded):
            return row
    return None


def _first(row: dict[str, Any] | None, pid: dict[str, Any]) -> str:
    """'met', or what ``row`` misses of ANS >= PID's + ANS_MARGIN with CSR >= PID's."""
    if row is None:
        return "—"
    gap = row["ans_median"] - (pid["ans_median"] + ANS_MARGIN)
    csr_gap = row["csr"] - pid["csr"]
    misses = [f"ANS by {-gap:.3f}"] * (gap < 0) + [f"CSR by {-csr_gap:.2f}"] * (csr_gap < 0)
    return "met" if not misses else "missed: " + ", ".join(misses)


def verdicts(
    summary: dict[str, dict[str, Any]],
    selected: dict[str, Any] | None = None,
    shielded_selected: dict[str, Any] | None = None,
) -> dict[str, str]:
    """The bars for one evaluation, each 'met' or what is missed: ``cbrl_first`` (the runs), ``ensemble_first``
    (their ensemble), ``selected_first`` and ``shielded_first`` (the ``selected`` row alone and behind the
    shield, see :func:`selected_rows`) and ``shield_bound`` (the worst shielded learned method)."""
    pid = summary.get("pid")
    keys = ("cbrl_first", "ensemble_first", "selected_first", "shielded_first", "shield_bound")
    out = dict.fromkeys(keys, "—")
    if pid is None:
        return out
    out["cbrl_first"] = _first(summary.get("cbrl"), pid)
    out["ensemble_first"] = _first(summary.get("ensemble:cbrl"), pid)
    out["selected_first"] = _first(selected, pid)
    out["shielded_first"] = _first(shielded_selected, pid)
    shielded = {m: r for m, r in summary.items() if m.startswith("shield:")}
    if shielded:
        worst_method, worst = min(shielded.items(), key=lambda item: item[1]["csr"])
        gap = worst["csr"] - (pid["csr"] - CSR_SLACK)
        out["shield_bound"] = "met" if gap >= 0 else f"missed by {-gap:.2f} (`{worst_method}`)"
    return out


def selection_of(root: Path, market: str, setting: str) -> Selection | None:
    """The rule's choice for one market and setting, from ``root/<market>/<setting>-validation/episodes.csv``."""
    path = root / market / f"{setting}-validation" / "episodes.csv"
    if not path.is_file():
        return None
    try:
        return select(pd.read_csv(path))
    except ValueError:  # the runs did not play there
        return None


def split_episodes(root: Path, market: str, setting: str, split: str) -> pd.DataFrame | None:
    """``root/<market>/<setting>-<split>/episodes.csv``, or None where that evaluation wrote none."""
    path = root / market / f"{setting}-{split}" / "episodes.csv"
    return pd.read_csv(path) if path.is_file() else None


def selected_method(selection: Selection, shielded: bool) -> tuple[str, int | None]:
    """The episodes' label of what ``selection`` ships and its one seed (None: every seed, the ensemble)."""
    prefix = "shield:" if shielded else ""
    if selection.choice == "ensemble":
        return f"{prefix}ensemble:cbrl", None
    return f"{prefix}cbrl", selection.best_seed


def selected_rows(
    summary: dict[str, dict[str, Any]],
    selection: Selection | None,
    episodes: pd.DataFrame | None,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """What ``selection`` (:func:`selection_of` the market and setting) scored on one split, alone and behind the
    shield: the ensemble's rows of the split's ``summary``, or the chosen run's one seed in its ``episodes``."""
    if selection is None:
        return None, None
    labels = [selected_method(selection, shielded)[0] for shielded in (False, True)]
    if selection.choice == "ensemble":
        return summary.get(labels[0]), summary.get(labels[1])
    if episodes is None:
        return None, None
    table = per_seed_metrics(episodes)
    chosen = table[table["seed"] == selection.best_seed]

    def row(method: str) -> dict[str, Any] | None:
        rows = chosen[chosen["method"] == method]
        return None if rows.empty else {"ans_median": float(rows["ans"].iloc[0]), "csr": float(rows["csr"].iloc[0])}

    return row(labels[0]), row(labels[1])


def selected_gap(selection: Selection | None, episodes: pd.DataFrame | None) -> PairedGap | None:
    """The shielded selected model's gap over PID on one split's days, with its paired bootstrap interval
    (:mod:`research.significance`); None where either did not play."""
    if selection is None or episodes is None:
        return None
    method, seed = selected_method(selection, shielded=True)
    try:
        return paired_gap(episodes, method, "pid", seed)
    except ValueError:
        return None


def table(root: Path, name: str = "CBRL") -> str:
    """The Markdown table; ``name`` titles the trained method's columns (e.g. ``residual CBRL`` for the runs of
    ``rcb train --residual``: they are labelled ``cbrl`` in the summaries all the same)."""
    found = summaries(root)
    rivals = tuple(c for c in RIVAL_COLUMNS if any(c[1] in summary for *_, summary in found))
    columns = METHOD_COLUMNS[:3] + rivals + METHOD_COLUMNS[3:]
    header = [
        "market",
        "setting",
        "split",
        "days",
        "D*=0 days",
        *(title.replace("CBRL", name) for title, _ in columns),
        "default model",
        "shield:default",
        "selected",
        "shield:selected",
        "shield:selected - PID, 95% CI",
        *(title.replace("CBRL", name) for title, _ in VERDICT_COLUMNS),
    ]
    numeric = len(header) - 4 - len(VERDICT_COLUMNS)
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join([":---"] * 3 + ["---:"] * numeric + [":---"] * (1 + len(VERDICT_COLUMNS))) + "|",
    ]
    selections = {(m, st): selection_of(root, m, st) for m, st in {(m, st) for m, st, *_ in found}}
    for market, setting, split, summary in found:
        counted = summary.get("pid") or next(iter(summary.values()))
        seeds = max(int(counted.get("n_seeds", 1)), 1)
        days = int(counted["n_episodes"]) // seeds
        zero = int(counted.get("n_zero_oracle", 0)) // seeds
        selection = selections[market, setting]  # read once per market and setting, not per split
        episodes = split_episodes(root, market, setting, split)  # read once for the selected rows and the gap
        selected, shielded_selected = selected_rows(summary, selection, episodes)
        gap = selected_gap(selection, episodes)
        verdict = verdicts(summary, selected, shielded_selected)
        picked = ""
        if selection is not None:
            picked = " ens." if selection.choice == "ensemble" else f" s{selection.best_seed}"
        cells = [
            market,
            setting.upper(),
            split,
            str(days),
            str(zero),
            *(_cell(summary.get(method)) for _, method in columns),
            _cell(_model_rows(summary, shielded=False)),
            _cell(_model_rows(summary, shielded=True)),
            _cell(selected) + (picked if selected else ""),
            _cell(shielded_selected),
            gap.describe() if gap else "—",
            *(verdict[key] for _, key in VERDICT_COLUMNS),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    legend = (
        f"Cells: median ANS over seeds (mean CSR). {name}: `rcb train` trained on the market's"
        f" train days, one run per seed; {name} ensemble: those runs as one bidder (the median of their"
        " log-ratios; in SC, as suite.sh plays it, every epoch of each run's last quarter as a member: the"
        " SC default's snapshot ensemble), played with every seed; default model: the shipped"
        " `models/default` (trained on the benchmark"
        " market), a transfer check; selected: what research/selection.py's rule picks on the validation"
        " days (ens.: the ensemble; sK: the run of seed K, its one seed's episodes); shield:selected - PID: the mean"
        " daily gap in ANS and in CSR with its 95% paired bootstrap interval over the days"
        " (research/significance.py): an interval that spans 0 is a verdict one or two days could flip."
        " D*=0 days: days no bidder"
        " can reach the ROI target on (scored 1 if"
        " feasible, else 0)."
    )
    return "\n".join([f"# Market suite ({name})", "", *lines, "", legend, ""])


PLOTTED = ("pid", "cbrl", "shield:cbrl", "ensemble:cbrl", "shield:ensemble:cbrl")
"""The methods :func:`plot` draws, in this order."""


def plot(root: Path, png: Path) -> None:
    """ANS (top) and CSR (bottom) per market, one panel per (setting, split) of test and OOD, a bar per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found: dict[str, dict[str, dict[str, Any]]] = {}
    for market, setting, split, summary in summaries(root):
        if split in ("test", "ood"):
            found.setdefault(f"{setting.upper()} {split}", {})[market] = summary
    if not found:
        raise ValueError(f"{root}: no test or OOD summary.json to plot")
    panels = sorted(found)
    fig, axes = plt.subplots(2, len(panels), figsize=(5.5 * len(panels), 6.5), squeeze=False)
    width = 0.8 / len(PLOTTED)
    for col, panel in enumerate(panels):
        markets = sorted(found[panel])
        for row, (metric, label) in enumerate((("ans_median", "ANS (median over seeds)"), ("csr", "CSR (mean)"))):
            ax = axes[row][col]
            for k, method in enumerate(PLOTTED):
                values = [found[panel][m].get(method, {}).get(metric, float("nan")) for m in markets]
                ax.bar(
                    [i + (k - (len(PLOTTED) - 1) / 2) * width for i in range(len(markets))], values, width, label=method
                )
            ax.set_xticks(range(len(markets)), markets, rotation=20)
            ax.set_ylim(0, 1.05)
            ax.set_ylabel(label)
            if row == 0:
                ax.set_title(panel)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(PLOTTED), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m research.suite_report", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="research/scripts/suite.sh's OUT (e.g. out/suite)")
    parser.add_argument("--plot", type=Path, help="also draw the ANS and CSR bars into this PNG")
    parser.add_argument("--name", default="CBRL", help="the trained method's name in the headers (default CBRL)")
    args = parser.parse_args(argv)
    if not args.out_dir.is_dir():
        print(f"{args.out_dir}: no such directory (run research/scripts/suite.sh first)", file=sys.stderr)
        return 2
    print(table(args.out_dir, args.name))
    if args.plot:
        plot(args.out_dir, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
