#!/usr/bin/env python3
"""gpu_report.py OUT DRY SECONDS FAILED: the last step of scripts/gpu-check.sh.

Gathers what the steps left in OUT (steps.tsv, nvidia-smi.txt, the ctest
JUnit files, kiln_bench's bench.json, pytorch-memory.log) into one JSON file,
OUT/gpu-check.json, and a short Markdown summary, OUT/summary.md, which it
also prints. What was not measured is the string "not run: <why>"."""
import datetime
import json
import os
import sys
import xml.etree.ElementTree as ET

NO_GPU = "not run: no GPU"
PYTORCH_MIB = 830.0   # PyTorch after its first kernel, as the fundamentals tutorial shows


def read(out, name):
    path = os.path.join(out, name)
    return open(path, encoding="utf-8", errors="replace").read() if os.path.exists(path) else None


def first_error(out, name):
    """The first line of a step's log that names an error and the line after
    it (CMake says what it could not find there), for the summary."""
    lines = [l.strip() for l in (read(out, name + ".log") or "").splitlines() if l.strip()] + [""]
    for i, line in enumerate(lines[:-1]):
        if any(w in line.lower() for w in ("error", "fail", "mismatch", "not usable")):
            return f"{line} {lines[i + 1]}".strip().replace("|", "/")[:300]
    return ""


def steps(out):
    rows = []
    for line in (read(out, "steps.tsv") or "").splitlines():
        name, status, seconds, rc = (line.split("\t") + [""] * 4)[:4]
        r = {"name": name, "status": status, "seconds": int(seconds or 0), "exit_code": rc}
        if status.startswith(("failed", "timed out")) and not name.startswith("tests"):   # tests: the JUnit list
            r["first_error"] = first_error(out, name)
        rows.append(r)
    return rows


def junit(out, name, why):
    """Counts and the failed suites of one ctest run, from its JUnit file."""
    text = read(out, name)
    if text is None:
        return why
    cases = list(ET.fromstring(text).iter("testcase"))
    failed = [c.get("name") for c in cases if c.get("status") == "fail" or c.find("failure") is not None]
    return {"suites": len(cases), "failed": failed}


def bench(out, dry):
    text = read(out, "bench.json")
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return None if dry else {"error": "bench.json is not valid JSON"}


def row(results, workload, impl):
    return next((r for r in results if r["workload"] == workload and r["impl"] == impl), None)


def ratio_target(results, name, workload, yard, target, rate):
    """kiln-fused against a yardstick row: fused GB/s (or yardstick ms over
    fused ms) as a fraction of the yardstick's."""
    fused, other = row(results, workload, "kiln-fused"), row(results, workload, yard)
    if not fused or not other:
        why = "not run: no such rows in bench.json" + (" (W4 and W7 need OpenBLAS)" if yard == "cublaslt" else "")
        return {"check": name, "measured": why, "target": target[0], "met": None}
    r = other["median_ms"] / fused["median_ms"]
    return {"check": name, "measured": f"{r:.2f}x of {yard} ({rate(fused)} vs {rate(other)})",
            "value": r, "target": target[0], "met": r >= target[1]}


def gbps(r):
    return f"{r['gbps']:.0f} GB/s"


def tflops(r):
    return f"{r['gflops'] / 1e3:.1f} TFLOP/s"


def targets(b, torch):
    if not b or "results" not in b or not b.get("device", {}).get("usable"):
        return NO_GPU
    res = b["results"]
    t = [ratio_target(res, "W1 fused vs device-to-device copy", "W1", "d2d-copy", (">= 0.85x", 0.85), gbps)]
    for w in ("W7-1024", "W7-2048"):
        t.append(ratio_target(res, f"{w} matmul vs cuBLASLt", w, "cublaslt", (">= 0.95x", 0.95), tflops))
    mem = b.get("memory")
    if isinstance(mem, dict):
        here = isinstance(torch, dict)
        ref = torch["used_after_first_kernel_mib"] if here else PYTORCH_MIB
        used = mem["used_after_first_kernel_mib"]
        t.append({"check": "device memory after the first kernel vs PyTorch's",
                  "measured": f"{used:.0f} MiB vs {ref:.0f} MiB ("
                              f"{'PyTorch on this GPU; ' if here else ''}the tutorial's: {PYTORCH_MIB:.0f})",
                  "value": used / ref,
                  "target": "<= 0.5x", "met": used <= ref / 2})
    rand = b.get("rand", NO_GPU)
    t.append({"check": "kiln_rand, same seed, CPU vs GPU", "measured": rand, "target": "identical",
              "met": rand == "identical" if not rand.startswith("not run") else None})
    return t


def torch_memory(out, dry):
    if dry:
        return NO_GPU
    for line in reversed((read(out, "pytorch-memory.log") or "").splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return "not run: no torch with CUDA (see pytorch-memory.log)"


def report(out, dry, seconds, failed):
    b = bench(out, dry)
    torch = torch_memory(out, dry)
    smi = read(out, "nvidia-smi.txt") or ""
    return {
        "mode": "dry-run" if dry else "gpu",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seconds": seconds, "passed": not failed,
        "steps": steps(out),
        "nvidia_smi": NO_GPU if dry and "not found" in smi else smi.strip(),
        "kiln_device": b.get("device", NO_GPU) if b else NO_GPU,
        "tests_gpu": junit(out, "tests-gpu.xml", "not run"),
        "tests_validate": junit(out, "tests-validate.xml", NO_GPU if dry else "not run"),
        "tests_rest": junit(out, "tests-rest.xml", "not run: dry run (make test runs them)" if dry else "not run"),
        "memory": b.get("memory", NO_GPU) if b else NO_GPU,
        "pytorch_memory": torch,
        "transfers": b.get("transfers", NO_GPU) if b else NO_GPU,
        "rand": b.get("rand", NO_GPU) if b else NO_GPU,
        "benchmarks": b["results"] if b and b.get("results") else NO_GPU,
        "targets": targets(b, torch),
    }


def device_line(d):
    if not isinstance(d, dict):
        return f"device: {d}"
    line = f"toolkit CUDA {d['toolkit']}, NVRTC {d['nvrtc']}, cuBLASLt {d['cublaslt']}"
    if not d["usable"]:
        return f"{line}; cuda:0 not usable: {d['why']}"
    return (f"{line}; driver CUDA {d['driver']}; {d['name']}, compute capability "
            f"{d['compute_capability']}, {d['sms']} SMs, {d['memory_mib']:.0f} MiB")


def bench_table(results):
    lines = ["| workload | impl | median ms | GB/s | TFLOP/s | kernels |", "|---|---|---|---|---|---|"]
    for r in results:
        if r["impl"] == "kiln-compile":
            continue
        num = lambda v, f: "-" if v is None else f.format(v)
        lines.append(f"| {r['workload']} | {r['impl']} | {r['median_ms']:.4f} | {num(r['gbps'], '{:.0f}')} | "
                     f"{num(r['gflops'] and r['gflops'] / 1e3, '{:.1f}')} | {num(r['kernels'], '{:.0f}')} |")
    return lines


def tests_line(name, t):
    if not isinstance(t, dict):
        return f"- {name}: {t}"
    failed = ", ".join(t["failed"]) or "none"
    return f"- {name}: {t['suites']} suites, failed: {failed}"


def markdown(r):
    md = [f"# kiln GPU check ({r['mode']}, {r['date']}, {r['seconds']} s): "
          f"{'passed' if r['passed'] else 'FAILED'}", "", device_line(r["kiln_device"]), ""]
    md += ["| step | status | seconds |", "|---|---|---|"]
    md += [f"| {s['name']} | {s['status']}{': ' + s['first_error'] if s.get('first_error') else ''} | "
           f"{s['seconds']} |" for s in r["steps"]]
    md += ["", tests_line("GPU suites", r["tests_gpu"]), tests_line("GPU suites with KILN_VALIDATE=1", r["tests_validate"]),
           tests_line("the other suites", r["tests_rest"]), ""]
    if isinstance(r["targets"], list):
        md += ["| check | measured | target | met |", "|---|---|---|---|"]
        md += [f"| {t['check']} | {t['measured']} | {t['target']} | "
               f"{'-' if t['met'] is None else 'yes' if t['met'] else 'NO'} |" for t in r["targets"]]
    else:
        md.append(f"targets: {r['targets']}")
    tr = r["transfers"]
    if isinstance(tr, dict):
        md += ["", f"transfers of {tr['mib']:.0f} MiB, GB/s host->device / device->host: kiln "
               f"{tr['kiln_pageable_h2d_gbps']:.1f} / {tr['kiln_pageable_d2h_gbps']:.1f}, driver pageable "
               f"{tr['driver_pageable_h2d_gbps']:.1f} / {tr['driver_pageable_d2h_gbps']:.1f}, driver pinned "
               f"{tr['driver_pinned_h2d_gbps']:.1f} / {tr['driver_pinned_d2h_gbps']:.1f}"]
    else:
        md += ["", f"transfers: {tr}"]
    md += [""] + (bench_table(r["benchmarks"]) if isinstance(r["benchmarks"], list)
                  else [f"benchmarks: {r['benchmarks']}"])
    return "\n".join(md) + "\n"


def main():
    out, dry, seconds, failed = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4] != "0"
    r = report(out, dry, seconds, failed)
    with open(os.path.join(out, "gpu-check.json"), "w", encoding="utf-8") as f:
        json.dump(r, f, indent=1)
    md = markdown(r)
    with open(os.path.join(out, "summary.md"), "w", encoding="utf-8") as f:
        f.write(md)
    print(md, end="")


if __name__ == "__main__":
    main()
