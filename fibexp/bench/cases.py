"""What the benchmarks measure, by name: the paths, lengths and presets `fibexp-bench` offers on its
command line. No torch here, so `fibexp-bench --help` and a bad option answer at once; the
benchmark modules (attention, model, latency) read their cases from this one place."""
from __future__ import annotations

# attention: one layer of each path, at these lengths
PATHS = ("dense", "gather", "mask", "learned")
FULL_LENGTHS = (1024, 4096, 16384)
QUICK_LENGTHS = (64, 128)

# model: the whole model at two widths
MODEL_PRESETS = {
    "tiny": dict(n_layers=4, d_model=128, n_heads=4, n_kv_heads=2),  # conf/model/tiny.yaml (the CPU default)
    # conf/model/paper60m.yaml's width (d 512, 8 heads / 2 KV, SwiGLU 1366) at half its 16 layers
    "paper-width": dict(n_layers=8, d_model=512, n_heads=8, n_kv_heads=2, ffn_hidden=1366),
}
COMPILE_PATHS = ("dense", "static")
COMPILE_MAX_T = 256  # torch.compile is measured up to this length (compiling costs 15-70 s per graph on CPU)
CROSSOVER_TOKENS = 2048  # batch = tokens // T at each scanned length

# latency (claim A9): conf/model/ presets, and --quick's
LATENCY_PRESETS = ("tiny", "cpu", "paper60m")
LATENCY_QUICK = {"preset": "tiny", "seq_len": 64}  # the tiny model at a short length, seconds on CPU
