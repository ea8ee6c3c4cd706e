"""`rcb evaluate` and :mod:`training.evaluation.evaluate`: episodes, the summary computed from them, tuning caches,
errors.

The summary is recomputed here from ``episodes.csv`` with :mod:`training.replay.metrics` alone (constraints read from
the
manifest, D* from the oracle), so a drift between the harness, its report and the metrics shows up.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from rcb.cli import app
from training.bidders import cem, pid, rm
from training.evaluation.evaluate import EvaluationError, evaluate
from training.evaluation.methods import known_methods, parse_methods
from training.market.dataset import Market
from training.market.generator import config_with, generate_market
from training.replay import metrics
from training.replay.oracle import market_oracle, setting_constraints

runner = CliRunner()

ALL_METHODS = ["rm", "pid", "cem", "plan", "oracle-day", "oracle-slot"]
EPISODE_COLUMNS = ["method", "seed", "day", "delivery", "cost", "roi", "feasible", "oracle_delivery"]
SC_SEEDS = 3
"""Three seeds, so a median over seeds differs from a mean where CEM's seeds differ."""
SUMMARY_KEYS = {"ans_median", "ans_mean", "csr", "andr", "gmetric", "n_episodes", "n_seeds"}


def small_config(**overrides: Any):
    return config_with(**{"days_id": 8, "days_ood": 2, "impressions_per_day": 20_000, "seed": 3, **overrides})


def run_cli(market_dir: Path, out: Path, setting: str, split: str, methods: list[str], seeds: int):
    """``rcb evaluate`` through the real console app, with ``--json``; returns the CliRunner result."""
    args = ["evaluate", str(market_dir), "--setting", setting, "--split", split, "--methods", ",".join(methods)]
    return runner.invoke(app, [*args, "--seeds", str(seeds), "--out", str(out), "--json"])


def copy_market(source: Path, dest: Path, keep_cache: bool = True) -> Market:
    shutil.copytree(source, dest, ignore=None if keep_cache else shutil.ignore_patterns(".rcb-cache"))
    return Market.open(dest)


def read_episodes(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "episodes.csv")


def expected_summary(episodes: pd.DataFrame, market: Market, setting: str) -> dict[str, dict[str, Any]]:
    """The summary (docs/metrics.md) recomputed from the episodes: per seed with training.replay.metrics, then over
    seeds.

    L and B come from the manifest (SC: 1 and no budget), D* from the slot-wise oracle; only the method, seed,
    day, delivery and cost columns of the episodes are used.
    """
    constraints = {e.day: setting_constraints(e, setting) for e in market.days}
    days = sorted(int(d) for d in episodes["day"].unique())
    d_star = {r.day: r.delivery for r in market_oracle(market, setting, days=days)}
    summary: dict[str, dict[str, Any]] = {}
    for method, rows in episodes.groupby("method", sort=False):
        per_seed = []
        for _, runs in rows.groupby("seed"):
            delivery = runs["delivery"].to_numpy(float)
            cost = runs["cost"].to_numpy(float)
            target = np.array([constraints[d][0] for d in runs["day"]])
            budget = np.array([constraints[d][1] for d in runs["day"]])
            oracle = np.array([d_star[d] for d in runs["day"]])
            per_seed.append(
                (
                    metrics.ans(delivery, cost, target, budget, oracle),
                    metrics.csr(delivery, cost, target, budget),
                    metrics.andr(delivery, cost, target, budget, oracle),
                    metrics.gmetric(delivery, cost, target, oracle),
                )
            )
        ans, csr, andr, gmetric = (np.array(v) for v in zip(*per_seed, strict=True))
        andr = andr[~np.isnan(andr)]
        summary[str(method)] = {
            "ans_median": float(np.median(ans)),
            "ans_mean": float(np.mean(ans)),
            "csr": float(np.mean(csr)),
            "andr": float(np.mean(andr)) if andr.size else None,
            "gmetric": float(np.mean(gmetric)),
            "n_episodes": len(rows),
            "n_seeds": len(per_seed),
        }
    return summary


def assert_summary_matches(written: dict[str, dict[str, Any]], expected: dict[str, dict[str, Any]]) -> None:
    assert list(written) == list(expected)
    for method, want in expected.items():
        got = written[method]
        assert set(got) >= SUMMARY_KEYS, method
        for key, value in want.items():
            if value is None:
                assert got[key] is None, f"{method}.{key}: NaN must be written as null"
            elif isinstance(value, int):
                assert got[key] == value, f"{method}.{key}"
            else:
                assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), f"{method}.{key}"


def method_rows(episodes: pd.DataFrame, method: str, seed: int | None = None) -> pd.DataFrame:
    rows = episodes[episodes["method"] == method]
    if seed is not None:
        rows = rows[rows["seed"] == seed]
    return rows.sort_values("day").reset_index(drop=True)


# ---------------------------------------------------------------------------------------------------------------------
# Shared: one small market and one SC evaluation of every method through the CLI


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("evaluate") / "market"
    generate_market(root, small_config(), workers=1)
    return root


@pytest.fixture(scope="module")
def sc_run(source: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("sc-out") / "out"
    result = run_cli(source, out, "sc", "test", ALL_METHODS, seeds=SC_SEEDS)
    assert result.exit_code == 0, result.output
    return {"out": out, "stdout": json.loads(result.stdout), "market": Market.open(source)}


# ---------------------------------------------------------------------------------------------------------------------
# 1. Outputs, and the summary follows from episodes.csv


def test_summary_follows_from_the_episodes(sc_run: dict[str, Any]):
    """summary.json (and the --json output) is the per-method summary of episodes.csv (docs/metrics.md), recomputed here
    seed by seed with training.replay.metrics and then taken as median / mean over seeds."""
    out, market = sc_run["out"], sc_run["market"]
    written = json.loads((out / "summary.json").read_text())
    expected = expected_summary(read_episodes(out), market, "sc")
    assert list(expected) == ALL_METHODS
    assert_summary_matches(written, expected)
    assert sc_run["stdout"] == written


def test_episodes_csv_has_the_documented_columns_and_consistent_rows(sc_run: dict[str, Any]):
    """One row per (method, seed, test day) with the documented columns (docs/cli.md); roi and feasible agree with
    delivery and cost, and oracle_delivery is the slot-wise oracle's delivery of the day."""
    out, market = sc_run["out"], sc_run["market"]
    episodes = read_episodes(out)
    assert set(EPISODE_COLUMNS) <= set(episodes.columns)
    test_days = sorted(e.day for e in market.split("test"))
    # CEM explores with its seed; RM, PID and the hindsight references are deterministic and play once.
    assert len(episodes) == (SC_SEEDS + len(ALL_METHODS) - 1) * len(test_days)
    for (method, seed), rows in episodes.groupby(["method", "seed"]):
        assert method in ALL_METHODS and seed in range(SC_SEEDS if method == "cem" else 1)
        assert sorted(rows["day"]) == test_days
    delivery, cost = episodes["delivery"].to_numpy(float), episodes["cost"].to_numpy(float)
    assert np.all(delivery >= 0) and np.all(cost >= 0)
    np.testing.assert_allclose(episodes["roi"].to_numpy(float), metrics.roi(delivery, cost), rtol=1e-12)
    feasible = metrics.is_feasible(delivery, cost, 1.0, np.inf)
    np.testing.assert_array_equal(episodes["feasible"].to_numpy(bool), feasible)
    d_star = {r.day: r.delivery for r in market_oracle(market, "sc", days=test_days)}
    np.testing.assert_allclose(episodes["oracle_delivery"], [d_star[d] for d in episodes["day"]], rtol=1e-12)


def test_report_files_and_meta(sc_run: dict[str, Any]):
    """summary.md, the two plots and meta.json are written; meta records the tuned hyperparameters of each
    baseline and the run's split, setting and seeds."""
    out = sc_run["out"]
    for name in ("summary.md", "boxplots.png", "roi_hist.png", "meta.json"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    for png in ("boxplots.png", "roi_hist.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    meta = json.loads((out / "meta.json").read_text())
    assert meta["split"] == "test" and meta["setting"] == "sc" and meta["seeds"] == SC_SEEDS
    assert meta["methods"] == ALL_METHODS
    tuned = meta["tuned"]
    assert set(tuned) == {"rm", "pid", "cem", "plan"}
    assert 0.0 <= tuned["rm"]["ratio"] <= 4.0
    assert set(tuned["plan"]) == {"margin", "cost_sd", "train_score"}
    assert set(pid.PARAMS) <= set(tuned["pid"])
    assert set(cem.PARAMS) <= set(tuned["cem"])
    for record in tuned.values():
        assert "train_score" in record
    markdown = (out / "summary.md").read_text()
    for method in ALL_METHODS:
        assert method in markdown
    assert "test" in markdown and "SC" in markdown.upper()


# ---------------------------------------------------------------------------------------------------------------------
# 2. The hindsight reference rows


def test_oracle_rows(sc_run: dict[str, Any]):
    """oracle-slot is D* itself: every row feasible with D = D*, so ANS = CSR = 1 and ANDR = 0. The day-wise oracle
    (one ratio all day) never beats the slot-wise one in SC."""
    out = sc_run["out"]
    episodes = read_episodes(out)
    summary = json.loads((out / "summary.json").read_text())
    slot = method_rows(episodes, "oracle-slot")
    np.testing.assert_array_equal(slot["delivery"], slot["oracle_delivery"])
    assert slot["feasible"].all()
    assert summary["oracle-slot"]["ans_mean"] == 1.0 and summary["oracle-slot"]["ans_median"] == 1.0
    assert summary["oracle-slot"]["csr"] == 1.0 and summary["oracle-slot"]["andr"] == 0.0
    day = method_rows(episodes, "oracle-day")
    assert day["feasible"].all()
    assert np.all(day["delivery"] <= day["oracle_delivery"] * (1 + 1e-9) + 1e-12)
    assert summary["oracle-day"]["ans_mean"] <= 1 + 1e-9 and summary["oracle-day"]["ans_median"] <= 1 + 1e-9


# ---------------------------------------------------------------------------------------------------------------------
# 3. Seeds


def test_deterministic_methods_play_once_and_cem_plays_every_seed(sc_run: dict[str, Any]):
    """RM, PID and the oracle rows would repeat across seeds: they play once and claim one seed; CEM's seeded
    exploration makes at least one episode differ between its seeds."""
    episodes = read_episodes(sc_run["out"])
    summary = json.loads((sc_run["out"] / "summary.json").read_text())
    for method in ("rm", "pid", "oracle-day", "oracle-slot"):
        assert set(episodes.loc[episodes["method"] == method, "seed"]) == {0}
        assert summary[method]["n_seeds"] == 1
    assert summary["cem"]["n_seeds"] == SC_SEEDS and summary["rm"]["gmetric_gamma"] == 3.0
    cem_costs = [tuple(method_rows(episodes, "cem", seed)["cost"]) for seed in range(SC_SEEDS)]
    assert len(set(cem_costs)) > 1


def test_evaluation_is_reproducible(sc_run: dict[str, Any]):
    """The same request gives the same episodes (CEM included) as the CLI run, whatever the number of seeds
    asked for: a seed's episodes depend on that seed only."""
    market = sc_run["market"]
    written = read_episodes(sc_run["out"])
    for _ in range(2):
        again = evaluate(market, "sc", "test", ["cem", "pid"], seeds=2)
        for method in ("cem", "pid"):
            for seed in (0, 1):
                got, want = method_rows(again.episodes, method, seed), method_rows(written, method, seed)
                np.testing.assert_allclose(got["delivery"], want["delivery"], rtol=1e-15, atol=0)
                np.testing.assert_allclose(got["cost"], want["cost"], rtol=1e-15, atol=0)


# ---------------------------------------------------------------------------------------------------------------------
# 4. Tuning cache


def cache_files(root: Path, setting: str) -> dict[str, Path]:
    return {m: root / ".rcb-cache" / "tuning" / f"{m}-{setting}.json" for m in ("rm", "pid", "cem")}


def count_tunes(monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> dict[str, int]:
    """Wrap every baseline's ``tune`` to count calls (or to fail: the cache must be used)."""
    calls = {"rm": 0, "pid": 0, "cem": 0}
    for name, module in (("rm", rm), ("pid", pid), ("cem", cem)):
        original = module.tune

        def wrapped(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any):
            if fail:
                raise AssertionError(f"{_name} re-tuned although its cache is valid")
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, "tune", wrapped)
    return calls


def test_tuned_parameters_are_cached_beside_the_data_and_reused(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Tuning writes .rcb-cache/tuning/<method>-<setting>.json in the market; the next evaluation reads it
    (no tuner runs) and gives the same parameters and episodes, in SC and in MC (separate files)."""
    market = copy_market(source, tmp_path / "market", keep_cache=False)
    methods = ["rm", "pid", "cem"]
    for setting in ("sc", "mc"):
        calls = count_tunes(monkeypatch)
        first = evaluate(market, setting, "test", methods, seeds=2)
        assert calls == {"rm": 1, "pid": 1, "cem": 1}
        files = cache_files(market.root, setting)
        for method, path in files.items():
            record = json.loads(path.read_text())
            assert record["method"] == method and record["setting"] == setting
            assert record["params"] == {k: v for k, v in first.meta["tuned"][method].items() if k != "train_score"}
        monkeypatch.undo()
        count_tunes(monkeypatch, fail=True)
        second = evaluate(market, setting, "test", methods, seeds=2)
        monkeypatch.undo()
        assert second.meta["tuned"] == first.meta["tuned"]
        pd.testing.assert_frame_equal(second.episodes, first.episodes)


@pytest.mark.parametrize("damage", ["garbage", "stale-key", "deleted", "missing-params"])
def test_a_damaged_or_stale_tuning_cache_is_retuned(
    damage: str, source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A cache file that is unreadable, keyed to other train data, missing, or incomplete is ignored: that
    baseline is tuned again (deterministically: same parameters) and the file rewritten; the others are reused."""
    market = copy_market(source, tmp_path / "market", keep_cache=False)
    first = evaluate(market, "sc", "test", ["rm", "pid", "cem"], seeds=1)
    path = cache_files(market.root, "sc")["pid"]
    if damage == "garbage":
        path.write_text("{not json")
    elif damage == "stale-key":
        record = json.loads(path.read_text())
        path.write_text(json.dumps({**record, "key": "0" * 64}))
    elif damage == "deleted":
        path.unlink()
    else:
        record = json.loads(path.read_text())
        path.write_text(json.dumps({k: v for k, v in record.items() if k != "params"}))
    calls = count_tunes(monkeypatch)
    second = evaluate(market, "sc", "test", ["rm", "pid", "cem"], seeds=1)
    assert calls == {"rm": 0, "pid": 1, "cem": 0}
    assert second.meta["tuned"] == first.meta["tuned"]
    pd.testing.assert_frame_equal(second.episodes, first.episodes)
    rewritten = json.loads(path.read_text())
    assert rewritten["params"] == {k: v for k, v in first.meta["tuned"]["pid"].items() if k != "train_score"}
    assert rewritten["key"] != "0" * 64


def test_changed_train_data_invalidates_the_tuning_cache(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The cache key covers the train days: moving a day out of the train split makes every baseline re-tune."""
    market = copy_market(source, tmp_path / "market", keep_cache=False)
    evaluate(market, "sc", "test", ["rm", "pid"], seeds=1)
    manifest = market.root / "manifest.json"
    raw = json.loads(manifest.read_text())
    train = [d for d in raw["days"] if d["split"] == "train"]
    train[0]["split"] = "test"
    manifest.write_text(json.dumps(raw))
    calls = count_tunes(monkeypatch)
    evaluate(Market.open(market.root), "sc", "test", ["rm", "pid"], seeds=1)
    assert calls == {"rm": 1, "pid": 1, "cem": 0}


def test_a_changed_oracle_invalidates_the_tuning_cache(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A tuning's score is D / D* on the train days: new oracle semantics (D* recomputed) make every baseline
    re-tune, as new train days do."""
    import training.bidders.tuned

    market = copy_market(source, tmp_path / "market", keep_cache=False)
    evaluate(market, "sc", "test", ["rm", "pid"], seeds=1)
    monkeypatch.setattr(
        training.bidders.tuned, "ORACLE_SEMANTICS", training.bidders.tuned.ORACLE_SEMANTICS + " (changed)"
    )
    calls = count_tunes(monkeypatch)
    evaluate(Market.open(market.root), "sc", "test", ["rm", "pid"], seeds=1)
    assert calls == {"rm": 1, "pid": 1, "cem": 0}


def test_missing_caches_are_computed(source: Path, tmp_path: Path, sc_run: dict[str, Any]):
    """With no .rcb-cache at all (no oracle answers, no tuned parameters), evaluate solves and tunes what it needs,
    writes the caches and gives the same episodes as the run that had them."""
    market_dir = tmp_path / "market"
    copy_market(source, market_dir, keep_cache=False)
    assert not (market_dir / ".rcb-cache").exists()
    out = tmp_path / "out"
    result = run_cli(market_dir, out, "sc", "test", ["rm", "oracle-slot"], seeds=1)
    assert result.exit_code == 0, result.output
    assert any((market_dir / ".rcb-cache" / "oracle").iterdir())
    assert (market_dir / ".rcb-cache" / "tuning" / "rm-sc.json").is_file()
    episodes, reference = read_episodes(out), read_episodes(sc_run["out"])
    for method in ("rm", "oracle-slot"):
        got, want = method_rows(episodes, method, 0), method_rows(reference, method, 0)
        pd.testing.assert_frame_equal(got, want, obj=method)


# ---------------------------------------------------------------------------------------------------------------------
# 5. Clear errors


def assert_clear_error(result, *fragments: str, one_line: bool = True) -> None:
    """Exit code 2, no traceback, the fragments in the message (on one line when asked)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    if one_line:
        assert len(lines) == 1, result.output
    for fragment in fragments:
        assert fragment in result.output, (fragment, result.output)


def test_unknown_method_lists_the_known_ones(source: Path, tmp_path: Path):
    """An unknown method is refused before any work, and the message names it and lists the known methods."""
    result = run_cli(source, tmp_path / "out", "sc", "test", ["rm", "bogus"], seeds=1)
    assert_clear_error(result, "bogus", "rm", "pid", "cem", "oracle-day", "oracle-slot")
    assert not (tmp_path / "out").exists()


def test_split_without_days_is_a_clear_error(tmp_path: Path):
    """A market with no OOD days cannot be evaluated on --split ood."""
    root = tmp_path / "no-ood"
    generate_market(root, small_config(days_id=4, days_ood=0), workers=1)
    result = run_cli(root, tmp_path / "out", "sc", "ood", ["rm"], seeds=1)
    assert_clear_error(result, "ood", "no days")
    market = Market.open(root)
    with pytest.raises(EvaluationError, match="no days"):
        evaluate(market, "sc", "ood", ["rm"], seeds=1)


def test_zero_seeds_is_refused(source: Path, tmp_path: Path):
    """--seeds 0 is a usage error (exit 2, no traceback); the Python API refuses it too."""
    result = run_cli(source, tmp_path / "out", "sc", "test", ["rm"], seeds=0)
    assert_clear_error(result, "seeds", one_line=False)
    with pytest.raises(EvaluationError, match="seeds"):
        evaluate(Market.open(source), "sc", "test", ["rm"], seeds=0)


def test_missing_market_dir_is_a_clear_error(tmp_path: Path):
    """A directory without a market is named in a one-line error."""
    missing = tmp_path / "nowhere"
    result = run_cli(missing, tmp_path / "out", "sc", "test", ["rm"], seeds=1)
    assert_clear_error(result, "nowhere")


def test_unknown_split_is_a_clear_error(source: Path, tmp_path: Path):
    """The CLI evaluates test or ood, never the train days the baselines were tuned on."""
    result = run_cli(source, tmp_path / "out", "sc", "train", ["rm"], seeds=1)
    assert_clear_error(result, "--split", one_line=False)
    said = " ".join(result.output.replace("│", " ").split())  # typer's error box wraps the message
    assert "'train' is not one of 'test', 'ood', 'validation'" in said
    assert not (tmp_path / "out").exists()


def test_parse_methods():
    """Methods are a comma list of known names, trimmed, each at most once."""
    assert parse_methods(" rm, pid ,oracle-slot") == ["rm", "pid", "oracle-slot"]
    assert known_methods() == ALL_METHODS
    with pytest.raises(EvaluationError, match="unknown method"):
        parse_methods("rm,zzz")
    with pytest.raises(EvaluationError, match="twice"):
        parse_methods("rm,rm")
    with pytest.raises(EvaluationError, match="no methods"):
        parse_methods(" , ")


# ---------------------------------------------------------------------------------------------------------------------
# 6. MC end to end


def test_mc_end_to_end(source: Path, tmp_path: Path):
    """MC on the OOD days: every episode respects its day's budget, the summary follows from the episodes, and
    the episodes carry the manifest's per-day L and B."""
    market = copy_market(source, tmp_path / "market")
    out = tmp_path / "out"
    result = run_cli(market.root, out, "mc", "ood", ALL_METHODS, seeds=2)
    assert result.exit_code == 0, result.output
    episodes = read_episodes(out)
    constraints = {e.day: setting_constraints(e, "mc") for e in market.days}
    assert sorted(episodes["day"].unique()) == sorted(e.day for e in market.split("ood"))
    budget = np.array([constraints[d][1] for d in episodes["day"]])
    target = np.array([constraints[d][0] for d in episodes["day"]])
    assert np.all(np.isfinite(budget))
    assert np.all(episodes["cost"].to_numpy(float) <= budget + 1e-9)
    np.testing.assert_array_equal(
        episodes["feasible"].to_numpy(bool),
        metrics.is_feasible(episodes["delivery"], episodes["cost"], target, budget),
    )
    written = json.loads((out / "summary.json").read_text())
    assert_summary_matches(written, expected_summary(episodes, market, "mc"))
    assert written["oracle-slot"]["ans_mean"] == 1.0 and written["oracle-slot"]["csr"] == 1.0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["setting"] == "mc" and meta["split"] == "ood" and set(meta["tuned"]) == {"rm", "pid", "cem", "plan"}


def test_the_summary_counts_feasible_episodes_above_the_oracle():
    """D* is the paper's reference, not a strict bound (docs/metrics.md): a feasible episode that delivered more
    than a positive D* is counted (an infeasible one, or a D* = 0 day, is not)."""
    import pandas as pd

    from training.evaluation.evaluate import summarize

    episodes = pd.DataFrame(
        {
            "method": ["m"] * 4,
            "seed": [0] * 4,
            "day": [0, 1, 2, 3],
            "delivery": [101.0, 50.0, 120.0, 3.0],
            "cost": [50.0, 40.0, 200.0, 1.0],
            "roi": [2.02, 1.25, 0.6, 3.0],
            "feasible": [True, True, False, True],
            "oracle_delivery": [100.0, 100.0, 100.0, 0.0],
            "roi_target": [1.0] * 4,
            "budget": [np.inf] * 4,
            "score": [1.01, 0.5, 0.0, 1.0],
        }
    )
    row = summarize(episodes, ["m"])["m"]
    assert row["n_above_oracle"] == 1 and row["n_zero_oracle"] == 1
