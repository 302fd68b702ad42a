"""Figures logged to MLflow as artifacts, where a picture says more than a number."""
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
