"""Smoke tests of the benchmark CLI (`attention --quick`, `model --quick`): structure and
consistency of what they record (ratios recomputed from the raw rounds), no timing claims."""
import json
import math
import statistics
import subprocess
import sys

import pytest
import torch

from fibexp.bench import attention, crossover, whole_model
from fibexp.model import mixers

pytestmark = pytest.mark.slow  # the benchmarks themselves run in the module's fixtures (minutes)

QUICK = (64, 128)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run([sys.executable, "-m", "fibexp.cli.bench", "attention", "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    files = sorted(out.glob("attention-*.json"))
    names = {f.name for f in files}
    assert "attention-latest.json" in names and len(files) == 2, names
    stamped = next(f for f in files if f.name != "attention-latest.json")
    assert stamped.read_text() == (out / "attention-latest.json").read_text()
    assert str(stamped.resolve()) in proc.stdout  # says where the JSON went
    return json.loads(stamped.read_text()), proc.stdout


def _positive(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_every_path_and_length_measured(report):
    data, _ = report
    assert data["quick"] and data["config"]["lengths"] == list(QUICK) and data["config"]["repeats"] == 1
    got = {(r["path"], r["T"]): r for r in data["results"]}
    assert set(got) == {(p, t) for p in attention.PATHS for t in QUICK}
    for r in got.values():
        assert r["status"] == "ok", r
        for key in ("fwd_ms", "fwd_bwd_ms", "peak_mib", "gflop", "flops",
                    "speedup_fwd_bwd_vs_dense", "memory_ratio_vs_dense"):
            assert _positive(r[key]), (r["path"], r["T"], key, r[key])
        assert r["memory_method"] in ("clear_refs", "ru_maxrss")


def test_ratios_are_computed_from_the_figures(report):
    data, _ = report
    got = {(r["path"], r["T"]): r for r in data["results"]}
    for t in QUICK:
        dense = got["dense", t]
        assert dense["speedup_fwd_bwd_vs_dense"] == pytest.approx(1.0)
        for p in attention.PATHS:
            r = got[p, t]
            assert r["speedup_fwd_bwd_vs_dense"] == pytest.approx(dense["fwd_bwd_ms"] / r["fwd_bwd_ms"], rel=1e-6)
            assert r["memory_ratio_vs_dense"] == pytest.approx(r["peak_mib"] / dense["peak_mib"], rel=1e-6)


def test_flops_are_analytic(report):
    data, _ = report
    got = {(r["path"], r["T"]): r for r in data["results"]}
    for t in QUICK:
        assert got["dense", t]["flops"] == 8 * t * (t + 1) // 2 * 64 * 4
        assert got["gather", t]["flops"] == got["mask", t]["flops"] < got["dense", t]["flops"]
        assert got["learned", t]["flops"] > got["gather", t]["flops"]  # floor + ceil rows and the mix


def test_metadata_and_targets(report):
    data, stdout = report
    assert data["config"]["alpha"] == pytest.approx(attention.stagger_alpha())
    assert "stagger" in data["config"]["alpha_source"]
    m = data["machine"]
    assert m["nproc"] >= 1 and m["torch_threads"] == m["nproc"] and m["torch"] and m["cpu_model"]
    assert "clear_refs" in data["method"]["memory"]
    assert len(data["code"]["start"]["kernels_sha256"]) == 16 and "changed_during_run" in data["code"]
    for key in ("load_start", "load_end"):
        assert {"load1", "uptime"} <= set(data[key])
    results = {c["result"] for c in data["targets"]}
    assert results <= {"PASS", "FAIL", "n/a"}
    # quick lengths: the 4096/16384 targets do not apply; learned vs gather is checked per T
    assert [c["result"] for c in data["targets"] if "4096" in c["target"] or "16384" in c["target"]] == ["n/a"] * 4
    assert sum("learned fwd / gather fwd" in c["target"] for c in data["targets"]) == len(QUICK)
    for c in data["targets"]:
        assert f"{c['result']:<4} {c['target']}" in stdout


def test_ru_maxrss_fallback_runs():
    """The fallback used where /proc/self/clear_refs is not writable: a clean first step."""
    proc = subprocess.run([sys.executable, "-m", "fibexp.cli.bench", "_measure_mem_first", "--path", "gather",
                           "--length", "64"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["peak_mib"] >= 0 and r["hwm_mib"] >= r["rss_before_mib"] > 0


# ---------------------------------------------------------------- fibexp-bench model

@pytest.fixture(scope="module")
def model_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("model-bench")
    proc = subprocess.run([sys.executable, "-m", "fibexp.cli.bench", "model", "--quick", "--threads", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    stamped = [f for f in out.glob("model-*.json") if f.name != "model-latest.json"]
    assert len(stamped) == 1 and stamped[0].read_text() == (out / "model-latest.json").read_text()
    assert str(stamped[0].resolve()) in proc.stdout
    return json.loads(stamped[0].read_text()), proc.stdout


def test_model_bench_measures_every_path_at_every_quick_case(model_report):
    data, stdout = model_report
    assert data["quick"] and [tuple(c) for c in data["config"]["cases"]] == list(whole_model.QUICK_MODEL_CASES)
    assert [(r["preset"], r["T"], r["batch"]) for r in data["results"]] == list(whole_model.QUICK_MODEL_CASES)
    for case in data["results"]:
        assert case["status"] == "ok" and case["threads"] == 1 and set(case["paths"]) == set(whole_model.MODEL_PATHS)
        for name, r in case["paths"].items():
            assert len(r["train_ms"]) == len(r["infer_ms"]) == data["config"]["repeats"] == 2
            for key in ("train_ms_median", "infer_ms_median", "train_tokens_per_s", "infer_tokens_per_s"):
                assert _positive(r[key]), (name, key, r[key])
            assert r["train_tokens_per_s"] == pytest.approx(case["tokens"] / r["train_ms_median"] * 1e3)
            assert r["peak_train_mib"] is None or r["peak_train_mib"] >= 0
        paths = case["paths"]
        # what auto ran: the mask path at these short lengths, the gather for learned alpha
        assert paths["static"]["impl"] == mixers.resolve_impl(mixers.Impl.auto, torch.device("cpu"), case["T"]).value
        assert paths["learned"]["impl"] == "gather" and paths["dense"]["impl"] is None
        assert paths["no-mixer"]["n_params"] == paths["static"]["n_params"]
        assert f"{case['preset']} T={case['T']} x{case['batch']}" in stdout
    assert data["auto_cpu_mask_below"] == mixers.CPU_MASK_BELOW
    assert f"mask path below T={mixers.CPU_MASK_BELOW}" in stdout


def test_model_bench_ratios_are_paired_medians_of_its_rounds(model_report):
    data, _ = model_report
    for case in data["results"]:
        p = case["paths"]
        for name, r in p.items():
            want = statistics.median(d / x for d, x in zip(p["dense"]["train_ms"], r["train_ms"]))
            assert r["train_vs_dense"] == pytest.approx(want)
            want = statistics.median(x / b for x, b in zip(r["train_ms"], p["no-mixer"]["train_ms"]))
            assert r["train_over_bound"] == pytest.approx(want)
        assert p["dense"]["train_vs_dense"] == pytest.approx(1.0) and p["no-mixer"]["train_over_bound"] == 1.0
        ratios = case["ratios"]
        assert ratios["static_vs_dense"] == p["static"]["train_vs_dense"]
        assert ratios["learned_over_static"] == pytest.approx(
            statistics.median(a / b for a, b in zip(p["learned"]["train_ms"], p["static"]["train_ms"])))


def test_model_bench_records_crossover_and_targets(model_report):
    data, stdout = model_report
    scan = data["crossover"]["tiny"]
    assert [pt["T"] for pt in scan["points"]] == list(crossover.QUICK_CROSSOVER_LENGTHS)
    for pt in scan["points"]:
        assert all(_positive(pt[f"{impl}_{mode}_ms"]) for impl in ("gather", "mask") for mode in ("train", "infer"))
    assert scan["train"] == crossover.crossover_length(scan["points"], "train")
    assert {c["result"] for c in data["targets"]} <= {"PASS", "FAIL", "n/a"}
    for c in data["targets"]:
        assert f"{c['result']:<4} {c['target']}" in stdout
    # the paper-width targets need the full run's cases; learned / static applies at every case
    assert all(c["result"] == "n/a" for c in data["targets"] if "paper-width" in c["target"])
    assert sum(c["target"].startswith("learned step time") for c in data["targets"]) == len(whole_model.QUICK_MODEL_CASES)
    for key in ("load_start", "load_end"):
        assert {"load1", "uptime"} <= set(data[key])
    assert data["method"]["no-mixer"] and data["config"]["vocab"] == whole_model.MODEL_VOCAB


def test_crossover_is_where_the_gather_keeps_winning():
    def pts(*wins):
        return [{"T": 64 * 2 ** i, "gather_train_ms": 1.0 if w else 2.0, "mask_train_ms": 1.5} for i, w in enumerate(wins)]

    assert crossover.crossover_length(pts(False, False, True, True), "train") == 256
    assert crossover.crossover_length(pts(True, False, True), "train") == 256  # a lone early win does not count
    assert crossover.crossover_length(pts(True, True), "train") == 64
    assert crossover.crossover_length(pts(True, False), "train") is None


# ---------------------------------------------------------------- fibexp-bench latency

def test_latency_bench_times_every_family_by_paper_a_protocol(tmp_path):
    """`latency --quick`: every paper-A family, 5 timed passes each, tokens/s and the paired
    ratios recomputed from the raw pass times, the table printed, the JSON written."""
    from fibexp.bench import family_latency

    proc = subprocess.run([sys.executable, "-m", "fibexp.cli.bench", "latency", "--quick", "--threads", "1", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    stamped = [f for f in tmp_path.glob("latency-*.json") if f.name != "latency-latest.json"]
    assert len(stamped) == 1 and str(stamped[0].resolve()) in proc.stdout
    data = json.loads(stamped[0].read_text())
    res = data["result"]
    assert (res["preset"], res["T"], res["batch"], res["threads"]) == ("tiny", 64, 8, 1)
    assert (data["config"]["warmup"], data["config"]["timed"]) == (2, 5)
    fams = res["families"]
    assert list(fams) == list(family_latency.FAMILIES)
    learned = fams["fib_learned"]["ms"]
    for name, r in fams.items():
        assert len(r["ms"]) == 5 and all(_positive(x) for x in r["ms"])
        assert r["tokens_per_s"] == pytest.approx(statistics.median(8 * 64 / (x / 1e3) for x in r["ms"]))
        assert r["tokens_per_s_min"] <= r["tokens_per_s"] <= r["tokens_per_s_max"]
        assert r["x_learned"] == pytest.approx(statistics.median(a / b for a, b in zip(learned, r["ms"])))
        assert f"{name:<13} {r['impl'] or '-':<7} {r['tokens_per_s']:>13,.0f}" in proc.stdout
    assert fams["fib_learned"]["impl"] == "gather" and fams["dense"]["impl"] is None
    assert {fams[f]["impl"] for f in family_latency.INTEGER} == {"mask"}  # auto on CPU below T=256
    assert fams["fib_learned"]["n_params"] == fams["fib_fixed"]["n_params"] + 4  # one alpha per layer
    assert data["integer_over_learned"] == pytest.approx([min(fams[f]["x_learned"] for f in family_latency.INTEGER),
                                                          max(fams[f]["x_learned"] for f in family_latency.INTEGER)])
    assert {"load1", "uptime"} <= set(data["load_start"]) and data["method"]["protocol"]


def test_latency_bench_refuses_a_bad_window(capsys):
    from fibexp.cli import bench

    with pytest.raises(SystemExit) as exit_:
        bench.main(["latency", "--window", "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "fibexp-bench: error: --window: 0; allowed: an integer >= 1"


@pytest.mark.slow
def test_grid_bench_times_a_sweeps_composing_and_checking_in_fresh_processes(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run([sys.executable, "-m", "fibexp.cli.bench", "grid", "--config-name", "table1", "--skip",
                           "pow2", "--repeats", "2", "--out", str(out), "scale=smoke"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "grid-latest.json").read_text())
    assert report["overrides"] == ["scale=smoke"] and len(report["runs"]) == 2
    for run in report["runs"]:  # table1: 5 variants x 4 windows, pow2 fixed, dense; pow2 stagger and fixed skipped
        assert run["status"] == "ok" and run["cells"] == 4 * 4 + 1 and run["skipped"] == 4 + 1
        assert 0 < run["import_s"] + run["expand_s"] + run["compose_check_s"] < run["process_s"]
    s = report["summary"]["process_s"]
    assert s["min"] <= s["median"] <= s["max"] and sorted(s["all"]) == sorted(r["process_s"] for r in report["runs"])
    (check,) = report["checks"]
    assert check["limit"] == "< 30 s" and check["result"] == ("PASS" if s["median"] < 30 else "FAIL")
    assert "fresh processes; median (min-max)" in proc.stdout
