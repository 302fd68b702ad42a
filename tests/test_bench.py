"""Smoke test of the attention benchmark CLI (--quick): structure and consistency, no timings."""
import json
import math
import subprocess
import sys

import pytest

from fibexp import bench

QUICK = (64, 128)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run([sys.executable, "-m", "fibexp.bench", "attention", "--quick", "--out", str(out)],
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
    assert set(got) == {(p, t) for p in bench.PATHS for t in QUICK}
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
        for p in bench.PATHS:
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
    assert data["config"]["alpha"] == pytest.approx(bench.stagger_alpha())
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
    proc = subprocess.run([sys.executable, "-m", "fibexp.bench", "_measure_mem_first", "--path", "gather",
                           "--length", "64"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["peak_mib"] >= 0 and r["hwm_mib"] >= r["rss_before_mib"] > 0
