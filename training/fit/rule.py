"""The rule ``rcb fit`` chooses by, fixed here before any candidate is played.

Every candidate is played on the same held-out train days, as it would be served (a learned model behind the
safety shield around the market's PID; the PID and RM controllers as they are). Then:

1. **Eligible**: the PID itself, and every servable candidate whose mean CSR is at least the PID's (to
   :data:`CSR_TOLERANCE`).
2. **Chosen**: the eligible candidate with the highest median ANS.
3. **Ties**: the simpler kind first (a controller, then a planner, then a policy), then the order listed (the PID
   first of all).

So the PID is served unless a candidate holds its constraint satisfaction and delivers more. Pure: no market, no
model, only the rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Kind = Literal["controller", "planner", "policy", "reference"]
"""What a candidate is when served (``reference``: a row for comparison only, which has no served form: CEM)."""
KINDS: tuple[Kind, ...] = ("controller", "planner", "policy")
"""The servable kinds, simplest first: the order ties go in."""
LEARNED: tuple[Kind, ...] = ("planner", "policy")
"""The kinds fitted beyond a controller's few gains: what the command names when none of them holds the PID's CSR."""
PID = "pid"
"""The reference row: the PID tuned on the same days, always eligible."""
CSR_TOLERANCE = 1e-9
"""CSRs are means of per-seed shares: equal shares may differ in the last bit, and equal is eligible."""
RULE = (
    "the highest median ANS among candidates whose mean CSR is at least the PID's, each played on the held-out days"
    " as it would be served (behind the shield around the market's PID; the PID and RM controllers as they are), the"
    " PID always eligible; ties: a controller, then a planner, then a policy, then the order listed"
)
"""The rule in one sentence, as the card's ``fit`` section and the report state it."""


@dataclass(frozen=True)
class Row:
    """One candidate's figures on the held-out days: what the rule reads."""

    name: str
    kind: Kind
    ans: float
    """Median over seeds of each seed's ANS (the mean over the days of ``D / D* x 1[feasible]``)."""
    csr: float
    """Mean over seeds of each seed's CSR (the share of the days that held every constraint)."""

    @property
    def servable(self) -> bool:
        return self.kind in KINDS


@dataclass(frozen=True)
class Choice:
    """What the rule chose and what it read."""

    chosen: str
    eligible: tuple[str, ...]
    """The eligible candidates, in the order listed."""
    pid_csr: float

    @property
    def chose_pid(self) -> bool:
        return self.chosen == PID


class RuleError(ValueError):
    """Rows the rule cannot read: no PID row, a name twice, a figure that is not a number."""


def eligible(rows: Sequence[Row]) -> list[Row]:
    """The PID and every servable row whose CSR is at least the PID's, in the order listed."""
    pid = _pid_row(rows)
    return [r for r in rows if r.name == PID or (r.servable and r.csr >= pid.csr - CSR_TOLERANCE)]


def choose(rows: Sequence[Row]) -> Choice:
    """The rule (module docstring) on ``rows``: the highest median ANS among the eligible rows, ties to the simpler
    kind, then to the order listed."""
    _check(rows)
    allowed = eligible(rows)
    order = {r.name: i for i, r in enumerate(rows)}
    best = max(r.ans for r in allowed)
    tied = [r for r in allowed if r.ans == best]
    chosen = min(tied, key=lambda r: (r.name != PID, KINDS.index(r.kind), order[r.name]))
    return Choice(chosen=chosen.name, eligible=tuple(r.name for r in allowed), pid_csr=_pid_row(rows).csr)


def learned_holding_pid_csr(rows: Sequence[Row]) -> list[Row]:
    """The learned candidates (a planner, a policy) that hold the PID's CSR: none means the PID is served because
    nothing learned is safe enough, which the command says in one line."""
    return [r for r in eligible(rows) if r.kind in LEARNED]


def _pid_row(rows: Sequence[Row]) -> Row:
    found = [r for r in rows if r.name == PID]
    if len(found) != 1 or found[0].kind != "controller":
        raise RuleError(f"the rule reads exactly one {PID!r} row, a controller; got {len(found)}")
    return found[0]


def _check(rows: Sequence[Row]) -> None:
    names = [r.name for r in rows]
    if len(set(names)) != len(names):
        raise RuleError(f"a candidate is listed twice: {', '.join(names)}")
    _pid_row(rows)
    for r in rows:
        if r.kind not in (*KINDS, "reference"):
            raise RuleError(f"{r.name}: unknown kind {r.kind!r}")
        if not (math.isfinite(r.ans) and math.isfinite(r.csr)):
            raise RuleError(f"{r.name}: its median ANS and mean CSR must be numbers, not {r.ans!r} and {r.csr!r}")
