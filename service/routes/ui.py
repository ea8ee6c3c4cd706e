"""``GET /ui``: a status page of the campaigns in their current episodes, server-rendered (no script, no build).

Per campaign: slot, cumulative ROI against L, spend against B, the ratio it bids now, who decided it (a badge
unless the model: shield, fallback, or handover with the slot from which its controller bids the rest of the day),
and a chart of its ratio and cumulative ROI over the day (inline SVG). It lists up to ``limit`` campaigns from the
store (a scan: a page for people, not for the ad engine) and refreshes itself every 10 seconds.
"""

from __future__ import annotations

import html
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from model.contract import RATIO_MAX, SLOTS_PER_DAY
from model.state import CampaignState, StateError
from service.deps import RunnerDep, SettingsDep, StoreDep
from service.errors import error_responses
from service.ratio_cache import bid_ratio_of

router = APIRouter(tags=["status page"])

WIDTH, HEIGHT, PAD = 260, 70, 4


def _points(values: np.ndarray, top: float) -> str:
    """SVG polyline points of ``values`` per slot (NaN: no point), scaled so ``top`` is the chart's top."""
    slots = np.flatnonzero(np.isfinite(values))
    xs = PAD + slots * (WIDTH - 2 * PAD) / (SLOTS_PER_DAY - 1)
    ys = HEIGHT - PAD - np.clip(values[slots] / top, 0, 1) * (HEIGHT - 2 * PAD)
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys, strict=True))


def day_chart(state: CampaignState) -> str:
    """The ratio bid in each slot (blue, scale 0-4) and the cumulative ROI after it (green, L dashed; scale 0-2L)."""
    ratios = np.append(state.column("ratios"), state.next_ratio if not state.done else [])
    delivery, cost = np.cumsum(state.column("delivery")), np.cumsum(state.column("cost"))
    roi = np.divide(delivery, cost, out=np.full(cost.shape, np.nan), where=cost > 0)
    target_y = HEIGHT - PAD - 0.5 * (HEIGHT - 2 * PAD)
    return (
        f'<svg width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="ratio and ROI of {html.escape(state.campaign)}">'
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#fafafa" stroke="#ddd"/>'
        f'<line x1="{PAD}" x2="{WIDTH - PAD}" y1="{target_y:.1f}" y2="{target_y:.1f}" stroke="#2a9d5c" '
        'stroke-dasharray="4 3" stroke-width="1"/>'
        f'<polyline fill="none" stroke="#2a9d5c" stroke-width="1.5" points="{_points(roi, 2 * state.roi_target)}"/>'
        f'<polyline fill="none" stroke="#2563eb" stroke-width="1.5" points="{_points(ratios, RATIO_MAX)}"/>'
        "</svg>"
    )


def _row(state: CampaignState) -> str:
    roi = state.roi
    roi_text = "–" if roi is None else f"{roi:.3f}"
    roi_class = "" if roi is None else ("ok" if roi >= state.roi_target else "bad")
    if state.budget is None:
        spend = f"{state.total_cost:,.1f} <span class=muted>(no budget)</span>"
    else:
        share = min(state.total_cost / state.budget, 1.0)
        spend = (
            f'<div class=bar><div style="width:{100 * share:.0f}%"></div></div>'
            f"{state.total_cost:,.1f} / {state.budget:,.1f}"
        )
    flag = "" if state.decided_by == "model" else f' <span class="badge {state.decided_by}">{state.decided_by}</span>'
    if state.handover_slot is not None and state.decided_by != "handover":  # a reload's fallback, say
        flag += ' <span class="badge handover">handover</span>'
    if state.handover_slot is not None:
        flag += f"<br><span class=muted>handed to its controller from slot {state.handover_slot}</span>"
    return (
        "<tr>"
        f"<td><b>{html.escape(state.campaign)}</b><br><span class=muted>{html.escape(state.episode)}</span></td>"
        f"<td>{state.slot} / {SLOTS_PER_DAY}</td>"
        f'<td class="{roi_class}">{roi_text}<br><span class=muted>L = {state.roi_target:g}</span></td>'
        f"<td>{spend}</td>"
        f"<td>{'day over' if state.done else f'{bid_ratio_of(state):.3f}'}{flag}</td>"
        f"<td>{day_chart(state)}</td>"
        "</tr>"
    )


STYLE = """
body { font: 14px system-ui, sans-serif; margin: 24px; color: #222; }
table { border-collapse: collapse; } td, th { padding: 6px 10px; border-bottom: 1px solid #eee; text-align: left;
vertical-align: middle; } th { font-weight: 600; background: #f5f5f5; }
.muted { color: #888; font-size: 12px; } .ok { color: #2a9d5c; font-weight: 600; } .bad { color: #c0392b;
font-weight: 600; } .bar { width: 120px; height: 6px; background: #eee; margin-bottom: 3px; }
.bar div { height: 6px; background: #e08e0b; } .badge { font-size: 11px; padding: 1px 5px; border-radius: 3px;
background: #c0392b; color: white; } .badge.handover { background: #7c3aed; } .legend span { margin-right: 14px; }
"""


@router.get("/ui", response_class=HTMLResponse, responses=error_responses(422, 503))
async def status_page(
    store: StoreDep,
    runner: RunnerDep,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="Most campaigns listed")] = 200,
) -> HTMLResponse:
    """The campaigns of the current episodes, with their day so far (HTML)."""
    names = await store.campaigns(limit)
    states = []
    for stored in await store.get_many(names):
        if stored is None:
            continue
        try:
            states.append(CampaignState.from_bytes(stored.blob))
        except StateError:
            continue
    rows = "".join(_row(s) for s in states) or "<tr><td colspan=6 class=muted>no campaign registered yet</td></tr>"
    model = html.escape(runner.version)
    safety = runner.controller_source()
    tuned_on = html.escape(str(safety["market"])) if safety["market"] else "the benchmark's defaults"
    whose = "its own" if safety["source"] == "model" else "the"  # a controller model is its own fallback
    controller = f"{whose} {html.escape(str(safety['law']))} tuned on <b>{tuned_on}</b>"
    page = f"""<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="10">
<title>rcb: campaigns</title><style>{STYLE}</style></head><body>
<h2>rcb bidding service</h2>
<p>model <b>{model}</b> · shield and fallback around {controller}
· store <b>{settings.store_kind}</b> · {len(states)} campaign{"s" if len(states) != 1 else ""}
<span class="legend muted">· chart: <span style="color:#2563eb">ratio (0-4)</span>
<span style="color:#2a9d5c">cumulative ROI (0-2L, dashed: L)</span></span></p>
<table><tr><th>campaign</th><th>slot</th><th>ROI</th><th>spend</th><th>ratio now</th><th>the day so far</th></tr>
{rows}</table></body></html>"""
    return HTMLResponse(page)
