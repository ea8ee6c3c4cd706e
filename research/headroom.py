"""What knowing the day's regime is worth: a reference for posterior inference on a generated market.

CBRL's posterior infers the day's latent market regime from what a campaign has won so far, and its policy
(by default a residual on the tuned PID) bids on that belief. How much could such inference gain at most on
a market? This tool tells bidders the **regime** of each day they play, everything the generator drew for
the day (price level and intraday path, conversion scale, traffic scale, shocks) except the impression-level
draws, and plays them on the real days beside the PID. The regime holds the slots still to come, so it is
more than any causal posterior can learn (though a closed-loop learner may still beat these open-loop forms: on
one suite market the CBRL ensemble did). Per day, ``twins`` twin days (64 by default;
:func:`training.market.generator.generate_twin`: the day's regime, fresh impressions) stand for what the regime lets
one expect:

* ``informed-constant@m``: the constant ratio of ``ORACLE_GRID`` with the most delivery on average over the
  twins, counting a twin's delivery only where its ROI reaches ``L * (1 + m)`` (and its budget, spent slot by
  slot, lasts; a slot's last share pro rata);
* ``informed-pid@m``: the tuned PID (the bar's reference) started at that ratio instead of its tuned one;
* ``informed-from-t@m``: the tuned PID until slot ``t``, then ``informed-constant@m``: the regime learned at slot
  ``t`` (``--from-slots``), an upper reference for a campaign that can only learn it from its own stats by then;
* ``hindsight-constant``: the day's own best constant ratio, ``rcb evaluate``'s ``oracle-day`` (it knows the
  impressions' luck too);
* ``pid`` and ``rm``, tuned on the train days as ``rcb evaluate`` tunes them.

Every row is played on the real days by the simulator (budgets included) and scored as ``rcb evaluate``
scores: the rows and the episodes (``episodes.csv``) compare with its outputs, and ``--learned`` puts a
learned method's episodes from ``rcb evaluate`` on the plot. **Headroom** is the best ``informed-pid`` ANS
among the margins whose CSR is at least the PID's, minus the PID's ANS: chosen on the played days
themselves, an upper reference, not a bidder::

    python -m research.headroom data/suite/sparse --setting sc --split test --out out/headroom/sparse-test

Generated markets only (the manifest's ``source.config`` must redraw the stored days; imported logs have no
regime to tell). Deterministic: twin ``k`` of day ``d`` is ``default_rng([seed, d, 2, k])`` (``--first-twin``
shifts ``k``: another set of twins, to see how much the informed rows move with them).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Annotated, Any, ClassVar

import numpy as np
import pandas as pd
import typer
from rich.progress import Progress

from model.contract import SLOTS_PER_DAY, Setting
from model.history import History, Registration
from model.roi import is_feasible
from research.conversion_bayes import BayesConversion, _day_twins, bayes_prior
from training.bidders.base import Bidder, play
from training.bidders.pid import PID
from training.bidders.rm import ConstantRatio
from training.bidders.tuned import tuned_baseline
from training.evaluation.evaluate import EvaluationError, episode_rows, split_days, summarize
from training.market.dataset import Market, MarketError
from training.market.generator import REGIME_PARTS, MarketConfig, generate_day, generate_twin
from training.replay.dayset import DaySet
from training.replay.oracle import ORACLE_GRID, OracleKind, market_oracle
from training.replay.oracle.oracles import slot_curves
from training.replay.simulator import DayIndex, SlotResult

MARGINS = (0.0, 0.05, 0.1, 0.2, 0.3)
"""ROI margins of the informed rows: the ratio is chosen for ``L * (1 + m)`` on the twins (a CSR-ANS frontier)."""
TWINS = 64
"""Twin days per played day. 8 were too few on the ``sparse`` market: over eight disjoint sets of 8 twins the
informed constant ratio's gain over PID on its test days ranged from +0.009 to +0.059; 64 gave +0.028 (RESULTS.md).
The cost grows with it: 64 twins of a 200,000-impression day took 2.4 s here (AMD EPYC, one core);
``--workers`` spreads the days over processes (BENCHMARKS.md)."""
FROM_SLOTS = (0, 3, 8, 16, 24, 33, 40)
"""Slots at which ``informed-from`` rows are told the regime (the PID bids before)."""
REFERENCE = "pid"
FAMILY_ONLY = "family"
"""``--know family``: twins are other days of the day's family (ID or OOD): no part of the day's own regime."""
SPLITS = ("train", "test", "ood")


def informed(kind: str, margin: float) -> str:
    return f"informed-{kind}@{margin:g}"


def informed_from(slot: int, margin: float) -> str:
    return f"informed-from-{slot}@{margin:g}"


class SwitchAt(Bidder):
    """The PID until slot ``switch``, then a constant ratio: what the day's regime is worth when it is learned then."""

    name: ClassVar[str] = "informed-from"
    deterministic: ClassVar[bool] = True  # type: ignore[misc]

    def __init__(self, before: PID, ratio: np.ndarray, switch: np.ndarray):
        self.before, self.ratio, self.switch = before, np.asarray(ratio, float), np.asarray(switch, int)

    def start(self, registration: Registration, seed: int) -> None:
        self.before.start(registration, seed)

    def bid(self, history: History) -> np.ndarray:
        controlled = self.before.bid(history)  # always asked, so its state runs on as the PID's would
        return np.where(history.slot >= self.switch, self.ratio, controlled)

    def on_result(self, history: History, result: SlotResult) -> None:
        self.before.on_result(history, result)


def budgeted_totals(delivery: np.ndarray, cost: np.ndarray, budget: float) -> tuple[np.ndarray, np.ndarray]:
    """Day totals per ratio of slot curves ``(T, G)`` when the budget is spent slot by slot (the last slot's share
    pro rata): what a constant ratio delivers and costs over the day with a budget."""
    if not np.isfinite(budget):
        return delivery.sum(axis=0), cost.sum(axis=0)
    before = np.cumsum(cost, axis=0) - cost
    share = np.clip(np.divide(budget - before, cost, out=np.ones_like(cost), where=cost > 0), 0.0, 1.0)
    share = np.where(before >= budget, 0.0, share)
    return (share * delivery).sum(axis=0), (share * cost).sum(axis=0)


def best_constant(delivery: np.ndarray, cost: np.ndarray, roi_target: float, margin: float) -> float:
    """The ratio of ``ORACLE_GRID`` with the most mean delivery over ``(K, G)`` day totals, a day's delivery counted
    where its ROI reaches ``roi_target * (1 + margin)``; ties (and nothing feasible) to the smaller ratio."""
    feasible = is_feasible(delivery, cost, roi_target * (1.0 + margin))
    expected = np.where(feasible & (delivery > 0), delivery, 0.0).mean(axis=0)
    return float(ORACLE_GRID[int(np.argmax(expected))])


def check_generated(market: Market, days: DaySet) -> MarketConfig:
    """The generator config that drew ``market``; refuses a market whose stored days it does not redraw."""
    source = market.source or {}
    config = source.get("config")
    if source.get("kind") != "synthetic" or not isinstance(config, dict):
        raise EvaluationError(f"{market.root}: not a generated market (no generator config to redraw its regimes from)")
    try:
        generator = MarketConfig.from_dict(config)
    except (TypeError, ValueError) as exc:
        raise EvaluationError(
            f"{market.root}: the manifest's generator config is not one this version reads ({exc})"
        ) from None
    entry, stored = days.entries[0], days.logs[0]
    redrawn, _ = generate_day(entry.day, entry.split == "ood", generator)
    if not (np.array_equal(redrawn.utility, stored.utility) and np.array_equal(redrawn.delivery, stored.delivery)):
        raise EvaluationError(f"{market.root}: day {entry.day} is not what the manifest's generator config draws")
    return generator


def twin_totals(
    day: int, ood: bool, generator: MarketConfig, twins: range, known: tuple[str, ...], budget: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(K, G)`` day totals (delivery, cost) of each constant ratio of ``ORACLE_GRID`` on each twin of a day."""
    totals = [
        budgeted_totals(*slot_curves(DayIndex(generate_twin(day, ood, generator, k, known))), budget) for k in twins
    ]
    return np.stack([d for d, _ in totals]), np.stack([c for _, c in totals])


def _twin_totals(args: tuple[int, bool, MarketConfig, range, tuple[str, ...], float]) -> tuple[np.ndarray, np.ndarray]:
    return twin_totals(*args)


def in_processes(stack: contextlib.ExitStack, fn: Callable[[Any], Any], jobs: list[Any], workers: int) -> Iterator[Any]:
    """``map(fn, jobs)``, in ``workers`` spawned processes when ``workers`` > 1 (closed with ``stack``)."""
    if workers <= 1:
        return map(fn, jobs)
    # spawn, as the generator does: a forked child inherits HiGHS's thread pool without its threads
    pool = stack.enter_context(
        ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    )
    return pool.map(fn, jobs)


def informed_ratios(
    days: DaySet,
    generator: MarketConfig,
    twins: int,
    known: tuple[str, ...] = tuple(REGIME_PARTS),
    tick: Callable[[], None] | None = None,
    first_twin: int = 0,
    workers: int = 1,
) -> dict[float, np.ndarray]:
    """Per margin, each day's informed constant ratio (chosen on its twins ``first_twin .. first_twin + twins - 1``,
    which keep the ``known`` parts of the day's regime). ``workers`` > 1 draws the
    days' twins in that many processes (the same answer)."""
    chosen = {m: np.empty(len(days)) for m in MARGINS}
    jobs = [
        (e.day, e.split == "ood", generator, range(first_twin, first_twin + twins), known, float(days.budget[i]))
        for i, e in enumerate(days.entries)
    ]
    with contextlib.ExitStack() as stack:
        results = in_processes(stack, _twin_totals, jobs, workers)
        for i, (delivery, cost) in enumerate(results):
            roi_target = float(days.roi_target[i])
            for m in MARGINS:
                chosen[m][i] = best_constant(delivery, cost, roi_target, m)
            if tick:
                tick()
    return chosen


def signal_rates(days: DaySet, ratios: np.ndarray) -> dict[str, float]:
    """Median over days of the wins and the delivering wins per slot at ``ratios`` (one per day): how fast what a
    bidder wins reveals the market part of the regime (every win and loss) and its conversion part (deliveries)."""
    wins, delivering = [], []
    for log, ratio in zip(days.logs, ratios, strict=True):
        won = ratio * log.utility > log.market_price  # the simulator's rule
        wins.append(won.sum() / SLOTS_PER_DAY)
        delivering.append((won & (log.delivery > 0)).sum() / SLOTS_PER_DAY)
    return {"wins_per_slot": float(np.median(wins)), "delivering_wins_per_slot": float(np.median(delivering))}


def play_rows(label_of: list[str], bidder: Bidder, days: DaySet) -> pd.DataFrame:
    """Play ``bidder`` on ``len(label_of)`` copies of the days at once (episode ``j * n + i``: copy j, day i)."""
    n = len(days)
    outcome = play(bidder, days.indexes(), days.episode_days(len(label_of)), days.registration(len(label_of)), 0)
    return pd.concat(
        [
            episode_rows(label, 0, days, outcome.delivery[j * n : (j + 1) * n], outcome.cost[j * n : (j + 1) * n])
            for j, label in enumerate(label_of)
        ],
        ignore_index=True,
    )


def headroom(
    data: Path,
    setting: Setting,
    split: str,
    twins: int = TWINS,
    known: tuple[str, ...] = tuple(REGIME_PARTS),
    progress: Progress | None = None,
    from_slots: tuple[int, ...] = FROM_SLOTS,
    first_twin: int = 0,
    workers: int = 1,
    bayes: bool = False,
    bayes_market_told: bool = True,
) -> tuple[pd.DataFrame, dict[str, dict[str, Any]], dict[str, Any]]:
    """The episodes, the summary (``training.evaluation.evaluate.summarize`` per row) and the headroom figures; the
    informed
    bidders know the ``known`` parts of each day's regime (:data:`training.market.generator.REGIME_PARTS`), the
    ``informed-from`` rows from each of ``from_slots`` on; ``bayes`` adds the ``bayes@m`` rows
    (:mod:`research.conversion_bayes`, SC)."""
    if split not in SPLITS:
        raise EvaluationError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    if bayes and setting != Setting.SC:
        raise EvaluationError("the bayes rows play SC only (the reference has no budget pacing)")
    market = Market.open(data)
    days, train = split_days(market, split, setting)
    generator = check_generated(market, days)
    task = progress.add_task(f"twins ({twins} a day)", total=len(days)) if progress else None
    chosen = informed_ratios(
        days,
        generator,
        twins,
        known,
        (lambda: progress.advance(task)) if progress and task is not None else None,
        first_twin,
        workers,
    )
    pid, _ = tuned_baseline(market, REFERENCE, setting, train)
    rm, _ = tuned_baseline(market, "rm", setting, train)
    assert isinstance(pid, PID)
    frames = [play_rows([REFERENCE], pid, days), play_rows(["rm"], rm, days)]
    # The day-wise hindsight oracle, cached beside the market as rcb evaluate's oracle-day reads it.
    day_oracle = market_oracle(market, setting, kind=OracleKind.DAY, days=days.days)
    hindsight = np.array([answer.ratios[0] for answer in day_oracle])
    frames.append(play_rows(["hindsight-constant"], ConstantRatio(hindsight), days))
    stacked = np.concatenate([chosen[m] for m in MARGINS])
    frames.append(play_rows([informed("constant", m) for m in MARGINS], ConstantRatio(stacked), days))
    gains = {k: np.broadcast_to(v, stacked.shape) for k, v in pid.gains.items()} | {"initial_ratio": stacked}
    frames.append(play_rows([informed("pid", m) for m in MARGINS], PID(pid.profile, **gains), days))
    if from_slots:
        n = len(days)
        switch = np.repeat(np.asarray(from_slots), len(MARGINS) * n)
        late = SwitchAt(PID(pid.profile, **pid.gains), np.tile(stacked, len(from_slots)), switch)
        frames.append(play_rows([informed_from(t, m) for t in from_slots for m in MARGINS], late, days))
    if bayes:
        frames.append(
            play_rows(
                [bayes_row(m) for m in MARGINS],
                bayes_bidder(days, generator, first_twin, twins, workers, bayes_market_told),
                days,
            )
        )
    episodes = pd.concat(frames, ignore_index=True)
    methods = list(dict.fromkeys(episodes["method"]))
    summary = summarize(episodes, methods)
    figures = {kind: frontier_gain(summary, [informed(kind, m) for m in MARGINS]) for kind in ("pid", "constant")} | {
        "market": str(data),
        "split": split,
        "setting": str(setting),
        "twins": twins,
        "first_twin": first_twin,
        "days": len(days),
        "known": list(known),
        "at_hindsight_ratio": signal_rates(days, hindsight),
        "from_slot": {str(t): frontier_gain(summary, [informed_from(t, m) for m in MARGINS]) for t in from_slots},
    }
    if bayes:
        figures["bayes"] = frontier_gain(summary, [bayes_row(m) for m in MARGINS])
        figures["bayes_market_told"] = bayes_market_told
    return episodes, summary, figures


def bayes_row(margin: float) -> str:
    return f"bayes@{margin:g}"


def bayes_bidder(
    days: DaySet, generator: MarketConfig, first_twin: int, twins: int, workers: int, market_told: bool = True
) -> BayesConversion:
    """:class:`BayesConversion` on ``len(MARGINS)`` copies of the days (copy j at margin ``MARGINS[j]``); told each
    day's market part, or not (``market_told``: twins of other markets of the family)."""
    twin_range = range(first_twin, first_twin + twins)
    jobs = [(e.day, e.split == "ood", generator, twin_range, market_told) for e in days.entries]
    with contextlib.ExitStack() as stack:
        per_day = list(in_processes(stack, _day_twins, jobs, workers))
    return BayesConversion(per_day * len(MARGINS), np.repeat(MARGINS, len(days)), *bayes_prior(generator))


def frontier_gain(summary: dict[str, dict[str, Any]], rows: list[str]) -> dict[str, Any]:
    """The best of ``rows`` by ANS among those with CSR >= the PID's, and its ANS gain over the PID (None if none)."""
    floor = summary[REFERENCE]["csr"] - 1e-9
    eligible = [r for r in rows if summary[r]["csr"] >= floor]
    if not eligible:
        return {"row": None, "gain": None}
    best = max(eligible, key=lambda r: summary[r]["ans_median"])
    return {"row": best, "gain": summary[best]["ans_median"] - summary[REFERENCE]["ans_median"]}


def parse_learned(specs: list[str]) -> list[tuple[str, Path]]:
    """``METHOD@EPISODES_CSV`` -> (method, path), split at the last ``@``."""
    parsed = []
    for spec in specs:
        method, sep, path = spec.rpartition("@")
        if not sep or not method or not path:
            raise typer.BadParameter(f"{spec!r}: expected METHOD@EPISODES_CSV")
        parsed.append((method, Path(path)))
    return parsed


def learned_points(specs: list[tuple[str, Path]], played_days: set[int]) -> dict[str, dict[str, Any]]:
    """Each learned method's summary from ``rcb evaluate``'s episodes (same market and split: the same days)."""
    out: dict[str, dict[str, Any]] = {}
    for method, path in specs:
        try:
            episodes = pd.read_csv(path)
        except (OSError, ValueError) as exc:
            raise typer.BadParameter(f"{path}: cannot read episodes ({exc})") from None
        rows = episodes[episodes["method"] == method] if "method" in episodes else episodes.iloc[:0]
        if rows.empty:
            there = ", ".join(map(str, episodes["method"].unique())) if "method" in episodes else "none"
            raise typer.BadParameter(f"{path}: no episodes of {method!r} (methods there: {there})")
        if set(rows["day"]) != played_days:
            raise typer.BadParameter(f"{path}: {method!r} was played on other days than this split's")
        out[method] = summarize(rows, [method])[method]
    return out


def plot(
    summary: dict[str, dict[str, Any]],
    learned: dict[str, dict[str, Any]],
    title: str,
    path: Path,
    bayes_market_told: bool = True,
) -> None:
    """ANS against CSR: the informed frontiers over the margins, the references and the learned methods."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.2, 4.6))
    for kind, style in (("pid", "o-"), ("constant", "s--")):
        rows = [summary[informed(kind, m)] for m in MARGINS]
        ax.plot([r["csr"] for r in rows], [r["ans_median"] for r in rows], style, label=f"informed {kind} (m = 0..0.3)")
        for m, r in zip(MARGINS, rows, strict=True):
            ax.annotate(f"{m:g}", (r["csr"], r["ans_median"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    if bayes_row(0.0) in summary:
        rows = [summary[bayes_row(m)] for m in MARGINS]
        told = "market told" if bayes_market_told else "market not told"
        label = f"bayes: {told}, conversion learned (m = 0..0.3)"
        ax.plot([r["csr"] for r in rows], [r["ans_median"] for r in rows], "^-.", label=label)
    for name, marker in ((REFERENCE, "D"), ("rm", "v"), ("hindsight-constant", "*")):
        ax.plot(summary[name]["csr"], summary[name]["ans_median"], marker, markersize=9, label=name)
    for name, row in learned.items():
        ax.plot(row["csr"], row["ans_median"], "X", markersize=9, label=name)
    pid = summary[REFERENCE]
    ax.axhline(pid["ans_median"] + 0.03, color="grey", lw=0.8, ls=":", label="PID + 0.03 ANS")
    ax.axvline(pid["csr"], color="grey", lw=0.8, ls=":")
    ax.set_xlabel("CSR")
    ax.set_ylabel("ANS (median over seeds)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_by_slot(curves: dict[str, dict[str, Any]], title: str, path: Path) -> None:
    """U(t), the best ``informed-from-t`` gain over the PID at CSR >= PID's, against ``t``: one line per run's
    figures (``headroom.json``'s ``figures``); a margin with no row reaching the PID's CSR is drawn as a gap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.8, 4.2))
    for label, figures in curves.items():
        slots = sorted(figures["from_slot"], key=int)
        gains = [figures["from_slot"][t]["gain"] for t in slots]
        ax.plot([int(t) for t in slots], [np.nan if g is None else g for g in gains], "o-", label=label)
    ax.axhline(0.03, color="k", lw=0.8, ls=(0, (1, 3)), label="bar: PID + 0.03")
    ax.axhline(0.0, color="grey", lw=0.6)
    ax.set_xlabel("slot t at which the day's regime is told (PID before)")
    ax.set_ylabel("best ANS gain over PID at CSR >= PID's")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(
    data: Annotated[Path, typer.Argument(help="A generated market directory (rcb market generate).")],
    setting: Annotated[Setting, typer.Option(help="sc or mc.")] = Setting.SC,
    split: Annotated[str, typer.Option(help="train, test or ood.")] = "test",
    twins: Annotated[int, typer.Option(min=1, help="Twin days per played day.")] = TWINS,
    first_twin: Annotated[
        int, typer.Option(min=0, help="Index of the first twin stream: another set of twins, to see their spread.")
    ] = 0,
    workers: Annotated[int, typer.Option(min=0, help="Processes drawing the twins (0: one per CPU).")] = 0,
    out: Annotated[Path | None, typer.Option(help="Folder for headroom.json, episodes.csv and headroom.png.")] = None,
    learned: Annotated[
        list[str] | None, typer.Option(help="METHOD@EPISODES_CSV from rcb evaluate, drawn beside (repeat).")
    ] = None,
    know: Annotated[
        list[str] | None,
        typer.Option(
            help="Parts of the regime the informed bidders know (repeat): market, conversion; 'family' alone: none, "
            "only which family the day's regime is drawn from. Default: all."
        ),
    ] = None,
    from_slots: Annotated[
        str, typer.Option(help="Slots at which the informed-from rows learn the regime, comma-separated ('' for none).")
    ] = ",".join(map(str, FROM_SLOTS)),
    bayes: Annotated[
        bool,
        typer.Option(help="Add the bayes@m rows (SC): the market told, the conversion scale learned by Bayes' rule."),
    ] = False,
    bayes_market: Annotated[
        bool,
        typer.Option(help="--no-bayes-market: the bayes rows are not told the market part (twins of other markets)."),
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    try:
        slots = tuple(int(x) for x in from_slots.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"--from-slots {from_slots!r}: expected slot numbers like 0,8,24") from None
    if any(not 0 <= t < SLOTS_PER_DAY for t in slots):
        raise typer.BadParameter(f"--from-slots {from_slots!r}: slots run from 0 to {SLOTS_PER_DAY - 1}")
    known = tuple(dict.fromkeys(know)) if know else tuple(REGIME_PARTS)
    if known == (FAMILY_ONLY,):
        known = ()
    if set(known) - set(REGIME_PARTS):
        raise typer.BadParameter(
            f"--know {', '.join(known)}: expected parts among {', '.join(REGIME_PARTS)}, or {FAMILY_ONLY} alone"
        )
    wanted = parse_learned(learned or [])
    if out is not None:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise typer.BadParameter(f"--out {out}: {exc.strerror or exc}") from None
    try:
        with Progress(transient=True, disable=as_json) as progress:
            episodes, summary, figures = headroom(
                data,
                setting,
                split,
                twins,
                known,
                progress,
                slots,
                first_twin,
                workers or os.cpu_count() or 1,
                bayes,
                bayes_market,
            )
    except (EvaluationError, MarketError) as exc:
        raise typer.BadParameter(str(exc)) from None
    others = learned_points(wanted, set(episodes["day"]))
    result = {"figures": figures, "summary": summary, "learned": others}
    if out is not None:
        episodes.to_csv(out / "episodes.csv", index=False)
        (out / "headroom.json").write_text(json.dumps(result, indent=1, default=float))
        title = f"{data.name} {setting} {split}: what knowing the day's regime is worth"
        plot(summary, others, title, out / "headroom.png", figures.get("bayes_market_told", True))
        if slots:
            plot_by_slot(
                {f"{data.name} {split}": figures},
                f"{data.name} {setting}: the regime learned at slot t",
                out / "by-slot.png",
            )
    if as_json:
        typer.echo(json.dumps(result, default=float))
        return
    told = ", ".join(known) or "the family only"
    typer.echo(f"{data} {split} {setting}: {figures['days']} days, {twins} twins a day, knowing {told}")
    typer.echo("| row | ANS | CSR |")
    typer.echo("|:---|---:|---:|")
    for label, row in {**summary, **others}.items():
        typer.echo(f"| {label} | {row['ans_median']:.3f} | {row['csr']:.3f} |")
    rates = figures["at_hindsight_ratio"]
    typer.echo(
        f"at the day's hindsight ratio, median per slot: {rates['wins_per_slot']:.1f} wins, "
        f"{rates['delivering_wins_per_slot']:.1f} delivering"
    )
    for t, got in figures["from_slot"].items():
        gain = "none with CSR >= PID's" if got["gain"] is None else f"{got['gain']:+.3f} ANS ({got['row']})"
        typer.echo(f"headroom, told at slot {t}: {gain}")
    for kind in ("pid", "constant", "bayes"):
        if kind not in figures:
            continue
        got = figures[kind]
        gain = "none with CSR >= PID's" if got["gain"] is None else f"{got['gain']:+.3f} ANS ({got['row']})"
        told = "market told" if figures.get("bayes_market_told") else "market not told"
        label = f"bayes ({told}, conversion scale learned)" if kind == "bayes" else f"informed {kind}"
        typer.echo(f"headroom, {label}: {gain}")


if __name__ == "__main__":
    typer.run(main)
