"""Earn a model's shield trust on its validation days: how far the band around its controller may widen.

The safety shield (:mod:`model.shield`) keeps a policy's ratio in a band around a PID on the same stats. Centred
on a PID that is weak where the policy is strong, it takes back what the policy earned (RESULTS.md, session 27:
on ``sparse``'s 100 OOD days the 120-day SC ensemble alone beat its PID by 0.044 ANS, behind the shield by 0.022).
``ShieldConfig.trust`` moves every edge of the band out by the same log-ratio; this tool chooses it per model, on
days no reported figure is read from (the model's validation days: held-out train days of its market), by the rule
pre-registered in 0bc1662:

1. **Earned or not.** The model alone against the market's tuned PID, paired over the validation days
   (:func:`research.significance.paired_gap`): trust is earned only if the 95% interval of the ANS gap lies above 0
   and the model's CSR there is at least the PID's. Else the trust is 0 (the band as it was).
2. **How much.** Each trust of :data:`TRUST_LADDER` is played behind the shield on the same days; among those
   whose CSR is at least the PID's (0 always counts), the one with the highest median ANS, the smallest of those
   within :data:`TIE` of it.

The band's other fields are the card's (the code's defaults for a card without a ``shield`` section, as
pre-registered). ``--write`` records the choice in the model card's ``shield`` section, which the service and
``shield:onnx:MODEL_DIR`` run (re-measure with ``research/scripts/measure_model.sh`` after)::

    python -m research.shield_calibration models/default data/suite/bench --write

**Measured, and not adopted** (RESULTS.md, session 28): on the 120-day ``sparse`` cut the earned trust (0.35) let the
SC ensemble meet the bar on test and OOD days, but the trust validation days earn does not carry in general. On SC
``sparse`` the suite ensemble earned 0.35 as clearly and behind it lost 0.012-0.014 ANS and 0.05-0.07 CSR on the
test and OOD days, missing the shield's own bound (CSR >= PID's - 0.05) on both; the shipped MC model earned 0.1 and
gave back 0.013-0.016 ANS on three of the four markets' OOD days. Validation days are where model selection chose
the epochs and where the shield has least to undo. No script runs this tool and no shipped card carries a trust.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer

from model.artifact import CARD_FILE, ArtifactError, ModelCard, ShieldInfo, read_card
from model.shield import ShieldConfig
from research.shield_sweep import REFERENCE, UNSHIELDED, sweep
from research.significance import PairedGap, paired_gap
from training.evaluation.evaluate import ONNX_PREFIX, EvaluationError, summarize
from training.files import atomic_write_text
from training.market.dataset import MarketError

TRUST_LADDER = (0.0, 0.1, 0.2, 0.35, 0.5)
"""The trusts played (log-ratio added to both half-widths): 0.5 lets a policy bid from about a third to three times
its controller's ratio while safe."""
TIE = 0.001
"""Median validation ANS this close to the best counts as a tie; the smallest trust of a tie wins."""
SPLIT = "validation"
"""The days the rule reads: held-out train days of the model's market, which no reported figure is read from."""
CSR_TOLERANCE = 1e-9
"""CSRs are means of per-seed shares: equal shares may differ in the last bit, and equal is eligible."""
CHOSEN_BY = "research.shield_calibration"


@dataclass(frozen=True)
class Calibration:
    """What the rule saw on the validation days and what it chose."""

    trust: float
    earned: bool
    margin: PairedGap
    """The model alone minus the PID, paired over the validation days."""
    rows: dict[str, dict[str, float]]
    """``pid``, ``unshielded`` and ``trust=T`` for each trust: median ANS (``ans``) and mean CSR (``csr``)."""

    def record(self) -> dict[str, Any]:
        """The card's ``shield.calibration``: the rule, the figures it read and the choice."""
        return {
            "rule": "research/shield_calibration.py (pre-registered 0bc1662)",
            "split": SPLIT,
            "days": self.margin.days,
            "earned": self.earned,
            "alone_minus_pid": {
                "ans": round(self.margin.ans, 4),
                "ans_low": round(self.margin.ans_low, 4),
                "ans_high": round(self.margin.ans_high, 4),
            },
            "rows": {name: {k: round(v, 4) for k, v in row.items()} for name, row in self.rows.items()},
            "trust": self.trust,
        }


def row_name(trust: float) -> str:
    """The sweep row of a trust: ``trust=0.1``."""
    return f"trust={trust:g}"


def choose_trust(episodes: pd.DataFrame, ladder: tuple[float, ...] = TRUST_LADDER) -> Calibration:
    """The rule (module docstring) on a sweep's episodes: rows ``pid``, ``unshielded`` and ``trust=T`` per trust."""
    if ladder[0] != 0:
        raise ValueError("the ladder starts at 0, the band as it is")
    names = [REFERENCE, UNSHIELDED, *(row_name(t) for t in ladder)]
    summary = summarize(episodes, names)
    rows = {name: {"ans": float(summary[name]["ans_median"]), "csr": float(summary[name]["csr"])} for name in names}
    margin = paired_gap(episodes, UNSHIELDED, REFERENCE)
    pid_csr = rows[REFERENCE]["csr"]
    earned = margin.ans_low > 0 and rows[UNSHIELDED]["csr"] >= pid_csr - CSR_TOLERANCE
    if not earned:
        return Calibration(0.0, False, margin, rows)
    eligible = [t for t in ladder if t == 0 or rows[row_name(t)]["csr"] >= pid_csr - CSR_TOLERANCE]
    best = max(rows[row_name(t)]["ans"] for t in eligible)
    trust = min(t for t in eligible if rows[row_name(t)]["ans"] >= best - TIE)
    return Calibration(trust, True, margin, rows)


def calibrate(model_dir: Path, market_dir: Path, seeds: int = 5) -> Calibration:
    """Play ``model_dir`` on ``market_dir``'s validation days behind each trust of the ladder, then apply the rule.
    The other fields of the band are the card's."""
    card = read_card(model_dir)
    if card.training.config.get("train_shielded"):
        raise EvaluationError(
            f"{model_dir} was trained behind the shield: its critics valued only the proposals its band let through,"
            " so a trust that widens the band would bid proposals nobody valued; it is served in the band it trained"
            " behind"
        )
    base = replace(card.shield_config(), trust=0.0)
    configs = [(row_name(t), replace(base, trust=t)) for t in TRUST_LADDER]
    _, episodes = sweep(market_dir, SPLIT, card.setting, f"{ONNX_PREFIX}{model_dir}", configs, seeds)
    return choose_trust(episodes)


def write_trust(model_dir: Path, calibration: Calibration) -> ModelCard:
    """Record the chosen trust in ``model_dir``'s card (``shield``); the graphs and their hashes are untouched."""
    card = read_card(model_dir)
    base = asdict(replace(card.shield_config(), trust=calibration.trust))
    defaults = asdict(ShieldConfig())
    changed = {k: v for k, v in base.items() if v != defaults[k]}  # what differs from the code's defaults
    others = {k: v for k, v in changed.items() if k != "trust"}
    before = card.shield.chosen_by if card.shield is not None else "defaults"
    chosen_by = CHOSEN_BY if not others else f"{before}; trust: {CHOSEN_BY}"  # a person's other fields stay theirs
    info = ShieldInfo(config=changed, chosen_by=chosen_by, calibration=calibration.record())
    updated = card.model_copy(update={"shield": info})
    ModelCard.model_validate_json(updated.to_json())  # what is written must read back
    atomic_write_text(Path(model_dir) / CARD_FILE, updated.to_json())
    return updated


def main(
    model: Annotated[Path, typer.Argument(help="An exported model directory (rcb export).")],
    market: Annotated[Path, typer.Argument(help="The market it was trained on (its validation days are played).")],
    seeds: Annotated[int, typer.Option(min=1, help="Evaluation seeds of a stochastic model.")] = 5,
    write: Annotated[bool, typer.Option("--write", help="Record the chosen trust in the model's card.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    try:
        calibration = calibrate(model, market, seeds)
        if write:
            write_trust(model, calibration)
    except (ArtifactError, EvaluationError, MarketError) as exc:
        raise typer.BadParameter(str(exc)) from None
    if as_json:
        typer.echo(json.dumps({**calibration.record(), "written": write}))
        return
    gap = calibration.margin
    typer.echo(
        f"{model} on {market}'s {gap.days} validation days: alone - PID {gap.ans:+.3f} [{gap.ans_low:+.3f},"
        f" {gap.ans_high:+.3f}] ANS; trust {'earned' if calibration.earned else 'not earned'}"
    )
    typer.echo("| row | ANS | CSR |")
    typer.echo("|:---|---:|---:|")
    for name, row in calibration.rows.items():
        typer.echo(f"| {name} | {row['ans']:.3f} | {row['csr']:.3f} |")
    typer.echo(f"trust {calibration.trust:g}" + (f", written to {model / CARD_FILE}" if write else " (not written)"))


if __name__ == "__main__":
    typer.run(main)
