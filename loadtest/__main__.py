"""CLI: ``python -m loadtest --url http://127.0.0.1:PORT --scenario bid-binary --rate 5000 --duration 10``.

Exit status: 0 when every request got a 2xx, 1 when any errored (or, with --find-capacity, when no step passed),
2 when the run could not start (connection refused, setup failed, bad arguments).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from loadtest.report import _clean, plot_latency, print_table, write_summary
from loadtest.run_server import pin_current_process
from loadtest.scenarios import SCENARIOS, find_capacity, run_scenario


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m loadtest",
        description="Open-loop (constant arrival rate) load generator; latency from the intended send time.",
    )
    ap.add_argument("--url", required=True, help="service base URL, e.g. http://127.0.0.1:8000")
    ap.add_argument("--scenario", choices=SCENARIOS, default="bid-binary")
    ap.add_argument("--rate", type=float, default=1000.0, help="requests/s (bids; or the burst's, see README)")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of bids (ignored by slot-burst*)")
    ap.add_argument("--connections", type=int, default=64, help="keep-alive connections of the main stream")
    ap.add_argument("--campaigns", type=int, default=1000, help="campaigns N (bids cycle over them; burst size)")
    ap.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="M updates per batch request (slot-burst-batch: default 100; mixed: default 0 = single form)",
    )
    ap.add_argument("--burst-rate", type=float, default=None, help="mixed: the burst's requests/s (default --rate)")
    ap.add_argument("--burst-start", type=float, default=None, help="mixed: burst start (s, default duration/3)")
    ap.add_argument("--burst-connections", type=int, default=16, help="mixed: the burst's own connections")
    ap.add_argument("--campaign-prefix", default="c", help="campaign ids are PREFIX0..PREFIX{N-1}")
    ap.add_argument("--episode", default="e1")
    ap.add_argument("--slot", type=int, default=0, help="slot index of the burst's updates")
    ap.add_argument("--no-setup", action="store_true", help="do not register the campaigns first")
    ap.add_argument("--timeout", type=float, default=10.0, help="per-request timeout after the send (s)")
    ap.add_argument("--drain-timeout", type=float, default=10.0, help="wait after the last intended send (s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cpu", type=int, default=None, help="pin the generator to this CPU (the server gets another)")
    ap.add_argument("--out", type=Path, default=None, help="write DIR/summary.json and DIR/latency.png")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON instead of a table")
    cap = ap.add_argument_group("capacity search (--find-capacity; bid-json / bid-binary)")
    cap.add_argument("--find-capacity", action="store_true", help="step the rate up until p99 or errors blow up")
    cap.add_argument("--start-rate", type=float, default=500.0)
    cap.add_argument("--max-rate", type=float, default=20000.0)
    cap.add_argument("--factor", type=float, default=1.25, help="rate multiplier per step")
    cap.add_argument("--slo-p99-ms", type=float, default=50.0, help="a step fails above this p99")
    return ap


def _capacity(args, kw: dict, console: Console) -> int:
    res = find_capacity(
        args.scenario,
        args.url,
        start_rate=args.start_rate,
        max_rate=args.max_rate,
        factor=args.factor,
        duration=args.duration,
        slo_p99_ms=args.slo_p99_ms,
        setup=not args.no_setup,
        **kw,
    )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "capacity.json").write_text(json.dumps(_clean(res), indent=2))
    if args.json:
        print(json.dumps(_clean(res), indent=2))
    else:
        t = Table(title=f"capacity search: {args.scenario} @ {args.url}, p99 SLO {args.slo_p99_ms:g} ms")
        for col in ("rate/s", "throughput/s", "errors", "p50 ms", "p99 ms", "passed"):
            t.add_column(col, justify="right")
        for s in res["steps"]:
            t.add_row(
                f"{s['rate']:,.0f}",
                f"{s['throughput'] or 0:,.1f}",
                str(s["errors"]),
                f"{s['p50_ms'] or float('nan'):.2f}",
                f"{s['p99_ms'] or float('nan'):.2f}",
                "yes" if s["passed"] else "[red]no[/red]",
            )
        console.print(t)
        console.print(f"highest sustainable rate: {res['sustainable_rate']}")
    return 0 if res["sustainable_rate"] is not None else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(stderr=args.json, width=None if sys.stdout.isatty() else 160)
    kw = {
        "connections": args.connections,
        "campaigns": args.campaigns,
        "campaign_prefix": args.campaign_prefix,
        "episode": args.episode,
        "timeout": args.timeout,
        "drain_timeout": args.drain_timeout,
        "seed": args.seed,
    }
    try:
        pin_current_process(args.cpu)  # an unusable CPU is an exit 2 ("could not run") like any other setup error
        if args.find_capacity:
            return _capacity(args, kw, console)
        result = run_scenario(
            args.scenario,
            args.url,
            rate=args.rate,
            duration=args.duration,
            batch_size=args.batch_size,
            burst_rate=args.burst_rate,
            burst_start=args.burst_start,
            burst_connections=args.burst_connections,
            slot=args.slot,
            setup=not args.no_setup,
            **kw,
        )
    except (OSError, RuntimeError, ValueError) as e:
        console.print(f"[red]loadtest: {type(e).__name__}: {e}[/red]")
        return 2
    if args.out:
        write_summary(result, args.out)
        plot_latency(result, args.out / "latency.png")
    if args.json:
        print(json.dumps(_clean(result.to_json()), indent=2))
    else:
        print_table(result, console)
        if args.out:
            console.print(f"wrote {args.out / 'summary.json'} and {args.out / 'latency.png'}")
    return 1 if result.errors else 0


if __name__ == "__main__":
    sys.exit(main())
