"""Figures logged to MLflow as artifacts (per run, and the sweep report), where a picture says
more than a number."""
from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def ppl_vs_length(metrics: dict[str, float], seq_len: int):
    """Held-out perplexity against evaluated length (1x, 2x, 4x training), one line per set."""
    series: dict[str, list[tuple[int, float]]] = {}
    for name, value in metrics.items():
        m = re.fullmatch(r"extrap/ppl_x(\d+)/(.+)", name)
        if m:
            series.setdefault(m[2], []).append((int(m[1]) * seq_len, value))
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, points in sorted(series.items()):
        xs, ys = zip(*sorted(points))
        ax.plot(xs, ys, marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("evaluated length (tokens)")
    ax.set_ylabel("held-out perplexity")
    ax.axvline(seq_len, color="grey", lw=0.8, ls="--")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def close(fig) -> None:
    plt.close(fig)


def position_bins(ours: dict[str, list[float]], paper: dict[str, list[float]], seq_len: int):
    """Loss per position bin (the papers' 8 bins), ours beside the paper's: is the gain spread evenly?"""
    fig, axes = plt.subplots(1, 2 if paper else 1, figsize=(10 if paper else 6, 4), squeeze=False)
    titles = (f"ours (training length {seq_len})", "paper A (FineWeb-Edu, T 1024)")
    for ax, series, title in zip(axes[0], (ours, paper), titles):
        for name, values in series.items():
            ax.plot(range(len(values)), values, marker="o", label=name)
        ax.set_xlabel("position bin (8 equal bins of the window)")
        ax.set_ylabel("held-out loss (nats)")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def extrapolation(ours: dict[str, dict[int, float]], paper: dict[str, dict[int, float]]):
    """Relative held-out ppl change against the evaluated length (x the training length); the
    paper's panel apart, its +201% would flatten ours."""
    fig, axes = plt.subplots(1, 2 if paper else 1, figsize=(10 if paper else 6, 4), squeeze=False)
    for ax, series, title in zip(axes[0], (ours, paper), ("ours", "paper A (FineWeb-Edu, trained at 1024)")):
        factors = sorted({k for points in series.values() for k in points})
        for name, points in series.items():
            xs = sorted(points)
            ax.plot(xs, [100 * points[x] for x in xs], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(factors, [f"{k}x" for k in factors])
        ax.set_xlabel("evaluated length (x training length)")
        ax.set_ylabel("held-out ppl change vs 1x (%)")
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def lr_grid(ours: dict[str, dict[float, float | None]], metric: str):
    """Held-out metric against the learning rate per schedule; diverged runs drawn as x at the top."""
    fig, ax = plt.subplots(figsize=(6, 4))
    finite = [v for points in ours.values() for v in points.values() if v is not None]
    top = max(finite) * 1.02 if finite else 1.0
    for name, points in ours.items():
        xs = sorted(x for x, v in points.items() if v is not None)
        line, = ax.plot(xs, [points[x] for x in xs], marker="o", label=name)
        bad = [x for x, v in points.items() if v is None]
        if bad:
            ax.plot(bad, [top] * len(bad), ls="none", marker="x", color=line.get_color())
    ax.set_xscale("log")
    ax.set_xlabel("learning rate (x: diverged)")
    ax.set_ylabel(metric)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def count_ones(rows: list[tuple[str, float, float | None]], chance: float | None):
    """Held-out accuracy per schedule/depth/order (bars), paper B's where known (dots), and the
    majority guess (line)."""
    fig, ax = plt.subplots(figsize=(max(4, 0.8 * len(rows) + 2), 4))
    ax.bar(range(len(rows)), [100 * a for _, a, _ in rows], label="ours")
    known = [(i, p) for i, (_, _, p) in enumerate(rows) if p is not None]
    if known:
        ax.plot([i for i, _ in known], [100 * p for _, p in known], ls="none", marker="o", color="black",
                label="paper B (same depth / log2 n)")
    ax.set_xticks(range(len(rows)), [name for name, _, _ in rows], rotation=30, ha="right", fontsize=8)
    if chance is not None:
        ax.axhline(100 * chance, color="grey", ls="--", lw=0.8, label="majority guess (ours)")
    ax.legend(fontsize=8)
    ax.set_ylabel("held-out accuracy (%)")
    ax.set_ylim(0, 105)
    fig.tight_layout()
    return fig
