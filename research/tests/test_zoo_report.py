"""research/zoo_report.py on synthetic summaries and fit cards: rows, gaps, target flags and the distribution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from research.zoo_report import distributions, main, rows


def figures(ans: float, csr: float, seeds: int = 1, days: int = 10) -> dict:
    return {"ans_median": ans, "csr": csr, "n_seeds": seeds, "n_episodes": days * seeds}


def write_market(
    root: Path, market: str, setting: str, chosen: str, kind: str, splits: dict[str, dict[str, tuple[float, float]]]
) -> Path:
    """A fit card for ``market`` and one summary.json per split, the served model under its absolute path."""
    model = root / "models" / market / setting
    model.mkdir(parents=True)
    (model / "model.json").write_text(json.dumps({"kind": "policy", "fit": {"chosen": chosen, "kind": kind}}))
    for split, methods in splits.items():
        summary = {}
        for method, (ans, csr) in methods.items():
            label = f"shield:onnx:{model}" if method == "served" else method
            seeds = 5 if method in ("cem", "served") else 1
            summary[label] = figures(ans, csr, seeds=seeds, days=30 if split == "test" else 20)
        out = root / "out" / market / f"{setting}-{split}"
        out.mkdir(parents=True)
        (out / "summary.json").write_text(json.dumps(summary))
    return model


def test_rows_gaps_flags_and_distribution(tmp_path: Path):
    baselines = {"rm": (0.60, 0.90), "pid": (0.70, 1.00), "cem": (0.65, 0.95), "plan": (0.72, 0.97)}
    write_market(
        tmp_path,
        "zoo-00",
        "mc",
        "plan",
        "planner",
        {
            "test": {**baselines, "served": (0.76, 0.96), "oracle-day": (0.9, 1.0)},  # ahead by 0.04
            "ood": {**baselines, "served": (0.715, 0.95)},  # within 0.01 of the plan, CSR exactly PID's - 0.05
        },
    )
    write_market(
        tmp_path,
        "zoo-01",
        "mc",
        "pid",
        "controller",
        {"test": {**baselines, "pid": (0.80, 0.90), "served": (0.80, 0.90)}},  # the PID served: gap 0 to itself
    )
    write_market(
        tmp_path,
        "auction",
        "mc",
        "cbrl",
        "policy",
        {"test": {**baselines, "served": (0.78, 0.90)}},  # ahead on ANS, but CSR 0.10 below the PID's
    )
    write_market(tmp_path, "zoo-02", "mc", "cbrl", "policy", {"test": {**baselines, "served": (0.70, 1.00)}})
    (tmp_path / "out" / "zoo-00" / "mc-validation").mkdir()  # other splits are not read
    (tmp_path / "out" / "zoo-00" / "mc-validation" / "summary.json").write_text(json.dumps({"pid": figures(1, 1)}))

    found = {(r.market, r.split): r for r in rows(tmp_path / "out")}
    order = [("auction", "test"), ("zoo-00", "test"), ("zoo-00", "ood"), ("zoo-01", "test"), ("zoo-02", "test")]
    assert list(found) == order  # by market, test before OOD
    test = found["zoo-00", "test"]
    assert (test.chosen, test.kind, test.baseline, test.days) == ("plan", "planner", "plan", 30)
    assert test.gap == pytest.approx(0.04) and test.holds and test.ahead
    ood = found["zoo-00", "ood"]
    assert ood.gap == pytest.approx(-0.005) and ood.holds and not ood.ahead and ood.days == 20
    pid = found["zoo-01", "test"]
    assert pid.baseline == "pid" and pid.gap == 0 and pid.holds and not pid.ahead  # a gap of 0 holds the target
    auction = found["auction", "test"]
    assert auction.gap == pytest.approx(0.06) and auction.ahead and not auction.holds  # CSR 0.90 < 1.00 - 0.05
    behind = found["zoo-02", "test"]
    assert behind.gap == pytest.approx(-0.02) and not behind.holds and not behind.ahead

    test_mc, ood_mc = distributions(list(found.values()))
    assert (test_mc.setting, test_mc.split, test_mc.markets) == ("mc", "test", 4)
    assert test_mc.median_gap == pytest.approx(0.02)  # median of -0.02, 0, 0.04, 0.06
    assert test_mc.worst_gap == pytest.approx(-0.02) and test_mc.worst_market == "zoo-02"
    assert (test_mc.holding, test_mc.ahead) == (2, 2)
    assert test_mc.served == {"cbrl": 2, "pid": 1, "plan": 1}
    assert (ood_mc.split, ood_mc.markets, ood_mc.holding, ood_mc.ahead) == ("ood", 1, 1, 0)

    assert main([str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "ZOO.md").read_text()
    assert (
        "| zoo-00 | MC | test | 30 | plan (planner) | 0.760 (0.96) | PLAN | 0.720 (0.97) | +0.040 | 1.00 | yes | yes |"
        in text
    )
    assert (
        "| auction | MC | test | 30 | cbrl (policy) | 0.780 (0.90) | PLAN | 0.720 (0.97) | +0.060 | 1.00 | no | yes |"
        in text
    )
    assert "| MC | test | 4 | +0.020 | -0.020 (zoo-02) | 2 / 4 | 2 / 4 | cbrl 2, pid 1, plan 1 |" in text
    assert "![gap per market](zoo.png)" in text
    assert (tmp_path / "out" / "zoo.png").read_bytes()[:4] == b"\x89PNG"


def test_missing_pieces_are_dashes_not_figures(tmp_path: Path):
    out = tmp_path / "out" / "zoo-05" / "sc-test"
    out.mkdir(parents=True)  # an evaluation without the served model (its fit failed)
    (out / "summary.json").write_text(json.dumps({"pid": figures(0.7, 1.0), "rm": figures(0.6, 1.0)}))
    (row,) = rows(tmp_path / "out")
    assert row.chosen is None and row.gap is None and row.holds is None and row.baseline == "pid"
    (dist,) = distributions([row])
    assert dist.markets == 0 and dist.missing == ("zoo-05",) and dist.median_gap is None
    assert main([str(tmp_path / "out")]) == 0  # no plot to draw, the tables all the same
    text = (tmp_path / "out" / "ZOO.md").read_text()
    assert "| zoo-05 | SC | test | 10 | — | — | PID | 0.700 (1.00) | — | 1.00 | — | — |" in text
    assert "0 (no figures: zoo-05)" in text and "zoo.png" not in text
    assert main([str(tmp_path / "missing")]) == 2
    assert main([str(tmp_path)]) == 2  # a directory with no evaluations under it
