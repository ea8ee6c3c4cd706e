"""The whole fit, step by step: every refusal first (:func:`prepare`), then the work (:func:`run_fit`).

1. The train days are loaded and split: the held-out days (the validation fold) and the days every candidate is
   fitted on (:class:`~training.fit.candidates.HeldOut`).
2. The PID, RM, CEM and the planner are tuned on the latter (:func:`~training.fit.candidates.baseline_candidates`),
   and the PID on all the train days (the market's tuning cache: the written model's safety controller).
3. CBRL's ``seeds`` runs train on the latter, around the PID tuned there (:mod:`training.fit.runs`), and are
   exported as one candidate.
4. Every candidate plays the held-out days as it would be served (:mod:`training.fit.plays`); the rule chooses
   (:mod:`training.fit.rule`); the report is written (:mod:`training.fit.report`).
5. The chosen one is fitted for serving and written to ``MODEL_DIR`` (:mod:`training.fit.serving`).

Each step's finished work stays in the work directory (:mod:`training.fit.workdir`), so a rerun with the same
arguments does only what is left.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from model.artifact import ModelCard
from model.contract import Setting
from training.bidders.tuned import tuned_baseline
from training.fit.candidates import (
    BUILT_IN,
    Candidate,
    FitError,
    HeldOut,
    baseline_candidates,
    check_existing,
    existing_candidates,
    model_candidate,
)
from training.fit.estimate import Estimate, estimate
from training.fit.intervals import Figures, figures, score_matrix
from training.fit.plays import play, seeds_of
from training.fit.report import Line, fit_section, lines_of, write_report
from training.fit.rule import PID, Choice, Row, choose, learned_holding_pid_csr
from training.fit.runs import CANDIDATE, export_candidate, reference_of_pid, run_config, train_runs
from training.fit.serving import check_out, serve, served_as
from training.fit.workdir import WorkDir, read_json
from training.market.dataset import Market
from training.replay.dayset import VALIDATION_FRACTION, DaySet, validation_folds
from training.rl.config import SACConfig

MIN_TRAIN_DAYS = 3
"""The fewest train days a fit reads: at least one held out and two to fit on (the planner plays each of its days
without its own)."""


class Reporter(Protocol):
    """Where a fit says how far it is (the command draws progress bars on stderr)."""

    def task(self, key: str, description: str, total: float | None) -> None: ...

    def advance(self, key: str, amount: float = 1, description: str | None = None) -> None: ...


class Silent:
    """A :class:`Reporter` that says nothing."""

    def task(self, key: str, description: str, total: float | None) -> None:
        pass

    def advance(self, key: str, amount: float = 1, description: str | None = None) -> None:
        pass


@dataclass(frozen=True)
class FitRequest:
    """What ``rcb fit`` was asked for."""

    market_dir: Path
    setting: Setting
    out: Path
    work: WorkDir
    seeds: int = 1
    """CBRL runs, seeds ``0..seeds-1`` (0: no CBRL candidate); more than one is exported as their ensemble."""
    candidates: tuple[Path, ...] = ()
    epochs: int = SACConfig.epochs
    updates_per_epoch: int = SACConfig.updates_per_epoch
    play_seeds: int = 5
    """Seeds a stochastic candidate plays the held-out days with."""
    force: bool = False
    require_learned: bool = False


@dataclass(frozen=True)
class Prepared:
    """A request checked, with what the estimate read."""

    request: FitRequest
    market: Market
    train_impressions: int
    estimate: Estimate


@dataclass
class FitResult:
    """What a fit did and chose."""

    choice: Choice
    lines: list[Line]
    section: dict[str, Any]
    card: ModelCard | None
    """The written model's card (None where ``require_learned`` refused a controller)."""
    paths: dict[str, Path]
    seconds: dict[str, float]
    trained: list[int]
    """The seeds whose runs trained now (a finished run is kept)."""
    reused: dict[str, Any] = field(default_factory=dict)
    message: str | None = None
    """One line where a controller is served because no learned candidate qualified."""


class NotLearned(Exception):
    """``--require-learned`` and a controller won: nothing is written (one line, exit 1)."""


def prepare(request: FitRequest) -> Prepared:
    """Every refusal before any work: the market and its train days, the output, the work directory, the budget and
    each ``--candidate``. Raises :class:`FitError` (or what opening the market raises) in one line."""
    if request.seeds < 0 or request.epochs < 1 or request.updates_per_epoch < 1 or request.play_seeds < 1:
        raise FitError("--seeds must be >= 0, --epochs, --updates-per-epoch and --play-seeds >= 1")
    market = Market.open(request.market_dir)
    train = market.split("train")
    if len(train) < MIN_TRAIN_DAYS:
        raise FitError(
            f"{request.market_dir} has {len(train)} train days; a fit holds out every"
            f" {validation_folds(VALIDATION_FRACTION)}th and fits on the others, so it needs at least {MIN_TRAIN_DAYS}"
        )
    check_out(request.out, request.work, market, request.setting, request.force)
    work = request.work.root.resolve()
    if work.exists() and not work.is_dir():
        raise FitError(f"--work {request.work.root} exists and is not a directory")
    seen: set[str] = set()
    for directory in request.candidates:
        if str(directory) in BUILT_IN or str(directory) in seen:
            taken = ", ".join(BUILT_IN)
            raise FitError(f"--candidate {directory}: the name is taken (listed twice, or one of {taken})")
        seen.add(str(directory))
        if Path(directory).resolve() == Path(request.out).resolve():
            raise FitError(f"--candidate {directory} is --out; copy it elsewhere first")
        check_existing(Path(directory), market, request.setting)
    impressions = sum(e.n_impressions for e in train)
    left = sum(_epochs_left(request.work.run(seed), request.epochs) for seed in range(request.seeds))
    expected = estimate(impressions, 1, left, request.updates_per_epoch)
    return Prepared(request, market, impressions, expected)


def _epochs_left(run: Path, epochs: int) -> int:
    """The epochs a run in the work directory still has to train (all of them where there is none)."""
    body = read_json(run / "run.json")
    if body is None:
        return epochs
    if body.get("status") == "done":
        return 0
    return max(epochs - len(body.get("history") or []), 0)


def run_fit(prepared: Prepared, reporter: Reporter | None = None) -> FitResult:
    """The fit (module docstring) of a :func:`prepare`-d request."""
    request, market = prepared.request, prepared.market
    reporter = reporter or Silent()
    work, setting = request.work, request.setting
    work.root.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    clock = _Clock(seconds)

    with clock("load"):
        n_train = len(market.split("train"))
        reporter.task("load", "loading the train days", n_train)
        train = DaySet.load(market, "train", setting, progress=_loading(reporter))
        held = HeldOut.of(train)

    with clock("tuning"):
        reporter.task("tuning", f"tuning on {len(held.fit)} train days", 5)
        baselines, gains = baseline_candidates(
            held, work, lambda method: reporter.advance("tuning", description=f"tuned {method}")
        )
        # the market's own cache: the PID tuned on all the train days is the served model's safety controller
        tuned_baseline(market, "pid", setting, lambda: train)
        reporter.advance("tuning", description="tuned the PID on all the train days")

    trained: list[int] = []
    candidates: list[Candidate] = list(baselines)
    reused: dict[str, Any] = {}
    if request.seeds:
        reference = reference_of_pid(gains, held)
        configs = [run_config(s, request.epochs, request.updates_per_epoch, reference) for s in range(request.seeds)]
        with clock("training"):
            for s in range(request.seeds):
                reporter.task(f"train-{s}", f"training cbrl seed {s}", request.epochs)

            def started(seed: int, done: int) -> None:
                reporter.advance(f"train-{seed}", done, description=f"training cbrl seed {seed}")

            def epoch(seed: int, log: Any) -> None:
                description = f"training cbrl seed {seed}: epoch {log.epoch} validation {log.validation_score:.3f}"
                reporter.advance(f"train-{seed}", 1, description=description)

            runs, trained = train_runs(request.market_dir, setting, configs, work, started, epoch)
            for s in range(request.seeds):
                if s not in trained:
                    reporter.advance(f"train-{s}", request.epochs, description=f"cbrl seed {s}: finished before")
        with clock("export"):
            directory, exported = export_candidate(runs, work)
        reused["cbrl_export"] = not exported
        what = "the CBRL run" if len(runs) == 1 else f"the ensemble of {len(runs)} CBRL runs"
        candidates.append(model_candidate(CANDIDATE, directory, gains, f"{what}, behind the shield"))
    candidates.extend(existing_candidates(list(request.candidates), gains))
    order = [PID, "rm", "plan", *(c.name for c in candidates if c.name not in (PID, "rm", "plan", "cem")), "cem"]
    by_name = {c.name: c for c in candidates}
    candidates = [by_name[name] for name in order]

    with clock("plays"):
        total = sum(seeds_of(c, request.play_seeds) for c in candidates)
        reporter.task("plays", f"playing {len(held.held)} held-out days", total)
        found: dict[str, Figures] = {}
        reused["plays"] = []
        for candidate in candidates:
            episodes, was_cached = play(candidate, held, request.play_seeds, work)
            found[candidate.name] = figures(*score_matrix(episodes, held.held.days))
            if was_cached:
                reused["plays"].append(candidate.name)
            reporter.advance("plays", seeds_of(candidate, request.play_seeds), description=f"played {candidate.name}")

    rows = [Row(c.name, c.kind, found[c.name].ans, found[c.name].csr) for c in candidates]
    choice = choose(rows)
    chosen = by_name[choice.chosen]
    lines = lines_of(order, {c.name: c.kind for c in candidates}, {c.name: c.about for c in candidates}, found, choice)
    training = {
        "algo": "cbrl",
        "seeds": request.seeds,
        "epochs": request.epochs,
        "updates_per_epoch": request.updates_per_epoch,
        "runs": [str(work.run(s)) for s in range(request.seeds)],
        "reference": "the PID tuned on the days the runs train on",
    }
    section = fit_section(
        lines,
        choice,
        held.describe(),
        str(request.market_dir),
        str(setting),
        request.play_seeds,
        served_as(chosen, len(train)),
        training,
    )
    message = _controller_line(rows, choice, chosen, len(held.held))
    title = f"{request.market_dir} ({setting}): {len(held.held)} held-out train days; chosen: {choice.chosen}"
    paths = write_report(work.report, lines, section, seconds, title)
    result = FitResult(choice, lines, section, None, paths, seconds, trained, reused, message)
    if request.require_learned and chosen.kind == "controller":
        raise NotLearned(message or f"the {chosen.name} controller won the choice; nothing written (--require-learned)")

    with clock("serving"):
        reporter.task("serving", f"writing {choice.chosen} to {request.out}", 1)
        result.card = serve(chosen, request.market_dir, setting, request.out, section, work, request.force)
        reporter.advance("serving")
    write_report(work.report, lines, section, seconds, title)  # with the serving step's time
    return result


def _controller_line(rows: list[Row], choice: Choice, chosen: Candidate, days: int) -> str | None:
    """The one line that says a controller is served and why (None where a learned candidate is)."""
    if chosen.kind != "controller":
        return None
    pid = next(r for r in rows if r.name == PID)
    won = next(r for r in rows if r.name == choice.chosen)
    served = "the PID is served" if chosen.name == PID else f"the {chosen.name} controller is served"
    if not learned_holding_pid_csr(rows):
        return f"no learned candidate holds the PID's CSR ({pid.csr:.2f}) on the {days} held-out days: {served}"
    return (
        f"no learned candidate that holds the PID's CSR ({pid.csr:.2f}) has a median ANS above {won.name}'s"
        f" ({won.ans:.3f}) on the {days} held-out days: {served}"
    )


def _loading(reporter: Reporter) -> Callable[[str], None]:
    def tick(stage: str) -> None:
        if stage == "load":
            reporter.advance("load", description="loading the train days")
        else:
            reporter.advance("load", 0, description="solving the train days' oracles")

    return tick


class _Clock:
    """``with clock(step):`` adds the block's wall time to ``seconds[step]``."""

    def __init__(self, seconds: dict[str, float]):
        self.seconds = seconds

    def __call__(self, step: str) -> _Clock:
        self.step = step
        return self

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.seconds[self.step] = self.seconds.get(self.step, 0.0) + time.perf_counter() - self.started
