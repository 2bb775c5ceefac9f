#!/usr/bin/env python3
"""gpu_report.py OUT BUNDLE DRY SECONDS FAILED [--final]: scripts/gpu-check.sh
runs it after every step, so that a run cut off still leaves a report of what
it did, and with --final at the end, which also prints the summary. It
gathers what the steps left in OUT (steps.tsv; kiln_bench's prologue.json,
bench.json and bench-rest.json; gpu_peers.py's peers.jsonl) and
BUNDLE/bundle.json into OUT/gpu-check.json (every step, figure and version)
and OUT/summary.md (the verdict, the steps, the targets met or not, kiln
against its peers row by row). What was not measured is the string
"not run: <why>". Python's standard library only: it runs with whatever
python3 the GPU machine has."""
import datetime
import json
import os
import sys

NO_GPU = "not run: no GPU"
PYTORCH_TUTORIAL_MIB = 830.0   # PyTorch after its first kernel on a small card (the fundamentals tutorial)
MEMORY_BOUND = ("W1", "W2", "W3", "W5", "W6")
GEMMS = ("W4", "W7-1024", "W7-2048", "W7-1000")
COPY_TARGET, GEMM_TARGET, MEMORY_TARGET = 0.85, 0.95, 0.5


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_lines(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


# ---- the steps ---------------------------------------------------------------------
def steps(out):
    """steps.tsv grouped by step, in the order they ran; facts apart."""
    order, by_step, facts = [], {}, {}
    for line in read_lines(os.path.join(out, "steps.tsv")):
        step, item, status, seconds, rc, detail = (line.split("\t") + [""] * 6)[:6]
        if step == "facts":
            facts[item] = detail
            continue
        if step not in by_step:
            order.append(step)
            by_step[step] = {"step": step, "status": None, "seconds": 0, "exit_code": "", "detail": "", "items": []}
        s = by_step[step]
        row = {"status": status, "seconds": int(seconds or 0), "exit_code": rc, "detail": detail.strip()}
        if item == "-":
            s.update(row)
        else:
            s["items"].append({"name": item, **row})
    for s in by_step.values():
        s["status"] = s["status"] or "running (cut off before it ended)"
    return [by_step[k] for k in order], facts


def troubled(status):
    return not status.startswith(("ok", "skipped", "not run: no GPU", "not run: dry run"))


# ---- kiln_bench and the peers -------------------------------------------------------
def peers(out, dry):
    """gpu_peers.py's lines: its versions, PyTorch's memory, rows, errors."""
    p = {"rows": [], "errors": []}
    for line in read_lines(os.path.join(out, "peers.jsonl")):
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if "peers" in o:
            p["not_run"] = o["peers"]
        elif "error" in o:
            p["errors"].append(o)
        elif "workload" in o:
            p["rows"].append(o)
        else:
            p.update(o)
    if not p["rows"] and "not_run" not in p:
        p["not_run"] = NO_GPU if dry else "not run (see the peers step)"
    return p


def find(rows, workload, impl):
    """The row of workload and impl that has a time (a failed sample leaves null)."""
    return next((r for r in rows if r.get("workload") == workload and r.get("impl") == impl and r.get("median_ms")),
                None)


def rate(r):
    if r.get("gbps"):
        return f"{r['gbps']:.0f} GB/s"
    return f"{r['gflops'] / 1e3:.1f} TFLOP/s" if r.get("gflops") else f"{r['median_ms']:.4f} ms"


def compare(kiln_rows, peer_rows):
    """One row per workload of W1-W7: kiln-fused, its peers, the limits."""
    table = []
    for w in MEMORY_BOUND + GEMMS:
        k = find(kiln_rows, w, "kiln-fused")
        if not k:
            continue
        peer = {impl: find(peer_rows, w, impl) for impl in ("torch-eager", "torch-compile", "torch-cublas")}
        peer["cublaslt"] = find(kiln_rows, w, "cublaslt")
        present = {n: r for n, r in peer.items() if r}
        best = min(present.items(), key=lambda kv: kv[1]["median_ms"]) if present else None
        copies = [r for r in (find(kiln_rows, w, "d2d-copy"), find(peer_rows, w, "torch-copy")) if r and r.get("gbps")]
        copy = max(copies, key=lambda r: r["gbps"]) if copies else None
        row = {"workload": w, "kiln_ms": k["median_ms"], "kiln_rate": rate(k),
               **{f"{n}_ms": (r["median_ms"] if r else None) for n, r in peer.items()},
               "best_peer": best[0] if best else None,
               "kiln_vs_best_peer": best[1]["median_ms"] / k["median_ms"] if best else None}
        if copy and k.get("gbps"):
            row.update(copy=copy["impl"], copy_gbps=copy["gbps"], fraction_of_copy=k["gbps"] / copy["gbps"])
        for n in ("cublaslt", "torch-cublas"):
            if peer[n]:
                row[f"fraction_of_{n}"] = peer[n]["median_ms"] / k["median_ms"]
        table.append(row)
    return table


def target(check, measured, goal, met):
    return {"check": check, "measured": measured, "target": goal, "met": met}


def targets(dry, table, prologue, p):
    if dry:
        return NO_GPU
    by = {r["workload"]: r for r in table}
    t = []
    for w in MEMORY_BOUND:
        r = by.get(w)
        if r and "fraction_of_copy" in r:
            t.append(target(f"{w} vs a device-to-device copy of its bytes",
                            f"{r['fraction_of_copy']:.2f}x of {r['copy']}'s {r['copy_gbps']:.0f} GB/s ({r['kiln_rate']})",
                            f">= {COPY_TARGET}x", r["fraction_of_copy"] >= COPY_TARGET))
        else:
            t.append(target(f"{w} vs a device-to-device copy of its bytes", "not run", f">= {COPY_TARGET}x", None))
        c = r and r.get("torch-compile_ms")
        t.append(target(f"{w} vs torch.compile",
                        f"kiln {r['kiln_ms']:.4f} ms, torch.compile {c:.4f} ms" if c else "not run",
                        "faster", (r["kiln_ms"] < c) if c else None))
    for w in GEMMS:
        r = by.get(w)
        f = r and r.get("fraction_of_cublaslt")
        t.append(target(f"{w} vs cuBLASLt", f"{f:.2f}x of cuBLASLt's rate ({r['kiln_rate']})" if f else "not run",
                        f">= {GEMM_TARGET}x", (f >= GEMM_TARGET) if f else None))
    mem = prologue.get("memory") if prologue else None
    theirs = (p.get("memory") or {}).get("used_after_first_kernel_mib")
    if isinstance(mem, dict):
        ref = theirs or PYTORCH_TUTORIAL_MIB
        where = "PyTorch on this GPU" if theirs else "PyTorch not measured here: the tutorial's"
        t.append(target("device memory after the first kernel vs PyTorch's",
                        f"{mem['used_after_first_kernel_mib']:.0f} MiB vs {ref:.0f} MiB ({where})",
                        f"<= {MEMORY_TARGET}x", mem["used_after_first_kernel_mib"] <= MEMORY_TARGET * ref))
    else:
        t.append(target("device memory after the first kernel vs PyTorch's", "not run", f"<= {MEMORY_TARGET}x", None))
    rand = prologue.get("rand", "not run") if prologue else "not run"
    t.append(target("kiln_rand, same seed, CPU vs GPU", rand, "bit-identical",
                    None if rand.startswith("not run") else rand == "identical"))
    return t


# ---- the report -----------------------------------------------------------------------
def verdict(step_list, failed, final):
    if not final:
        last = step_list[-1]["step"] if step_list else "none"
        return f"{'FAILED, ' if failed else ''}unfinished (written after step {last}; a run cut off ends here)"
    if failed:
        return "FAILED"
    every = [s["status"] for s in step_list] + [i["status"] for s in step_list for i in s["items"]]
    if any(st.startswith(("cut off", "not run: out of time", "running")) for st in every):
        return "incomplete (passed what ran)"
    return "passed"


def report(out, bundle, dry, seconds, failed, final):
    step_list, facts = steps(out)
    prologue = read_json(os.path.join(out, "prologue.json")) or {}
    bench = read_json(os.path.join(out, "bench.json")) or {}
    rest = read_json(os.path.join(out, "bench-rest.json")) or {}
    b = read_json(os.path.join(bundle, "bundle.json")) or {}
    p = peers(out, dry)
    kiln_rows = bench.get("results", [])
    table = compare(kiln_rows, p["rows"])
    return {
        "mode": "dry-run" if dry else "gpu",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seconds": seconds, "verdict": verdict(step_list, failed, final),
        "facts": facts,
        "bundle": {k: v for k, v in b.items() if k not in ("tests", "files")},
        "steps": step_list,
        "kiln_device": prologue.get("device") or bench.get("device") or NO_GPU,
        "memory": prologue.get("memory", NO_GPU),
        "transfers": prologue.get("transfers", NO_GPU),
        "rand": prologue.get("rand", NO_GPU),
        "benchmarks": kiln_rows + rest.get("results", []) or NO_GPU,
        "peers": p,
        "comparison": table or NO_GPU,
        "targets": targets(dry, table, prologue, p),
    }


# ---- Markdown ---------------------------------------------------------------------------
def num(v, fmt):
    return "-" if v is None else fmt.format(v)


def device_line(d):
    if not isinstance(d, dict):
        return f"kiln's device: {d}"
    line = (f"toolkit CUDA {d['toolkit']}, NVRTC {d['nvrtc']} (headers {d.get('nvrtc_include', '?')}), "
            f"cuBLASLt {d['cublaslt']}")
    if not d["usable"]:
        return f"{line}; cuda:0 not usable: {d['why']}"
    return (f"{line}; driver CUDA {d['driver']}; {d['name']}, compute capability {d['compute_capability']}, "
            f"{d['sms']} SMs, {d['memory_mib']:.0f} MiB")


def steps_md(step_list):
    md = ["| step | status | seconds | detail |", "|---|---|---|---|"]
    for s in step_list:
        md.append(f"| {s['step']} | {s['status']} | {s['seconds']} | {s['detail'].replace('|', '/')[:200]} |")
    bad = [(s["step"], i) for s in step_list for i in s["items"] if troubled(i["status"])]
    if bad:
        md += ["", "Items that did not pass or did not run:", ""]
        md += [f"- {st} / {i['name']}: {i['status']} ({i['seconds']} s) {i['detail'][:300]}" for st, i in bad]
    return md


def targets_md(t):
    if not isinstance(t, list):
        return [f"Targets: {t}"]
    md = ["| target | measured | goal | met |", "|---|---|---|---|"]
    return md + [f"| {x['check']} | {x['measured']} | {x['target']} | "
                 f"{'-' if x['met'] is None else 'met' if x['met'] else 'NOT MET'} |" for x in t]


def comparison_md(table, p):
    if not isinstance(table, list):
        return [f"kiln against its peers: {table}"]
    who = ", ".join(f"{k} {p[k]}" for k in ("torch", "torch_cuda", "triton", "python") if p.get(k)) or \
        p.get("not_run", "PyTorch not run")
    md = [f"kiln-fused against its peers on this GPU (peers: {who}); ms per call, medians; "
          "`kiln/best` is the best peer's time over kiln's (> 1: kiln faster); "
          "`of copy` kiln's GB/s over the faster device-to-device copy of the same bytes; "
          "`of cuBLASLt` / `of torch cuBLAS` kiln's rate over theirs.", "",
          "| row | kiln | rate | torch eager | torch.compile | cuBLASLt | torch cuBLAS | best peer | kiln/best | of copy "
          "| of cuBLASLt | of torch cuBLAS |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        md.append(f"| {r['workload']} | {r['kiln_ms']:.4f} | {r['kiln_rate']} | {num(r['torch-eager_ms'], '{:.4f}')} | "
                  f"{num(r['torch-compile_ms'], '{:.4f}')} | {num(r['cublaslt_ms'], '{:.4f}')} | "
                  f"{num(r['torch-cublas_ms'], '{:.4f}')} | {r['best_peer'] or '-'} | "
                  f"{num(r['kiln_vs_best_peer'], '{:.2f}x')} | {num(r.get('fraction_of_copy'), '{:.2f}')} | "
                  f"{num(r.get('fraction_of_cublaslt'), '{:.2f}')} | {num(r.get('fraction_of_torch-cublas'), '{:.2f}')} |")
    md += [f"- PyTorch error on {e['workload']}: {e['error']}" for e in p["errors"]]
    return md


def bench_md(rows):
    if not isinstance(rows, list):
        return [f"kiln_bench: {rows}"]
    md = ["All of kiln_bench's GPU rows:", "", "| workload | impl | median ms | GB/s | TFLOP/s | kernels |",
          "|---|---|---|---|---|---|"]
    for r in rows:
        if r["impl"] != "kiln-compile":
            md.append(f"| {r['workload']} | {r['impl']} | {num(r.get('median_ms'), '{:.4f}')} | {num(r.get('gbps'), '{:.0f}')} | "
                      f"{num(r.get('gflops') and r['gflops'] / 1e3, '{:.1f}')} | {num(r.get('kernels'), '{:.0f}')} |")
    return md


def markdown(r):
    f, b = r["facts"], r["bundle"]
    md = [f"# kiln GPU check ({r['mode']}, {r['date']}, {r['seconds']} s): {r['verdict']}", "",
          f"- GPU: {f.get('nvidia-smi', 'not read')}",
          f"- {device_line(r['kiln_device'])}",
          f"- bundle: {f.get('bundle', b.get('commit', '?'))}; glibc {f.get('glibc', '?')}",
          f"- host: {f.get('cpu', '?')}; {f.get('python3', 'python3 ?')}"]
    md += [f"- {k}: {v}" for k, v in f.items() if k not in ("nvidia-smi", "bundle", "glibc", "cpu", "python3")]
    md += [""] + steps_md(r["steps"]) + [""] + targets_md(r["targets"]) + [""]
    md += comparison_md(r["comparison"], r["peers"]) + [""]
    tr = r["transfers"]
    if isinstance(tr, dict):
        md.append(f"Transfers of {tr['mib']:.0f} MiB, GB/s host->device / device->host: kiln "
                  f"{tr['kiln_pageable_h2d_gbps']:.1f} / {tr['kiln_pageable_d2h_gbps']:.1f}, driver pageable "
                  f"{tr['driver_pageable_h2d_gbps']:.1f} / {tr['driver_pageable_d2h_gbps']:.1f}, driver pinned "
                  f"{tr['driver_pinned_h2d_gbps']:.1f} / {tr['driver_pinned_d2h_gbps']:.1f}")
    else:
        md.append(f"Transfers: {tr}")
    m = r["memory"]
    md += ["", f"Device memory: {m}" if not isinstance(m, dict) else
           f"Device memory: {m['used_with_context_mib']:.0f} MiB with kiln's context, "
           f"{m['used_after_first_kernel_mib']:.0f} MiB after its first kernel (kiln's blocks "
           f"{m['kiln_allocated_mib']:.1f} MiB allocated, {m['kiln_reserved_mib']:.1f} reserved)", ""]
    md += bench_md(r["benchmarks"])
    return "\n".join(md) + "\n"


def main():
    out, bundle, dry, seconds, failed = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]), sys.argv[5] != "0"
    final = "--final" in sys.argv[6:]
    r = report(out, bundle, dry, seconds, failed, final)
    md = markdown(r)
    for name, text in (("gpu-check.json", json.dumps(r, indent=1)), ("summary.md", md)):
        with open(os.path.join(out, name + ".part"), "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(os.path.join(out, name + ".part"), os.path.join(out, name))
    if final:
        print(md, end="")


if __name__ == "__main__":
    main()
