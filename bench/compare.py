#!/usr/bin/env python3
"""compare.py: times the workloads W1-W16 of bench/README.md in kiln, NumPy and
PyTorch (CPU) in one invocation, so the ratios compare numbers taken on the
same machine at the same time: it runs kiln_bench (default
build/bench/kiln_bench) on the selected workloads first, with the same runs
and threads, then each installed library, and gives each library's median
next to kiln-fused's. A library that is not installed is skipped; --json FILE
reads kiln's numbers from an earlier kiln_bench run instead.

    python3 bench/compare.py [--runs 5] [--threads N] [--only W1,W7-1024] [--kiln-bench PATH | --json FILE]
                             [--keep-json FILE]

Same rules as kiln_bench: one warm-up, then the median of --runs timed runs
(at least 5), inputs made before the clock starts, outputs allocated by each
library as it likes. NumPy has no fused kernels: it runs op by op, like
kiln-eager. The per-call rows (W8, W9-*) time batches of CALLS calls and give
the median per call, next to kiln-fused's (build the graph, realize, cached)
and kiln-fn's (a compiled function replayed). A library with no builder for
a workload (NumPy has no convolution) gets no row there. Not a test: nothing
fails on a slow number."""

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
    p.add_argument("--keep-json", help="where to keep the JSON of the kiln_bench run (all its rows)")
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


def numpy_causal_sdpa(q, k, v):
    s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


def torch_causal_sdpa(q, k, v):
    # PyTorch 1.13 (Debian's) has no scaled_dot_product_attention: this is its
    # math form, as torch 2's does it on the CPU without a fused kernel.
    f = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if f is not None:
        return f(q, k, v, is_causal=True)
    s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def torch_rms_norm(x, g, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * g


def torch_block(t, heads=8):
    """examples/models.c's transformer_block: rms_norm, causal attention of
    8 heads, output projection, residual, rms_norm, gelu MLP, residual."""
    F = torch.nn.functional
    x = t["x"]
    b, n, d = x.shape

    def split(p):
        return p.reshape(b, n, heads, d // heads).transpose(1, 2)

    def block():
        h = torch_rms_norm(x, t["g1"])
        a = torch_causal_sdpa(split(F.linear(h, t["wq"])), split(F.linear(h, t["wk"])), split(F.linear(h, t["wv"])))
        y = x + F.linear(a.transpose(1, 2).reshape(b, n, d), t["wo"])
        h = torch_rms_norm(y, t["g2"])
        return y + F.linear(F.gelu(F.linear(h, t["w1"], t["b1"])), t["w2"], t["b2"])
    return block


def per_call(calls, numpy_fn, torch_fn):
    """A per-call row's builders: each timed run is CALLS calls."""
    def batch(fn):
        def run():
            for _ in range(calls):
                fn()
        return run
    return ({"numpy": lambda t: batch(lambda: numpy_fn(t)), "torch": lambda t: batch(lambda: torch_fn(t))}, calls)


W16_SHAPES = {"x": (4, 512, 512), "g1": (512,), "wq": (512, 512), "wk": (512, 512), "wv": (512, 512),
              "wo": (512, 512), "g2": (512,), "w1": (2048, 512), "b1": (2048,), "w2": (512, 2048), "b2": (512,)}
QKV_1024 = {"q": (4, 8, 1024, 64), "k": (4, 8, 1024, 64), "v": (4, 8, 1024, 64)}

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
    ("W14", "relu(conv2d(x, w, b, padding 1)), x 8x64x56x56, w 64x64x3x3", {"x": (8, 64, 56, 56), "w": (64, 64, 3, 3), "b": (64,)},
     {"torch": lambda t: lambda: torch.relu(torch.nn.functional.conv2d(t["x"], t["w"], t["b"], padding=1))}),
    ("W15-1024", "causal attention, q k v 4x8x1024x64", QKV_1024,
     {"numpy": lambda t: lambda: numpy_causal_sdpa(t["q"], t["k"], t["v"]),
      "torch": lambda t: lambda: torch_causal_sdpa(t["q"], t["k"], t["v"])}),
    ("W16", "transformer block forward, x 4x512x512, 8 heads, MLP 2048", W16_SHAPES, {"torch": torch_block}),
    ("W8", "a + b on 16 f32, per call", {"a": (16,), "b": (16,)},
     *per_call(10000, lambda t: t["a"] + t["b"], lambda t: t["a"] + t["b"])),
    ("W9-softmax", "softmax over rows of 16x16, per call", {"a": (16, 16)},
     *per_call(10000, lambda t: numpy_softmax(t["a"]), lambda t: torch.softmax(t["a"], dim=1))),
    ("W9-matmul", "matmul 16x16 @ 16x16, per call", {"a": (16, 16), "b": (16, 16)},
     *per_call(10000, lambda t: t["a"] @ t["b"], lambda t: t["a"] @ t["b"])),
]


def numpy_inputs(shapes):
    rng = np.random.default_rng(0)
    return {k: rng.standard_normal(s, dtype=np.float32) for k, s in shapes.items()}


def torch_inputs(shapes):
    """NumPy's arrays wrapped where NumPy is installed: its allocator puts
    large arrays on transparent huge pages, as kiln's does, and PyTorch reads
    memory fastest there (W5)."""
    if np is not None:
        return {k: torch.from_numpy(a) for k, a in numpy_inputs(shapes).items()}
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


KILN_IMPLS = ("kiln-fused", "kiln-fn")


def kiln_medians(path):
    """workload -> {impl: median (ms)} for kiln-fused and kiln-fn; the names
    are kiln_bench's (W7-1024, W7-2048), so a workload missing there gets no
    kiln row."""
    try:
        with open(path) as f:
            results = json.load(f)["results"]
    except (OSError, ValueError, KeyError):
        return {}
    medians = {}
    for r in results:
        if r.get("impl") in KILN_IMPLS and r.get("median_ms") is not None:
            medians.setdefault(r["workload"], {}).setdefault(r["impl"], r["median_ms"])
    return medians


def run_kiln(names, runs):
    """Runs kiln_bench on the workloads names (with --runs/--threads) and
    returns its medians; {} (and says why) when it cannot."""
    exe = ARGS.kiln_bench
    if not os.access(exe, os.X_OK):
        print("kiln: %s not found (build it, or pass --kiln-bench/--json); kiln column skipped" % exe)
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        out = ARGS.keep_json or os.path.join(tmp, "kiln.json")
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
    print("%-10s %-16s %11s %11s %11s %13s %9s"
          % ("work", "impl", "median_ms", "min_ms", "max_ms", "kiln-fused_ms", "vs kiln"))
    for name, what, shapes, builders, *calls in WORKLOADS:
        if only and name not in only:
            continue
        calls = calls[0] if calls else 1
        print("# %s: %s" % (name, what))
        mine = kiln.get(name, {})
        kiln_ms = mine.get("kiln-fused")
        kcol = "%13.6f" % kiln_ms if kiln_ms else "%13s" % "-"
        for impl in KILN_IMPLS:
            if impl in mine:
                ratio = "%8.2fx" % (mine[impl] / kiln_ms) if kiln_ms else "%9s" % "-"
                print("%-10s %-16s %11.6f %11s %11s %s %s" % (name, impl, mine[impl], "-", "-", kcol, ratio))
        for lib, version, make_inputs in libs:
            if lib not in builders:
                continue
            med, lo, hi = (x / calls for x in median_ms(builders[lib](make_inputs(shapes)), runs))
            ratio = "%8.2fx" % (med / kiln_ms) if kiln_ms else "%9s" % "-"
            print("%-10s %-16s %11.6f %11.6f %11.6f %s %s" % (name, lib + " " + version, med, lo, hi, kcol, ratio))
    print("\nvs kiln: the row's median / kiln-fused's, timed in this run (> 1: kiln-fused is faster)."
          " Per-call rows (W8, W9-*) are per call."
          + ("" if kiln else " No kiln numbers: build kiln_bench or pass --json."))


if __name__ == "__main__":
    main()
