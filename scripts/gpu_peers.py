#!/usr/bin/env python3
"""gpu_peers.py OUT [--dry-run]: step 5 of scripts/gpu-check.sh, kiln_bench's
GPU rows W1-W7 (bench/kiln_bench.c) in PyTorch on the same GPU, with the
python3 that is there: eager, torch.compile (Inductor, Triton), for the
memory-bound rows a device-to-device copy of the same bytes (the bandwidth
limit) and for the matrix products torch.mm alone (cuBLAS). Same sizes, f32,
and the same data: kiln_bench's splitmix64 generator, rebuilt here on the GPU
in int64 and checked element for element against a plain-Python copy of it.
Timed as kiln_bench times the GPU: one warm-up, then 7 samples of 20 calls
queued back to back between CUDA events, per call.

Appends one JSON object a line to OUT/peers.jsonl as each is measured (a run
cut off still leaves what it did): the versions, PyTorch's device memory
after its first kernel (measured first, in this fresh process, as kiln_bench
measures kiln's: total - free), then one row per workload and implementation
in kiln_bench's JSON shape. Without torch, or without CUDA, one line says so
(not a failure: the report marks the peers not run). --dry-run: that line
only, after checking the vectorized generator with NumPy when it is there."""
import json
import os
import struct
import sys
import time

RUNS, REPS = 7, 20            # kiln_bench: --runs 7, DEVICE_REPS 20
GOLDEN = 0x9E3779B97F4A7C15   # splitmix64's increment and multipliers (kiln_bench.c rng_next)
MUL1, MUL2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
M64 = (1 << 64) - 1
CHECKED = 4096                # elements of each input compared with the plain-Python generator


def signed(u):
    return u - (1 << 64) if u >> 63 else u


# ---- kiln_bench's inputs -----------------------------------------------------
def floats_python(n, seed, lo, hi):
    """The first n floats of fill_floats(p, n, seed, lo, hi), one by one."""
    out, s = [], seed
    for _ in range(n):
        s = (s + GOLDEN) & M64
        z = s
        z = ((z ^ (z >> 30)) * MUL1) & M64
        z = ((z ^ (z >> 27)) * MUL2) & M64
        z ^= z >> 31
        out.append(struct.unpack("f", struct.pack("f", lo + (z >> 11) * 2.0 ** -53 * (hi - lo)))[0])
    return out


def floats(xp, n, seed, lo, hi, **kw):
    """The same n floats as one vector of module xp (torch or numpy): int64
    arithmetic wraps like uint64, and a logical shift is an arithmetic one
    masked to its low 64 - k bits."""
    def lsr(z, k):
        return (z >> k) & ((1 << (64 - k)) - 1)
    z = xp.arange(1, n + 1, dtype=xp.int64, **kw) * signed(GOLDEN) + signed(seed)
    z = (z ^ lsr(z, 30)) * signed(MUL1)
    z = (z ^ lsr(z, 27)) * signed(MUL2)
    z = z ^ lsr(z, 31)
    r = lsr(z, 11)
    r = r.double() if hasattr(r, "double") else r.astype(xp.float64)
    x = lo + r * 2.0 ** -53 * (hi - lo)
    return x.float() if hasattr(x, "float") else x.astype(xp.float32)


def check_generator(x, n, seed, lo, hi):
    want = floats_python(min(n, CHECKED), seed, lo, hi)
    got = [float(v) for v in x[:len(want)].tolist()]
    bad = next((i for i, (g, w) in enumerate(zip(got, want)) if struct.pack("f", g) != struct.pack("f", w)), None)
    if bad is not None:
        raise RuntimeError(f"the generator differs from kiln_bench's at element {bad} (seed {seed})")


# ---- the workloads: kiln_bench's sizes, seeds and ranges -----------------------
def workloads(torch):
    F = torch.nn.functional
    mat = lambda r, c, seed: ("x", r * c, seed, -2.0, 2.0, (r, c))
    gemm = lambda m, n, k: [("a", m * k, 5, -2.0, 2.0, (m, k)), ("b", k * n, 6, -2.0, 2.0, (k, n))]
    matmul = lambda a, b: torch.matmul(a, b)   # a Python function, which torch.compile traces
    N1, N5 = 16 << 20, 64 << 20
    return [
        ("W1", [(v, N1, s, -2.0, 2.0, (N1,)) for v, s in (("a", 1), ("b", 2), ("c", 3))],
         lambda a, b, c: torch.relu(a * b + c) * torch.sigmoid(a), 16.0 * N1, 0),
        ("W2", [mat(4096, 4096, 10)], lambda x: torch.softmax(x, -1), 2 * 4.0 * 4096 * 4096, 0),
        ("W3", [mat(8192, 1024, 10)], lambda x: F.layer_norm(x, (1024,), eps=1e-5), 2 * 4.0 * 8192 * 1024, 0),
        ("W4", [("x", 4096 * 1024, 5, -2.0, 2.0, (4096, 1024)), ("w", 1024 * 1024, 6, -2.0, 2.0, (1024, 1024)),
                ("bias", 1024, 7, -2.0, 2.0, (1024,))],
         lambda x, w, bias: F.gelu(F.linear(x, w, bias)), 0, 2.0 * 4096 * 1024 * 1024),
        ("W5", [("x", N5, 12, 0.0, 1.0, (N5,))], lambda x: x.sum(), 4.0 * N5, 0),
        ("W6", [mat(8192, 2048, 10)], lambda x: (x - x.mean(0, keepdim=True)) / x.std(0, keepdim=True),
         3 * 4.0 * 8192 * 2048, 0),
        ("W7-1024", gemm(1024, 1024, 1024), matmul, 0, 2.0 * 1024 ** 3),
        ("W7-2048", gemm(2048, 2048, 2048), matmul, 0, 2.0 * 2048 ** 3),
        ("W7-1000", gemm(1000, 1000, 1000), matmul, 0, 2.0 * 1000 ** 3),
    ]


# ---- timing ---------------------------------------------------------------------
def sample_ms(torch, fn):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(RUNS):
        start.record()
        for _ in range(REPS):
            fn()
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end) / REPS)
    return sorted(ms)


def row(workload, impl, ms, nbytes, flops, **extra):
    med = ms[len(ms) // 2]
    return {"workload": workload, "impl": impl, "threads": 1, "median_ms": med, "min_ms": ms[0], "max_ms": ms[-1],
            "gbps": nbytes / (med * 1e-3) / 1e9 if nbytes else None,
            "gflops": flops / (med * 1e-3) / 1e9 if flops else None, "kernels": None, **extra}


class Out:
    def __init__(self, path):
        self.f = open(path, "a", encoding="utf-8")

    def put(self, obj):
        self.f.write(json.dumps(obj) + "\n")
        self.f.flush()
        if "workload" in obj and "median_ms" in obj:
            print(f"{obj['workload']:<8} {obj['impl']:<14} {obj['median_ms']:9.4f} ms"
                  + (f" {obj['gbps']:7.0f} GB/s" if obj.get("gbps") else "")
                  + (f" {obj['gflops'] / 1e3:6.1f} TFLOP/s" if obj.get("gflops") else ""), flush=True)
        else:
            print(json.dumps(obj), flush=True)


def first_kernel_memory(torch):
    """Device memory in use after PyTorch's first kernel, kiln_bench's measure."""
    torch.cuda.init()
    x = torch.ones(1 << 20, device="cuda") * 3
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    del x
    return {"memory": {"used_after_first_kernel_mib": (total - free) / 2 ** 20,
                       "torch_allocated_mib": torch.cuda.memory_allocated() / 2 ** 20,
                       "torch_reserved_mib": torch.cuda.memory_reserved() / 2 ** 20}}


def measure(torch, out, name, inputs, fn, nbytes, flops):
    args = []
    for _, n, seed, lo, hi, shape in inputs:
        x = floats(torch, n, seed, lo, hi, device="cuda")
        check_generator(x, n, seed, lo, hi)
        args.append(x.reshape(shape))
    out.put(row(name, "torch-eager", sample_ms(torch, lambda: fn(*args)), nbytes, flops))
    t0 = time.time()
    compiled = torch.compile(fn, fullgraph=True, dynamic=False)
    compiled(*args)
    torch.cuda.synchronize()
    out.put(row(name, "torch-compile", sample_ms(torch, lambda: compiled(*args)), nbytes, flops,
                compile_s=time.time() - t0))
    if nbytes:   # kiln_bench's d2d-copy: half the ideal traffic each way
        src = torch.empty(int(nbytes // 2) // 4, device="cuda")
        dst = torch.empty_like(src)
        out.put(row(name, "torch-copy", sample_ms(torch, lambda: dst.copy_(src)), nbytes, 0))
    if flops:    # the product alone, as kiln_bench's cublaslt row
        a, b = args[0], args[1].t() if name == "W4" else args[1]
        out.put(row(name, "torch-cublas", sample_ms(torch, lambda: torch.mm(a, b)), 0, flops))


def dry_run(out):
    try:
        import numpy
    except ImportError:
        out.put({"peers": "not run: no GPU (dry run); NumPy absent, the generator not checked"})
        return
    x = floats(numpy, 1 << 16, 1, -2.0, 2.0)
    check_generator(x, 1 << 16, 1, -2.0, 2.0)
    out.put({"peers": f"not run: no GPU (dry run); the generator matches kiln_bench's (NumPy {numpy.__version__})"})


def main():
    out = Out(os.path.join(sys.argv[1], "peers.jsonl"))
    where = f"Python {sys.version.split()[0]} at {sys.executable}"
    if "--dry-run" in sys.argv[2:]:
        return dry_run(out)
    t0 = time.time()
    try:
        import torch
    except ImportError as e:
        return out.put({"peers": f"not run: {where} has no torch ({e})"})
    if not torch.cuda.is_available():
        return out.put({"peers": f"not run: torch {torch.__version__} ({where}) sees no CUDA device"})
    out.put({"python": where, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
             "triton": triton_version(),
             "device": torch.cuda.get_device_name(0), "import_s": time.time() - t0})
    out.put(first_kernel_memory(torch))
    torch.backends.cuda.matmul.allow_tf32 = False   # kiln's default: no TF32 (KILN_ALLOW_TF32)
    for name, inputs, fn, nbytes, flops in workloads(torch):
        try:
            with torch.no_grad():
                measure(torch, out, name, inputs, fn, nbytes, flops)
        except Exception as e:   # one workload's failure is its row, the others still run
            out.put({"workload": name, "error": f"{type(e).__name__}: {e}"[:500]})
        torch.cuda.empty_cache()


def triton_version():
    try:
        import triton
        return triton.__version__
    except ImportError:
        return None


if __name__ == "__main__":
    main()
