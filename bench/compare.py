#!/usr/bin/env python3
"""compare.py: times the workloads W1-W7, W10 and W11 of bench/README.md in NumPy and PyTorch
(CPU), whichever are installed, so kiln's numbers can be placed next to
theirs. With kiln_bench's JSON (default build/bench.json, from `make bench`)
it adds kiln-fused's median for the same workload and the ratio.

    python3 bench/compare.py [--runs 5] [--threads N] [--only W1,W7-1024] [--json FILE]

Same rules as kiln_bench: one warm-up, then the median of --runs timed runs
(at least 5), inputs made before the clock starts, outputs allocated by each
library as it likes. NumPy has no fused kernels: it runs op by op, like
kiln-eager. Not a test: nothing fails on a slow number."""

import argparse
import json
import os
import statistics
import sys
import time

MIN_RUNS = 5


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=7, help="timed runs per row (at least 5)")
    p.add_argument("--threads", type=int, help="threads for BLAS and PyTorch (default: theirs)")
    p.add_argument("--only", help="comma-separated workload names (W1,...,W7-1024,W7-2048)")
    p.add_argument("--json", default="build/bench.json", help="kiln_bench's JSON for the kiln column")
    return p.parse_args()


ARGS = parse_args()
if ARGS.threads:
    # BLAS libraries read these once, when NumPy or PyTorch is imported.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

try:
    import numpy as np
except ImportError:
    np = None
try:
    import torch
except ImportError:
    torch = None


# ---- workloads: name, what, sizes; one builder per library -----------------
# Each builder takes the library's seeded input arrays and returns a function
# that computes the workload once. Sizes are kiln_bench's (bench/README.md).
def numpy_gelu(x):
    # NumPy has no erf; this is PyTorch's gelu(approximate="tanh"), within
    # 1e-3 of the erf form kiln and torch.nn.functional.gelu compute.
    return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


def numpy_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def numpy_layer_norm(x, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(axis=-1, keepdims=True) + eps)


WORKLOADS = [
    ("W1", "relu(a*b + c) * sigmoid(a), f32[16M]", {"a": (1 << 24,), "b": (1 << 24,), "c": (1 << 24,)},
     {"numpy": lambda t: lambda: np.maximum(t["a"] * t["b"] + t["c"], 0) / (1 + np.exp(-t["a"])),
      "torch": lambda t: lambda: torch.relu(t["a"] * t["b"] + t["c"]) * torch.sigmoid(t["a"])}),
    ("W2", "softmax over rows of 4096x4096", {"x": (4096, 4096)},
     {"numpy": lambda t: lambda: numpy_softmax(t["x"]),
      "torch": lambda t: lambda: torch.softmax(t["x"], dim=1)}),
    ("W3", "layer_norm over 8192x1024", {"x": (8192, 1024)},
     {"numpy": lambda t: lambda: numpy_layer_norm(t["x"]),
      "torch": lambda t: lambda: torch.nn.functional.layer_norm(t["x"], (1024,))}),
    ("W4", "gelu(x @ W^T + b), x 4096x1024, W 1024x1024", {"x": (4096, 1024), "w": (1024, 1024), "b": (1024,)},
     {"numpy": lambda t: lambda: numpy_gelu(t["x"] @ t["w"].T + t["b"]),
      "torch": lambda t: lambda: torch.nn.functional.gelu(torch.nn.functional.linear(t["x"], t["w"], t["b"]))}),
    ("W5", "sum of 64M f32", {"x": (1 << 26,)},
     {"numpy": lambda t: lambda: t["x"].sum(),
      "torch": lambda t: lambda: t["x"].sum()}),
    ("W6", "column standardization of 8192x2048", {"x": (8192, 2048)},
     {"numpy": lambda t: lambda: (t["x"] - t["x"].mean(axis=0)) / t["x"].std(axis=0, ddof=1),
      "torch": lambda t: lambda: (t["x"] - t["x"].mean(dim=0)) / t["x"].std(dim=0)}),
    ("W7-1024", "matmul 1024^3", {"a": (1024, 1024), "b": (1024, 1024)},
     {"numpy": lambda t: lambda: t["a"] @ t["b"],
      "torch": lambda t: lambda: t["a"] @ t["b"]}),
    ("W7-2048", "matmul 2048^3", {"a": (2048, 2048), "b": (2048, 2048)},
     {"numpy": lambda t: lambda: t["a"] @ t["b"],
      "torch": lambda t: lambda: t["a"] @ t["b"]}),
    ("W10", "cumsum along rows of 4096x4096", {"x": (4096, 4096)},
     {"numpy": lambda t: lambda: np.cumsum(t["x"], axis=1),
      "torch": lambda t: lambda: torch.cumsum(t["x"], dim=1)}),
    ("W11-topk", "topk(k=8) along rows of 4096x4096", {"x": (4096, 4096)},
     {"numpy": lambda t: lambda: -np.sort(np.partition(-t["x"], 8, axis=1)[:, :8], axis=1),
      "torch": lambda t: lambda: torch.topk(t["x"], 8, dim=1).values}),
    ("W11-sort", "sort of 16M", {"x": (16 << 20,)},
     {"numpy": lambda t: lambda: np.sort(t["x"]),
      "torch": lambda t: lambda: torch.sort(t["x"]).values}),
]


def numpy_inputs(shapes):
    rng = np.random.default_rng(0)
    return {k: rng.standard_normal(s, dtype=np.float32) for k, s in shapes.items()}


def torch_inputs(shapes):
    g = torch.Generator().manual_seed(0)
    return {k: torch.randn(s, generator=g, dtype=torch.float32) for k, s in shapes.items()}


def median_ms(fn, runs):
    fn()  # warm-up: page faults, lazy initialisation, thread start-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times), max(times)


def kiln_medians(path):
    """workload -> kiln-fused median (ms); the names are kiln_bench's
    (W7-1024, W7-2048), so a workload missing there gets no kiln column."""
    try:
        with open(path) as f:
            results = json.load(f)["results"]
    except (OSError, ValueError, KeyError):
        return {}
    return {r["workload"]: r["median_ms"] for r in results
            if r.get("impl") == "kiln-fused" and r.get("median_ms") is not None}


def libraries():
    libs = []
    if np is not None:
        libs.append(("numpy", np.__version__, numpy_inputs))
    else:
        print("numpy: not installed, skipped")
    if torch is not None:
        if ARGS.threads:
            torch.set_num_threads(ARGS.threads)
        libs.append(("torch", torch.__version__.split("+")[0], torch_inputs))
    else:
        print("torch: not installed, skipped")
    return libs


def main():
    runs = max(ARGS.runs, MIN_RUNS)
    only = set(ARGS.only.split(",")) if ARGS.only else None
    unknown = only - {w[0] for w in WORKLOADS} if only else set()
    if unknown:
        sys.exit("compare.py: unknown workload(s) %s; known: %s"
                 % (",".join(sorted(unknown)), " ".join(w[0] for w in WORKLOADS)))
    libs = libraries()
    if not libs:
        sys.exit("compare.py: neither NumPy nor PyTorch is installed; nothing to time")
    kiln = kiln_medians(ARGS.json)
    print("%-8s %-16s %11s %11s %11s %13s %9s"
          % ("work", "impl", "median_ms", "min_ms", "max_ms", "kiln-fused_ms", "vs kiln"))
    for name, what, shapes, builders in WORKLOADS:
        if only and name not in only:
            continue
        print("# %s: %s" % (name, what))
        kiln_ms = kiln.get(name)
        for lib, version, make_inputs in libs:
            med, lo, hi = median_ms(builders[lib](make_inputs(shapes)), runs)
            ratio = "%8.2fx" % (med / kiln_ms) if kiln_ms else "%9s" % "-"
            kcol = "%13.4f" % kiln_ms if kiln_ms else "%13s" % "-"
            print("%-8s %-16s %11.4f %11.4f %11.4f %s %s" % (name, lib + " " + version, med, lo, hi, kcol, ratio))
    print("\nvs kiln: the library's median / kiln-fused's (> 1: kiln-fused is faster)."
          + ("" if kiln else " No kiln numbers: run `make bench` first or pass --json."))


if __name__ == "__main__":
    main()
