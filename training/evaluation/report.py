"""The evaluation report: per-seed metrics, a paper-style Markdown table, and the paper's two kinds of plots.

Input is what :func:`training.evaluation.evaluate.evaluate` produces for one (market, split, setting):

* ``episodes``: one row per (method, seed, day) with ``delivery``, ``cost``, ``roi_target`` (L),
  ``budget`` (B, ``inf`` for none) and ``oracle_delivery`` (D*); other columns are carried along unused,
  because every number here is recomputed with :mod:`training.replay.metrics` so the report cannot drift from it.
* ``summary``: method -> ``ans_median, ans_mean, csr, csr_median, andr, andr_median, gmetric, n_episodes,
  n_seeds`` (medians and means over seeds of per-seed metrics).
* ``meta``: ``market, split, setting, seeds, command, tuned, created``.

Outputs mirror the paper's Sec. 4.2: Fig. 5 ("Each boxplot shows the average (red) and median (black)
results of 20 independent repeated runs") becomes :func:`plot_boxplots`, and Fig. 8 ("The histogram of
ROI difference [...] against the required constraint, with step 0.05") becomes :func:`plot_roi_histograms`.
Every table states the split, the setting, the number of seeds, and whether a figure is a median or a mean
(docs/metrics.md), so no figure is read out of its context.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from training.replay.metrics import DEFAULT_GAMMA, is_feasible, roi, summarize

# matplotlib is imported where a figure is drawn (its import costs more than the tables): an evaluation written
# with plots=False, and the tables alone, never load it.
if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

METRIC_COLUMNS = ("ans", "csr", "andr", "gmetric")
"""What :func:`per_seed_metrics` computes per (method, seed)."""

REQUIRED_COLUMNS = ("method", "seed", "delivery", "cost", "roi_target", "oracle_delivery")
"""Columns :func:`per_seed_metrics` and the plots need; ``budget`` is optional (missing means no budget)."""

ROI_DIFF_RANGE = (-1.0, 2.0)
"""Clip of the relative ROI difference ``(ROI - L) / L`` in the histograms.

``-1`` is no clip at all (ROI >= 0); ``+2`` (three times the target) keeps the x-axis readable when a
method barely spends, at the price of piling everything beyond it into the last bin.
"""

ROI_DIFF_STEP = 0.05
"""Histogram bin width: the paper's Fig. 8 uses step 0.05."""

MISSING = "—"
"""What the Markdown table shows for ``nan`` (e.g. ANDR of a method with no feasible episode)."""

LONG_LIST = 6
"""Hyperparameter lists longer than this (a 48-slot ``traffic_profile``) are shown by their length only."""

# Colours: the paper's Fig. 5 marks the mean red and the median black; Fig. 9 draws feasible days blue and
# infeasible ones orange, which the ROI histograms reuse.
MEAN_COLOR = "red"
MEDIAN_COLOR = "black"
FEASIBLE_COLOR = "tab:blue"
INFEASIBLE_COLOR = "tab:orange"


# --------------------------------------------------------------------------------------------------------------
# Per-seed metrics
# --------------------------------------------------------------------------------------------------------------


def _check_columns(episodes: pd.DataFrame) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in episodes.columns]
    if missing:
        raise ValueError(f"episodes lack column(s) {missing}; have {list(episodes.columns)}")


def _budget(episodes: pd.DataFrame) -> np.ndarray:
    """Each episode's budget, ``inf`` where there is none (the SC setting may omit the column)."""
    if "budget" not in episodes.columns:
        return np.full(len(episodes), np.inf)
    return episodes["budget"].to_numpy(dtype=np.float64)


def _methods(episodes: pd.DataFrame) -> list[str]:
    """Methods in order of first appearance: the order evaluate.py ran them in, which the plots keep."""
    return [str(m) for m in pd.unique(episodes["method"])]


def _zero_oracle_csr(summary: Mapping[str, Mapping[str, Any]]) -> str:
    """``method a.aaa, ...``: each method's feasible share on the days whose oracle delivers nothing."""
    cells = [
        f"`{_cell(str(method))}` {_number(row.get('csr_zero_oracle'), 3)}"
        for method, row in summary.items()
        if row.get("n_zero_oracle")
    ]
    return ", ".join(cells) or MISSING


def per_seed_metrics(episodes: pd.DataFrame, gamma: float = DEFAULT_GAMMA) -> pd.DataFrame:
    """One row per (method, seed): ``ans, csr, andr`` (percent; ``nan`` if none feasible), ``gmetric``, ``n_episodes``.

    Each seed's metrics are over its days, computed by :func:`training.replay.metrics.summarize`; these are the
    per-seed values the paper's Fig. 5 boxplots are drawn over. Methods keep their order of first
    appearance, seeds are ascending.
    """
    _check_columns(episodes)
    columns = ["method", "seed", *METRIC_COLUMNS, "n_episodes"]
    budget = _budget(episodes)
    rows: list[dict[str, Any]] = []
    for method in _methods(episodes):
        of_method = episodes["method"].astype(str) == method
        for seed in sorted(pd.unique(episodes.loc[of_method, "seed"])):
            mask = (of_method & (episodes["seed"] == seed)).to_numpy()
            runs = episodes.loc[mask]
            metrics = summarize(
                delivery=runs["delivery"].to_numpy(dtype=np.float64),
                cost=runs["cost"].to_numpy(dtype=np.float64),
                roi_target=runs["roi_target"].to_numpy(dtype=np.float64),
                budget=budget[mask],
                oracle_delivery=runs["oracle_delivery"].to_numpy(dtype=np.float64),
                gamma=gamma,
            )
            rows.append({"method": method, "seed": int(seed), **metrics})
    return pd.DataFrame(rows, columns=columns)


# --------------------------------------------------------------------------------------------------------------
# Markdown table
# --------------------------------------------------------------------------------------------------------------


def _number(value: Any, decimals: int) -> str:
    """``value`` with fixed decimals, or :data:`MISSING` for ``nan``/``None`` (ANDR over no feasible episode)."""
    if value is None:
        return MISSING
    value = float(value)
    if math.isnan(value):
        return MISSING
    return f"{value:.{decimals}f}"


def _count(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return str(int(value))


def _cell(text: str) -> str:
    """Escape what would break a Markdown table cell (method names may be paths, never with pipes, but be safe)."""
    return text.replace("|", "\\|")


def _param(value: Any) -> str:
    """One hyperparameter, compactly: 4 significant digits for floats, long lists by their length only."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}={_param(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple, np.ndarray)):
        items = list(value)
        if len(items) > LONG_LIST:
            return f"[{len(items)} values]"
        return "[" + ", ".join(_param(v) for v in items) + "]"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.4g}"
    return str(value)


def _tuned_lines(tuned: Mapping[str, Mapping[str, Any]], methods: Sequence[str]) -> list[str]:
    """One bullet per tuned method, table order first, then any tuned method the table lacks."""
    ordered = [m for m in methods if m in tuned] + [m for m in tuned if m not in methods]
    lines = []
    for method in ordered:
        params = tuned[method]
        shown = ", ".join(f"{k}={_param(v)}" for k, v in params.items()) if params else "(defaults)"
        lines.append(f"- `{method}`: {shown}")
    return lines


def markdown_table(summary: Mapping[str, Mapping[str, Any]], meta: Mapping[str, Any]) -> str:
    """The paper-style results table (one row per method, in ``summary``'s order), with its context.

    Above the table: split, setting, seeds, that medians/means are over seeds, the market (every table
    states them: docs/metrics.md). Below it: the tuned hyperparameters per method and how the run was made.
    Ratios have 3 decimals, percents 1, and ``nan`` shows as :data:`MISSING`.
    """
    split, setting, seeds = meta.get("split", "?"), meta.get("setting", "?"), meta.get("seeds", "?")
    setting_text = str(setting).upper()
    header = (
        f"**Split** `{split}` · **setting** {setting_text} · **seeds** {seeds} — each seed's ANS/CSR/ANDR/G-metric "
        f"is over its episodes (days); medians and means are over seeds (deterministic methods and the hindsight "
        f"references play once). Market: `{meta.get('market', '?')}`."
    )
    gamma = meta.get("gmetric_gamma", DEFAULT_GAMMA)
    zero_oracle = max((int(row.get("n_zero_oracle", 0) or 0) for row in summary.values()), default=0)
    columns = [
        "method",
        "ANS median",
        "ANS mean",
        "CSR mean",
        "CSR median",
        "ANDR mean (%)",
        "G-metric",
        "episodes",
        "seeds",
    ]
    lines = [
        header,
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "|".join([":---"] + ["---:"] * (len(columns) - 1)) + "|",
    ]
    for method, row in summary.items():
        cells = [
            f"`{_cell(str(method))}`",
            _number(row.get("ans_median"), 3),
            _number(row.get("ans_mean"), 3),
            _number(row.get("csr"), 3),
            _number(row.get("csr_median"), 3),
            _number(row.get("andr"), 1),
            _number(row.get("gmetric"), 3),
            _count(row.get("n_episodes")),
            _count(row.get("n_seeds")),
        ]
        lines.append("| " + " | ".join(cells) + " |")

    lines += [
        "",
        "ANS: mean normalized delivery D/D* over episodes, 0 when infeasible; CSR: share of feasible episodes "
        "(ROI ≥ L and cost ≤ budget); ANDR: mean (D/D* − 1) over feasible episodes, "
        f'{MISSING} when none is; G-metric: USCB\'s, γ = {gamma:g} (paper appendix, "Evaluation Protocols").'
        + (
            f" {zero_oracle} episode(s) fall on days whose hindsight oracle delivers nothing (no bidder reaches L):"
            " D/D* counts as 1 there if the episode stayed feasible, else 0"
            f" (feasible share there: {_zero_oracle_csr(summary)})."
            if zero_oracle
            else ""
        ),
    ]
    tuned = meta.get("tuned") or {}
    if tuned:
        lines += ["", "Tuned hyperparameters:", "", *_tuned_lines(tuned, [str(m) for m in summary])]
    provenance = []
    if meta.get("command"):
        provenance.append(f"command `{meta['command']}`")
    if meta.get("created"):
        provenance.append(f"created {meta['created']}")
    if provenance:
        lines += ["", "Made by " + ", ".join(provenance) + "."]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------------------------------


def _new_figure(width: float, height: float) -> Figure:
    """A figure on the Agg canvas, made without pyplot so no global backend or figure registry is touched."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    return figure


def _labels(methods: Sequence[str], limit: int = 22) -> list[str]:
    """Short tick labels: a run directory or ``onnx:MODEL_DIR`` by its last path part, long names cut in the middle.

    Falls back to the full names when shortening would make two labels equal (the table has the full names).
    """

    def short(name: str) -> str:
        if len(name) <= limit:
            return name
        stem = Path(name.removeprefix("onnx:")).name or name
        prefix = "onnx:" if name.startswith("onnx:") else ""
        text = prefix + stem
        if len(text) > limit:
            keep = (limit - 1) // 2
            text = text[:keep] + "…" + text[-(limit - 1 - keep) :]
        return text

    shortened = [short(m) for m in methods]
    return shortened if len(set(shortened)) == len(shortened) else list(methods)


def _method_ticks(ax: Axes, labels: Sequence[str]) -> None:
    """Method names under the boxes, slanted when they would collide (many methods or long names)."""
    positions = np.arange(1, len(labels) + 1)
    slanted = len(labels) > 4 or max(len(s) for s in labels) > 8
    ax.set_xticks(positions)
    if slanted:
        ax.set_xticklabels(labels, rotation=35, ha="right", rotation_mode="anchor")
    else:
        ax.set_xticklabels(labels)


def _title_and_legend(figure: Figure, handles: Sequence[Any], title: str) -> None:
    """The title on top and the figure's one legend centred under the panels, where it covers no data.

    Saved with ``bbox_inches="tight"``, so neither is clipped however narrow the figure or long the title.
    """
    figure.suptitle(title, x=0.01, ha="left")
    figure.tight_layout(rect=(0, 0.08, 1, 1))  # the bottom strip is the legend's
    figure.legend(
        handles=handles,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=len(handles),
        fontsize=8,
        frameon=False,
    )


def plot_boxplots(episodes: pd.DataFrame, path: Path, title: str) -> None:
    """The paper's Fig. 5: ANS, CSR and ANDR (left to right), one box per method over its per-seed values.

    Each box is over seeds (each seed's metric is over its days); the mean is the red diamond, the median
    the black line, and every seed is a grey dot so a single seed or identical seeds (a box collapsed to
    a line) still shows its value. A method with no feasible episode in any seed has no ANDR: its slot
    says "n/a". ANDR is over the seeds that have one.
    """
    per_seed = per_seed_metrics(episodes)
    if per_seed.empty:
        raise ValueError("no episodes to plot")
    methods = _methods(episodes)
    labels = _labels(methods)
    panels = [
        ("ans", "ANS", "ANS (per seed)"),
        ("csr", "CSR", "CSR (per seed)"),
        ("andr", "ANDR (%)", "ANDR, % (per seed; feasible episodes only)"),
    ]
    panel_width = max(3.6, 0.45 * len(methods) + 1.6)
    figure = _new_figure(3 * panel_width, 4.6)
    axes = figure.subplots(1, 3)
    jitter = np.random.default_rng(0)  # fixed, so the same report draws the same picture
    for ax, (column, ylabel, panel_title) in zip(axes, panels, strict=True):
        values = [per_seed.loc[per_seed["method"] == m, column].dropna().to_numpy() for m in methods]
        drawn = [i for i, v in enumerate(values) if v.size]
        if drawn:
            ax.boxplot(
                [values[i] for i in drawn],
                positions=[i + 1 for i in drawn],
                widths=0.55,
                showmeans=True,
                meanprops={
                    "marker": "D",
                    "markerfacecolor": MEAN_COLOR,
                    "markeredgecolor": MEAN_COLOR,
                    "markersize": 6,
                },
                medianprops={"color": MEDIAN_COLOR, "linewidth": 1.8},
                showfliers=False,  # every seed is drawn as a dot anyway; outliers would show twice
                manage_ticks=False,
            )
        for i, v in enumerate(values):
            if v.size:
                x = i + 1 + jitter.uniform(-0.12, 0.12, v.size)
                ax.scatter(x, v, s=10, color="0.45", alpha=0.7, zorder=3, linewidths=0)
            else:
                ax.text(i + 1, 0.5, "n/a", transform=ax.get_xaxis_transform(), ha="center", va="center", color="0.4")
        if column in ("ans", "csr"):
            # Both are shares in [0, 1] (ANS can exceed 1 only where a feasible day beats the oracle).
            top = max(1.0, max((float(v.max()) for v in values if v.size), default=1.0))
            ax.set_ylim(-0.04, top + 0.04)
        else:
            ax.axhline(0.0, color="0.6", lw=0.8, ls="--", zorder=0)
        ax.set_xlim(0.4, len(methods) + 0.6)
        _method_ticks(ax, labels)
        ax.set_ylabel(ylabel)
        ax.set_title(panel_title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    # One legend for the whole figure: what the markers mean (the paper's caption says it in words).
    handles = [
        axes[0].plot([], [], "D", color=MEAN_COLOR, label="mean over seeds")[0],
        axes[0].plot([], [], "-", color=MEDIAN_COLOR, lw=1.8, label="median over seeds")[0],
        axes[0].plot([], [], "o", color="0.45", markersize=3, label="one seed")[0],
    ]
    _title_and_legend(figure, handles, title)
    figure.savefig(path, dpi=110, bbox_inches="tight", pad_inches=0.15)


def _relative_roi_difference(delivery: np.ndarray, cost: np.ndarray, roi_target: np.ndarray) -> np.ndarray:
    """``(ROI - L) / L`` per episode that spent something, clipped to :data:`ROI_DIFF_RANGE`.

    Relative to L so that days with different targets (the MC setting) share one axis; a zero target
    makes any ROI an (infinite) surplus, clipped like the rest.
    """
    ratio = roi(delivery, cost)
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.where(roi_target > 0, (ratio - roi_target) / roi_target, np.inf)
    return np.clip(relative, *ROI_DIFF_RANGE)


def plot_roi_histograms(episodes: pd.DataFrame, path: Path, title: str) -> None:
    """The paper's Fig. 8: per method, the histogram of its episodes' ROI difference against the target.

    The x-axis is ``(ROI - L) / L`` clipped to :data:`ROI_DIFF_RANGE` (bins of 0.05 as in the paper), with
    a line at 0, the ROI constraint. Bars are stacked by feasibility (blue feasible, orange not; an MC
    episode can meet L and still overspend its budget). Episodes that spent nothing have no ROI
    difference to draw: they are left out and counted in the panel title. The feasible share is over
    all the method's episodes, every seed pooled.
    """
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    _check_columns(episodes)
    if episodes.empty:
        raise ValueError("no episodes to plot")
    methods = _methods(episodes)
    labels = _labels(methods, limit=34)
    n_cols = min(len(methods), 3)
    n_rows = math.ceil(len(methods) / n_cols)
    figure = _new_figure(4.2 * n_cols, 3.0 * n_rows + 0.5)
    axes = np.atleast_1d(figure.subplots(n_rows, n_cols, sharex=True, squeeze=False)).ravel()
    low, high = ROI_DIFF_RANGE
    bins = np.linspace(low, high, round((high - low) / ROI_DIFF_STEP) + 1)
    budget = _budget(episodes)
    for ax, method, label in zip(axes, methods, labels, strict=False):
        mask = (episodes["method"].astype(str) == method).to_numpy()
        runs = episodes.loc[mask]
        delivery = runs["delivery"].to_numpy(dtype=np.float64)
        cost = runs["cost"].to_numpy(dtype=np.float64)
        target = runs["roi_target"].to_numpy(dtype=np.float64)
        # Recomputed with training.replay.metrics so the share matches the CSR of the table.
        feasible = is_feasible(delivery, cost, target, budget[mask])
        spent = cost > 0
        # training.replay.metrics refuses empty inputs, and a method that never spent has nothing to draw.
        difference = (
            _relative_roi_difference(delivery[spent], cost[spent], target[spent]) if spent.any() else np.empty(0)
        )
        # Counted here and drawn as two filled step outlines (infeasible stacked on feasible): the same
        # picture as a stacked bar histogram at a fraction of the drawing time of one patch per bar.
        feasible_counts, _ = np.histogram(difference[feasible[spent]], bins=bins)
        infeasible_counts, _ = np.histogram(difference[~feasible[spent]], bins=bins)
        ax.stairs(feasible_counts, bins, fill=True, color=FEASIBLE_COLOR)
        ax.stairs(
            feasible_counts + infeasible_counts, bins, baseline=feasible_counts, fill=True, color=INFEASIBLE_COLOR
        )
        ax.axvline(0.0, color="black", lw=1.0)
        # Counts and the feasible share go in the title rather than on the axes, where they could hide the
        # bars piled up at the clip.
        zero_cost = int((~spent).sum())
        counts = f"feasible {int(feasible.sum())}/{len(runs)} ({float(feasible.mean()):.0%})"
        if zero_cost:
            counts += f" · {zero_cost} with cost 0 not drawn"
        ax.set_title(f"{label}\n{counts}", fontsize=9)
        if not spent.any():
            ax.text(0.5, 0.5, "no episode spent anything", transform=ax.transAxes, ha="center", color="0.4")
            ax.set_ylim(0.0, 1.0)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # episode counts
        ax.set_ylabel("episodes")
        ax.set_xlim(low, high)
        ax.grid(axis="y", alpha=0.3)
    for ax in axes[len(methods) :]:
        ax.set_visible(False)
    # sharex leaves tick labels only on the bottom row; label that row's visible axes (and any axis with no
    # visible one under it, when the last row is partly empty).
    for index, ax in enumerate(axes[: len(methods)]):
        if index + n_cols >= len(methods):
            ax.set_xlabel(f"(ROI − L) / L, clipped to [{low:g}, {high:g}]")
            ax.tick_params(labelbottom=True)
    # One legend for the figure, out of the panels' way.
    legend = [Patch(color=FEASIBLE_COLOR, label="feasible"), Patch(color=INFEASIBLE_COLOR, label="infeasible")]
    _title_and_legend(figure, legend, title)
    figure.savefig(path, dpi=110, bbox_inches="tight", pad_inches=0.15)


# --------------------------------------------------------------------------------------------------------------
# All of it
# --------------------------------------------------------------------------------------------------------------


def _seeds(count: Any) -> str:
    return "1 seed" if count == 1 else f"{count} seeds"


def write_report(
    episodes: pd.DataFrame,
    summary: Mapping[str, Mapping[str, Any]],
    meta: Mapping[str, Any],
    out_dir: Path,
    plots: bool = True,
) -> dict[str, Path]:
    """Write ``summary.md``, ``boxplots.png`` and ``roi_hist.png`` into ``out_dir`` (the PNGs only with ``plots``);
    return them by stem.

    Keys: ``"markdown"``, ``"boxplots"``, ``"roi_hist"`` (not ``"summary"``: evaluate.py uses it for summary.json).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    title = (
        f"{str(meta.get('setting', '?')).upper()} · {meta.get('split', '?')} split · {_seeds(meta.get('seeds', '?'))}"
    )
    paths = {"markdown": out_dir / "summary.md"}
    paths["markdown"].write_text(f"# Evaluation: {title}\n\n" + markdown_table(summary, meta), encoding="utf-8")
    boxplots, roi_hist = out_dir / "boxplots.png", out_dir / "roi_hist.png"
    if plots:
        paths["boxplots"], paths["roi_hist"] = boxplots, roi_hist
        plot_boxplots(episodes, boxplots, f"ANS, CSR, ANDR per method over seeds — {title}")
        plot_roi_histograms(episodes, roi_hist, f"ROI difference against the target — {title}")
    else:  # an earlier run's plots must not sit beside these figures
        boxplots.unlink(missing_ok=True)
        roi_hist.unlink(missing_ok=True)
    return paths
