"""What refusing booleans among a bid's utilities costs on the hot path: one JSON bid body of 100,000 utilities.

``POST /v1/bid`` reads its body with orjson and hands the list to numpy, which reads ``[true, 2.5]`` as
``[1.0, 2.5]``. The route now checks every value's type only when the body holds an ``r`` or an ``f`` (``true`` and
``false`` spell them; no number and no key of a bid body does: :func:`service.routes.bids._utilities`). This times,
on the same body (campaign id ``campaign-0000``) and in alternating order:

* ``parse``: ``orjson.loads`` and the route's conversion without any boolean check (the code before);
* ``guarded``: the route as it is (its byte search; no value checked on this body);
* ``every value``: the same with every value's type checked (what a body holding an r or f costs);

and prints medians and their ratios to ``parse``::

    .venv/bin/python benchmarks/bench_bid_parse.py [--utilities 100000] [--repeats 41]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import describe_machine
from service.routes.bids import _utilities

LIMIT = 1_000_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--utilities", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=41)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    utilities = rng.lognormal(0.0, 1.0, args.utilities).round(6).tolist()
    body = orjson.dumps({"campaign_id": "campaign-0000", "utilities": utilities})
    no_boolean = b""  # what the old code read: no byte search, so never a per-value check

    def parse() -> object:
        return _utilities(orjson.loads(body)["utilities"], LIMIT, no_boolean)

    def guarded() -> object:
        return _utilities(orjson.loads(body)["utilities"], LIMIT, body)

    def every_value() -> object:
        values = orjson.loads(body)["utilities"]
        if bool in set(map(type, values)):
            raise ValueError("a boolean")
        return _utilities(values, LIMIT, no_boolean)

    arms: dict[str, Callable[[], object]] = {"parse": parse, "guarded": guarded, "every value": every_value}
    times: dict[str, list[float]] = {name: [] for name in arms}
    for fn in arms.values():
        fn()  # warm-up
    for r in range(args.repeats):
        order = list(arms) if r % 2 == 0 else list(reversed(arms))
        for name in order:
            started = time.perf_counter()
            arms[name]()
            times[name].append(time.perf_counter() - started)
    base = statistics.median(times["parse"])
    print(describe_machine())
    print(f"one JSON bid body, {args.utilities:,} utilities ({len(body) / 1e6:.2f} MB), median of {args.repeats}:")
    for name in arms:
        median = statistics.median(times[name])
        print(f"  {name:12s} {1e3 * median:7.2f} ms   {median / base:5.2f}x parse")


if __name__ == "__main__":
    main()
