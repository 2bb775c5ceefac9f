#!/usr/bin/env python3
"""compare.py: times the workloads W1-W7, W10, W11 and W13 of bench/README.md in kiln, NumPy and
PyTorch (CPU) in one invocation, so the ratios compare numbers taken on the
same machine at the same time: it runs kiln_bench (default
build/bench/kiln_bench) on the selected workloads first, with the same runs
and threads, then each installed library, and gives each library's median
next to kiln-fused's. A library that is not installed is skipped; --json FILE
reads kiln's numbers from an earlier kiln_bench run instead.

    python3 bench/compare.py [--runs 5] [--threads N] [--only W1,W7-1024] [--kiln-bench PATH | --json FILE]

Same rules as kiln_bench: one warm-up, then the median of --runs timed runs
(at least 5), inputs made before the clock starts, outputs allocated by each
library as it likes. NumPy has no fused kernels: it runs op by op, like
kiln-eager. Not a test: nothing fails on a slow number."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MIN_RUNS = 5


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=7, help="timed runs per row (at least 5)")
    p.add_argument("--threads", type=int, help="threads for BLAS and PyTorch (default: theirs)")
    p.add_argument("--only", help="comma-separated workload names (W1,...,W7-1024,W7-2048)")
    p.add_argument("--kiln-bench", default="build/bench/kiln_bench", help="the kiln_bench to run for the kiln column")
    p.add_argument("--json", help="kiln_bench's JSON of an earlier run, instead of running it")
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


def w13_ints(t, lib):
    """W13's int32 operands from the float inputs: a over a wide range, b in
    +-[2, 100] (no 0, no -1), c any; converted once, outside the timing."""
    def ints(x, scale):
        return (x * scale).astype(np.int32) if lib == "numpy" else (x * scale).to(torch.int32)
    a, c = ints(t["a"], 1e9), ints(t["c"], 1e9)
    b = ints(t["b"], 30)
    b = (abs(b) % 99 + 2) * (1 - 2 * (b < 0))
    return a, b, c


def w13_numpy(t):
    a, b, c = w13_ints(t, "numpy")
    return lambda: ((a // b + a % b) & c).astype(np.float32)


def w13_torch(t):
    a, b, c = w13_ints(t, "torch")
    return lambda: ((a // b + a % b) & c).to(torch.float32)


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
    ("W12", "embedding of 65536 rows of 50000x512 + bias", {"w": (50000, 512), "b": (512,)},
     {"numpy": lambda t: (lambda i: lambda: t["w"][i] + t["b"])(np.random.default_rng(1).integers(0, 50000, 65536)),
      "torch": lambda t: (lambda i: lambda: torch.nn.functional.embedding(i, t["w"]) + t["b"])(
          torch.randint(0, 50000, (65536,), generator=torch.Generator().manual_seed(1)))}),
    ("W7-1024", "matmul 1024^3", {"a": (1024, 1024), "b": (1024, 1024)},
     {"numpy": lambda t: lambda: t["a"] @ t["b"],
      "torch": lambda t: lambda: t["a"] @ t["b"]}),
    ("W7-2048", "matmul 2048^3", {"a": (2048, 2048), "b": (2048, 2048)},
     {"numpy": lambda t: lambda: t["a"] @ t["b"],
      "torch": lambda t: lambda: t["a"] @ t["b"]}),
    ("W13", "f32((a // b + a % b) & c), a b c i32[16M]", {"a": (1 << 24,), "b": (1 << 24,), "c": (1 << 24,)},
     {"numpy": w13_numpy, "torch": w13_torch}),
    ("W10", "cumsum along rows of 4096x4096", {"x": (4096, 4096)},
     {"numpy": lambda t: lambda: np.cumsum(t["x"], axis=1),
      "torch": lambda t: lambda: torch.cumsum(t["x"], dim=1)}),
    ("W11-topk", "topk(k=8) along rows of 4096x4096", {"x": (4096, 4096)},
     {"numpy": lambda t: lambda: -np.sort(np.partition(-t["x"], 8, axis=1)[:, :8], axis=1),
      "torch": lambda t: lambda: torch.topk(t["x"], 8, dim=1).values}),
    ("W11-sort", "sort of 16M", {"x": (16 << 20,)},
     {"numpy": lambda t: lambda: np.sort(t["x"]),
      "torch": lambda t: lambda: torch.sort(t["x"]).values}),
    ("W10-dim0", "cumsum down the columns of 4096x4096", {"x": (4096, 4096)},
     {"numpy": lambda t: lambda: np.cumsum(t["x"], axis=0),
      "torch": lambda t: lambda: torch.cumsum(t["x"], dim=0)}),
    ("W10-long", "cumsum of 16M", {"x": (16 << 20,)},
     {"numpy": lambda t: lambda: np.cumsum(t["x"]),
      "torch": lambda t: lambda: torch.cumsum(t["x"], dim=0)}),
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


def run_kiln(names, runs):
    """Runs kiln_bench on the workloads names (with --runs/--threads) and
    returns its medians; {} (and says why) when it cannot."""
    exe = ARGS.kiln_bench
    if not os.access(exe, os.X_OK):
        print("kiln: %s not found (build it, or pass --kiln-bench/--json); kiln column skipped" % exe)
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "kiln.json")
        cmd = [exe, "--only", ",".join(names), "--runs", str(runs), "--json", out]
        if ARGS.threads:
            cmd += ["--threads", str(ARGS.threads)]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            print("kiln: %s exited with %d; its numbers may be incomplete" % (" ".join(cmd), done.returncode))
        return kiln_medians(out)


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
    names = [w[0] for w in WORKLOADS if not only or w[0] in only]
    kiln = kiln_medians(ARGS.json) if ARGS.json else run_kiln(names, runs)
    libs = libraries()
    if not libs:
        print("neither NumPy nor PyTorch is installed: kiln's medians only")
    print("%-8s %-16s %11s %11s %11s %13s %9s"
          % ("work", "impl", "median_ms", "min_ms", "max_ms", "kiln-fused_ms", "vs kiln"))
    for name, what, shapes, builders in WORKLOADS:
        if only and name not in only:
            continue
        print("# %s: %s" % (name, what))
        kiln_ms = kiln.get(name)
        if kiln_ms:
            print("%-8s %-16s %11.4f %11s %11s %13.4f %9s" % (name, "kiln-fused", kiln_ms, "-", "-", kiln_ms, "1.00x"))
        for lib, version, make_inputs in libs:
            med, lo, hi = median_ms(builders[lib](make_inputs(shapes)), runs)
            ratio = "%8.2fx" % (med / kiln_ms) if kiln_ms else "%9s" % "-"
            kcol = "%13.4f" % kiln_ms if kiln_ms else "%13s" % "-"
            print("%-8s %-16s %11.4f %11.4f %11.4f %s %s" % (name, lib + " " + version, med, lo, hi, kcol, ratio))
    print("\nvs kiln: the library's median / kiln-fused's, timed in this run (> 1: kiln-fused is faster)."
          + ("" if kiln else " No kiln numbers: build kiln_bench or pass --json."))


if __name__ == "__main__":
    main()
