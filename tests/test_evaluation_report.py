"""The evaluation report on a hand-built episodes frame: per-seed metrics, the Markdown table, the plots."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from training.evaluation.report import (
    markdown_table,
    per_seed_metrics,
    plot_boxplots,
    plot_roi_histograms,
    write_report,
)
from training.replay.metrics import is_feasible, normalized_delivery, roi

# Four days, L = 2 on every day, no budget (SC), oracle delivery D* per day:
ORACLE = [10.0, 20.0, 10.0, 20.0]
TARGET = 2.0

# "alpha", worked out by hand (its day 0 changes with the seed, days 1-3 do not):
#   day 0: D = 8 (seed 0) / 6 (seed 1) / 10 (seed 2), C = 4: ROI 2 ok / 1.5 no / 2.5 ok; D/D* 0.8 / - / 1.0
#   day 1: D = 20, C = 8:  ROI 2.5 ok, D/D* = 1
#   day 2: D = 5,  C = 5:  ROI 1   no
#   day 3: D = 0,  C = 0:  spent nothing -> feasible (ROI = inf), D/D* = 0
# seed 0: ANS (0.8 + 1 + 0 + 0)/4 = 0.45, CSR 3/4, ANDR ((0.8-1) + 0 + (0-1))/3 = -40 %,
#         G ((0.8 - 0) + (1 - 0) + (0.5 - (3**(2*5/5 - 1) - 1)) + 0)/4 = (0.8 + 1 - 1.5 + 0)/4 = 0.075
# seed 1: ANS 1/4 = 0.25, CSR 2/4, ANDR (0 - 1)/2 = -50 %
# seed 2: ANS 2/4 = 0.5,  CSR 3/4, ANDR (0 + 0 - 1)/3 = -33.3 %
# -> ANS median 0.45, mean 0.4; CSR mean 2/3, median 0.75; ANDR mean -41.1 %.
ALPHA_DAY0_DELIVERY = {0: 8.0, 1: 6.0, 2: 10.0}
# "steady": D = D*, C = D*/2.5 every day and seed: ANS 1, CSR 1, ANDR 0, G 1 — identical seeds, a collapsed box.
# "greedy": D = D*, C = D* (ROI 1 < 2) every day: never feasible, ANS 0, CSR 0, ANDR nan, G 1 - (3**1 - 1) = -1.


def _episode(method: str, seed: int, day: int, delivery: float, cost: float) -> dict[str, object]:
    return {"method": method, "seed": seed, "day": day, "delivery": delivery, "cost": cost}


def make_episodes() -> pd.DataFrame:
    rows = []
    for seed in range(3):
        alpha = [(ALPHA_DAY0_DELIVERY[seed], 4.0), (20.0, 8.0), (5.0, 5.0), (0.0, 0.0)]
        for day, (delivery, cost) in enumerate(alpha):
            rows.append(_episode("alpha", seed, day, delivery, cost))
        for day, d_star in enumerate(ORACLE):
            rows.append(_episode("steady", seed, day, d_star, d_star / 2.5))
            rows.append(_episode("greedy", seed, day, d_star, d_star))
    episodes = pd.DataFrame(rows)
    # The columns evaluate.py adds, derived the way it does (training.replay.metrics), for a realistic frame.
    episodes["oracle_delivery"] = [ORACLE[d] for d in episodes["day"]]
    episodes["roi_target"] = TARGET
    episodes["budget"] = np.inf
    episodes["roi"] = roi(episodes["delivery"], episodes["cost"])
    episodes["feasible"] = is_feasible(episodes["delivery"], episodes["cost"], TARGET)
    episodes["score"] = normalized_delivery(episodes["delivery"], episodes["oracle_delivery"]) * episodes["feasible"]
    return episodes


def make_summary(per_seed: pd.DataFrame) -> dict[str, dict[str, float]]:
    """What evaluate.py's summary holds: medians and means over seeds of the per-seed metrics."""
    summary = {}
    for method, group in per_seed.groupby("method", sort=False):
        summary[str(method)] = {
            "ans_median": float(group["ans"].median()),
            "ans_mean": float(group["ans"].mean()),
            "csr": float(group["csr"].mean()),
            "csr_median": float(group["csr"].median()),
            "andr": float(group["andr"].mean()),  # pandas skips nan; all-nan stays nan
            "andr_median": float(group["andr"].median()),
            "gmetric": float(group["gmetric"].mean()),
            "n_episodes": int(group["n_episodes"].sum()),
            "n_seeds": len(group),
        }
    return summary


META = {
    "market": "/data/markets/syn-small",
    "split": "test",
    "setting": "sc",
    "seeds": 3,
    "command": "rcb evaluate /data/markets/syn-small --setting sc --split test --methods alpha,steady,greedy",
    "tuned": {"alpha": {"kp": 0.123456, "use_profile": True, "traffic_profile": list(np.linspace(0, 1, 48))}},
    "created": "2024-01-01T00:00:00",
}


@pytest.fixture(scope="module")
def episodes() -> pd.DataFrame:
    return make_episodes()


@pytest.fixture(scope="module")
def per_seed(episodes: pd.DataFrame) -> pd.DataFrame:
    return per_seed_metrics(episodes)


def test_per_seed_metrics_shape_and_order(per_seed: pd.DataFrame) -> None:
    assert list(per_seed.columns) == ["method", "seed", "ans", "csr", "andr", "gmetric", "n_episodes"]
    # One row per (method, seed), methods in order of first appearance, seeds ascending.
    assert list(zip(per_seed["method"], per_seed["seed"], strict=True)) == [
        (m, s) for m in ("alpha", "steady", "greedy") for s in range(3)
    ]
    assert (per_seed["n_episodes"] == 4).all()


def test_per_seed_metrics_by_hand(per_seed: pd.DataFrame) -> None:
    alpha = per_seed[per_seed["method"] == "alpha"].set_index("seed")
    assert alpha.loc[0, "ans"] == pytest.approx(0.45)
    assert alpha.loc[0, "csr"] == pytest.approx(0.75)
    assert alpha.loc[0, "andr"] == pytest.approx(-40.0)
    assert alpha.loc[0, "gmetric"] == pytest.approx(0.075)
    assert alpha["ans"].tolist() == pytest.approx([0.45, 0.25, 0.5])
    assert alpha["csr"].tolist() == pytest.approx([0.75, 0.5, 0.75])
    assert alpha["andr"].tolist() == pytest.approx([-40.0, -50.0, -100.0 / 3])

    steady = per_seed[per_seed["method"] == "steady"]
    assert steady[["ans", "csr", "andr", "gmetric"]].to_numpy().ravel().tolist() == pytest.approx(
        [1.0, 1.0, 0.0, 1.0] * 3
    )

    greedy = per_seed[per_seed["method"] == "greedy"]
    assert (greedy["ans"] == 0).all() and (greedy["csr"] == 0).all()
    assert greedy["andr"].isna().all()
    assert greedy["gmetric"].tolist() == pytest.approx([-1.0] * 3)


def test_per_seed_metrics_budget_column_optional(episodes: pd.DataFrame) -> None:
    with_budget = per_seed_metrics(episodes)
    without = per_seed_metrics(episodes.drop(columns=["budget"]))
    pd.testing.assert_frame_equal(with_budget, without)


def test_per_seed_metrics_budget_counts(episodes: pd.DataFrame) -> None:
    # A budget of 7 makes alpha's day 1 (cost 8) infeasible despite its ROI: seed 0's CSR drops to 2/4.
    tight = episodes.assign(budget=7.0)
    alpha0 = per_seed_metrics(tight).query("method == 'alpha' and seed == 0").iloc[0]
    assert alpha0["csr"] == pytest.approx(0.5)
    assert alpha0["ans"] == pytest.approx(0.8 / 4)


def test_per_seed_metrics_missing_column(episodes: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match="oracle_delivery"):
        per_seed_metrics(episodes.drop(columns=["oracle_delivery"]))


def _table_rows(table: str) -> dict[str, list[str]]:
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    return {row.split("|")[1].strip().strip("`"): [c.strip() for c in row.split("|")[2:-1]] for row in rows}


def test_markdown_table(per_seed: pd.DataFrame) -> None:
    summary = make_summary(per_seed)
    table = markdown_table(summary, META)
    rows = _table_rows(table)
    assert list(rows) == ["alpha", "steady", "greedy"]  # one row per method, in the summary's order
    # Columns: ANS median | ANS mean | CSR mean | CSR median | ANDR mean (%) | G-metric | episodes | seeds
    assert rows["alpha"][:5] == ["0.450", "0.400", "0.667", "0.750", "-41.1"]
    assert rows["alpha"][6:] == ["12", "3"]
    assert rows["steady"][:6] == ["1.000", "1.000", "1.000", "1.000", "0.0", "1.000"]
    assert rows["greedy"][:6] == ["0.000", "0.000", "0.000", "0.000", "—", "-1.000"]

    # The context every table states (docs/metrics.md), above the table.
    header = table.splitlines()[0]
    for text in ("`test`", "SC", "**seeds** 3", "over seeds", "/data/markets/syn-small"):
        assert text in header
    assert "| method | ANS median | ANS mean | CSR mean | CSR median | ANDR mean (%) | G-metric |" in table
    # Tuned hyperparameters below it, compact: a 48-long profile by its length only.
    assert "- `alpha`: kp=0.1235, use_profile=True, traffic_profile=[48 values]" in table
    assert "0.0212" not in table  # no profile entry leaked
    assert META["command"] in table


def test_markdown_table_missing_values() -> None:
    # A method whose summary lacks keys or holds nan still gets a full row of placeholders.
    table = markdown_table({"x": {"ans_median": float("nan")}}, {"split": "ood", "setting": "mc", "seeds": 1})
    assert _table_rows(table)["x"] == ["—"] * 8
    assert "Tuned hyperparameters" not in table


def _assert_png(path: Path) -> None:
    assert path.exists()
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000


def test_plots_degenerate(episodes: pd.DataFrame, tmp_path: Path) -> None:
    # One seed (every box a line), one method that only ever spent nothing, many long method names.
    one_seed = episodes[episodes["seed"] == 0]
    idle = one_seed[one_seed["method"] == "steady"].assign(method="idle", delivery=0.0, cost=0.0)
    many = pd.concat(
        [one_seed, idle]
        + [
            one_seed[one_seed["method"] == "alpha"].assign(method=f"runs/2024-01-0{i}/cbrl-long-run-name-{i}")
            for i in range(5)
        ]
    )
    plot_boxplots(many, tmp_path / "box.png", "degenerate")
    plot_roi_histograms(many, tmp_path / "hist.png", "degenerate")
    _assert_png(tmp_path / "box.png")
    _assert_png(tmp_path / "hist.png")


def test_plots_reject_empty(episodes: pd.DataFrame, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no episodes"):
        plot_boxplots(episodes.iloc[:0], tmp_path / "box.png", "empty")
    with pytest.raises(ValueError, match="no episodes"):
        plot_roi_histograms(episodes.iloc[:0], tmp_path / "hist.png", "empty")


def test_write_report(episodes: pd.DataFrame, per_seed: pd.DataFrame, tmp_path: Path) -> None:
    out = tmp_path / "nested" / "report"
    paths = write_report(episodes, make_summary(per_seed), META, out)
    assert paths == {
        "markdown": out / "summary.md",
        "boxplots": out / "boxplots.png",
        "roi_hist": out / "roi_hist.png",
    }
    text = paths["markdown"].read_text(encoding="utf-8")
    assert text.startswith("# Evaluation: SC · test split · 3 seeds")
    assert "| `greedy` |" in text
    _assert_png(paths["boxplots"])
    _assert_png(paths["roi_hist"])


def test_write_report_without_plots_needs_no_matplotlib(
    episodes: pd.DataFrame, per_seed: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rcb replay` in the service image (no training extra): it crashed after the whole replay on the plots."""
    import sys

    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    (tmp_path / "boxplots.png").write_bytes(b"an earlier run's")
    paths = write_report(episodes, make_summary(per_seed), META, tmp_path, plots=False)
    assert paths == {"markdown": tmp_path / "summary.md"} and not list(tmp_path.glob("*.png"))
