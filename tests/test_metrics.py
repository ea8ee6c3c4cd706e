"""ANS, CSR, ANDR and the G-metric on hand-computed episodes, plus the conventions for undefined cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from training.replay.metrics import (
    andr,
    ans,
    csr,
    gmetric,
    gmetric_scores,
    is_feasible,
    normalized_delivery,
    roi,
    summarize,
)

# Four episodes, L = 1.5 for all, worked out by hand:
#   ep0: D=8,  C=4, B=inf, D*=10: ROI 8/4 = 2    >= 1.5, C <= B  -> feasible,   D/D* = 0.8
#   ep1: D=6,  C=5, B=inf, D*=12: ROI 6/5 = 1.2  <  1.5          -> infeasible, D/D* = 0.5
#   ep2: D=9,  C=6, B=5,   D*=9:  ROI 9/6 = 1.5 (boundary, ok) but C=6 > B=5 -> infeasible, D/D* = 1
#   ep3: D=11, C=3, B=10,  D*=10: ROI 11/3 = 3.67, C <= B        -> feasible,   D/D* = 1.1
DELIVERY = np.array([8.0, 6.0, 9.0, 11.0])
COST = np.array([4.0, 5.0, 6.0, 3.0])
TARGET = 1.5
BUDGET = np.array([np.inf, np.inf, 5.0, 10.0])
ORACLE = np.array([10.0, 12.0, 9.0, 10.0])


def test_feasibility_by_hand() -> None:
    assert is_feasible(DELIVERY, COST, TARGET, BUDGET).tolist() == [True, False, False, True]


def test_ans_by_hand() -> None:
    # (0.8 + 0 + 0 + 1.1) / 4 = 0.475: infeasible episodes score 0, feasible ones may beat the oracle.
    assert ans(DELIVERY, COST, TARGET, BUDGET, ORACLE) == pytest.approx(0.475)


def test_csr_by_hand() -> None:
    # 2 feasible of 4.
    assert csr(DELIVERY, COST, TARGET, BUDGET) == pytest.approx(0.5)


def test_andr_by_hand() -> None:
    # Over the feasible ep0, ep3: ((0.8 - 1) + (1.1 - 1)) / 2 * 100 = -5 %.
    assert andr(DELIVERY, COST, TARGET, BUDGET, ORACLE) == pytest.approx(-5.0)


def test_gmetric_by_hand() -> None:
    # gamma = 3; violation = max(L*C/D - 1, 0); the budget plays no part.
    #   ep0: min(0.8, 1) - (3**max(1.5*4/8 - 1 = -0.25, 0) - 1) = 0.8 - 0              = 0.8
    #   ep1: min(0.5, 1) - (3**(1.5*5/6 - 1 = 0.25) - 1)        = 0.5 - (1.316074 - 1) = 0.183926
    #   ep2: min(1.0, 1) - (3**(1.5*6/9 - 1 = 0) - 1)           = 1.0
    #   ep3: min(1.1, 1) - 0                                     = 1.0   (capped at 1)
    expected = [0.8, 0.5 - (3**0.25 - 1), 1.0, 1.0]
    assert gmetric_scores(DELIVERY, COST, TARGET, ORACLE).tolist() == pytest.approx(expected)
    # mean = (0.8 + 0.183926 + 1 + 1) / 4 = 0.745981
    assert gmetric(DELIVERY, COST, TARGET, ORACLE) == pytest.approx(0.745981, abs=1e-6)


def test_gmetric_gamma_and_unit_violation() -> None:
    # D=2, C=4, L=1: violation 1*4/2 - 1 = 1; gamma=3 -> penalty 2, D/D* = 2/4 -> 0.5 - 2 = -1.5.
    assert gmetric(2.0, 4.0, 1.0, 4.0) == pytest.approx(-1.5)
    # gamma=2 -> penalty 1 -> -0.5.
    assert gmetric(2.0, 4.0, 1.0, 4.0, gamma=2.0) == pytest.approx(-0.5)


def test_summarize_by_hand() -> None:
    out = summarize(DELIVERY, COST, TARGET, BUDGET, ORACLE)
    assert set(out) == {"ans", "csr", "andr", "gmetric", "n_episodes"}
    assert out["ans"] == pytest.approx(0.475)
    assert out["csr"] == pytest.approx(0.5)
    assert out["andr"] == pytest.approx(-5.0)
    assert out["gmetric"] == pytest.approx(0.745981, abs=1e-6)
    assert out["n_episodes"] == 4


def test_summarize_without_budget_is_the_sc_setting() -> None:
    # budget=None: ep2 (ROI exactly 1.5) becomes feasible: feasible = ep0, ep2, ep3.
    out = summarize(DELIVERY, COST, TARGET, None, ORACLE)
    assert out["csr"] == pytest.approx(0.75)
    assert out["ans"] == pytest.approx((0.8 + 1.0 + 1.1) / 4)  # 0.725
    assert out["andr"] == pytest.approx((-0.2 + 0.0 + 0.1) / 3 * 100)  # -3.333 %


def test_no_feasible_episode() -> None:
    # ROI 0.5 and 0.8 against L = 1: nothing feasible; ANDR is a mean over nothing.
    d, c, d_star = [1.0, 4.0], [2.0, 5.0], [3.0, 5.0]
    assert csr(d, c, 1.0) == 0.0
    assert ans(d, c, 1.0, np.inf, d_star) == 0.0
    assert math.isnan(andr(d, c, 1.0, np.inf, d_star))
    assert math.isnan(summarize(d, c, 1.0, None, d_star)["andr"])


def test_zero_cost_is_feasible_with_infinite_roi() -> None:
    # Spent nothing: ROI = +inf, violates neither constraint, even with a zero budget.
    assert roi([0.0, 3.0, 6.0], [0.0, 0.0, 2.0]).tolist() == [np.inf, np.inf, 3.0]
    assert is_feasible([0.0, 3.0], [0.0, 0.0], 5.0, 0.0).tolist() == [True, True]
    # "Never bid" on a day with D* = 4: feasible (CSR 1) but scores 0; ANDR = (0/4 - 1) * 100 = -100 %.
    assert ans(0.0, 0.0, 1.0, np.inf, 4.0) == 0.0
    assert csr(0.0, 0.0, 1.0) == 1.0
    assert andr(0.0, 0.0, 1.0, np.inf, 4.0) == pytest.approx(-100.0)


def test_zero_oracle_delivery_counts_as_one() -> None:
    # D* = 0: 0/0 -> 1 (matched the oracle); D > 0 over D* = 0 is capped at 1, never inf.
    assert normalized_delivery([0.0, 5.0, 3.0], [0.0, 0.0, 6.0]).tolist() == [1.0, 1.0, 0.5]
    # Feasible, D = C = 0, D* = 0: ANS 1, ANDR 0 %, G = min(1, 1) - 0 = 1.
    out = summarize(0.0, 0.0, 1.2, None, 0.0)
    assert (out["ans"], out["csr"], out["andr"], out["gmetric"]) == (1.0, 1.0, 0.0, 1.0)


def test_budget_violation_and_boundary() -> None:
    # ROI 10 >= 1 everywhere; C = B is feasible, C > B by any amount is not.
    assert is_feasible([10.0, 10.0], [1.0, 1.0], 1.0, [1.0, np.nextafter(1.0, 0.0)]).tolist() == [True, False]
    # ROI exactly at L is feasible; one ulp below is not.
    assert is_feasible([3.0, np.nextafter(3.0, 0.0)], [2.0, 2.0], 1.5).tolist() == [True, False]


def test_gmetric_zero_delivery() -> None:
    # C = 0: nothing violated -> min(0/5, 1) - 0 = 0.
    assert gmetric_scores(0.0, 0.0, 1.0, 5.0).tolist() == [0.0]
    # D = 0 < C: violation +inf, clipped at 10 -> 0 - (3**10 - 1) = -59048; unclipped it is -inf.
    assert gmetric_scores(0.0, 2.0, 1.0, 5.0).tolist() == [-59048.0]
    assert gmetric_scores(0.0, 2.0, 1.0, 5.0, max_violation=np.inf).tolist() == [-np.inf]
    # The clip binds only beyond ROI = L/11: D=1, C=5, L=2 -> violation 2*5/1 - 1 = 9 -> 1/5 - (3**9 - 1).
    assert gmetric_scores(1.0, 5.0, 2.0, 5.0).tolist() == pytest.approx([0.2 - (3**9 - 1)])


def test_scalars_broadcast_against_arrays() -> None:
    assert (
        is_feasible(DELIVERY, COST, np.full(4, TARGET), BUDGET).tolist()
        == is_feasible(DELIVERY, COST, TARGET, BUDGET).tolist()
    )
    assert roi(6.0, 3.0).tolist() == [2.0]


@pytest.mark.parametrize(
    ("delivery", "cost", "target", "budget", "oracle", "match"),
    [
        ([np.nan], [1.0], 1.0, np.inf, [1.0], "delivery"),
        ([1.0], [-1.0], 1.0, np.inf, [1.0], "cost"),
        ([1.0], [1.0], np.inf, np.inf, [1.0], "roi_target"),
        ([1.0], [1.0], 1.0, np.nan, [1.0], "budget"),
        ([1.0], [1.0], 1.0, -2.0, [1.0], "budget"),
        ([1.0], [1.0], 1.0, np.inf, [np.inf], "oracle_delivery"),
        ([], [], 1.0, np.inf, [], "no episodes"),
    ],
)
def test_invalid_inputs_are_rejected(delivery, cost, target, budget, oracle, match) -> None:
    with pytest.raises(ValueError, match=match):
        summarize(delivery, cost, target, budget, oracle)


def test_mismatched_lengths_are_rejected() -> None:
    with pytest.raises(ValueError, match="mismatched shapes"):
        csr([1.0, 2.0, 3.0], [1.0, 2.0], 1.0)


def test_bad_gamma_is_rejected() -> None:
    with pytest.raises(ValueError, match="gamma"):
        gmetric(1.0, 1.0, 1.0, 1.0, gamma=0.5)
