#!/usr/bin/env python3
"""gpu_bundle.py SRC BUILD OUT LIMIT_MIB [--uncompressed]: the packing half of
scripts/gpu-bundle.sh, which made BUILD (programs in BUILD/bin with the run
path $ORIGIN/../lib, libkiln.so in BUILD/lib). It writes OUT/:

  bundle.json     what was built and from what, the glibc it was built
                  against and the newest symbol version it needs, every
                  file's size and sha256, the suites ctest knows (command,
                  environment, labels, timeout: tests.tsv's source)
  tests.tsv       those suites in the bundle's paths, one a line, for
                  gpu-check.sh; not-bundled.tsv: the ones that need a file
                  of this machine (a compiler, doxygen), and why
  kiln.tar.xz     bin/ (the suites, kiln_bench, the examples the check runs)
                  and lib/libkiln.so.N, stripped
  libs.tar.xz     lib/: every other library those load that glibc does not
                  provide, as ldd (the loader itself) resolves them here
  bundle.env      the facts gpu-check.sh reads (glibc, commit); SHA256SUMS
  gpu-check.sh, gpu_report.py, gpu_peers.py, and src/: the files the
                  suites read, at their paths in the repository

With --uncompressed bin/ and lib/ stay folders (a local check: no limit).
Prints the bundle's size against LIMIT_MIB and exits 1 when it is over.
Python's standard library only."""
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

# What gpu-check.sh runs besides the suites (whose programs ctest names).
STEP_PROGRAMS = ("kiln_bench", "demo")
SCRIPTS = ("gpu-check.sh", "gpu_report.py", "gpu_peers.py")
MIB = 1 << 20


def run(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def inside(path, top):
    return os.path.commonpath([os.path.abspath(path), top]) == top


# ---- the loader's view ----------------------------------------------------
def ldd(path):
    """(name, resolved path) of every library the loader maps for path, with
    no LD_LIBRARY_PATH or LD_PRELOAD of ours; an unresolved one is an error."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    libs = []
    for line in run("ldd", path, env=env).splitlines():
        line = line.strip()
        if "=> not found" in line:
            sys.exit(f"gpu_bundle: {path} needs {line.split()[0]}, which the loader does not find here")
        m = re.match(r"(\S+) => (/\S+) \(0x", line) or re.match(r"(/\S+) \(0x", line)
        if m:
            libs.append((os.path.basename(m.group(1)), m.group(m.lastindex)))
    return libs


def readelf_versions(path):
    return run("readelf", "-V", "--wide", path)


def is_glibc(path):
    """glibc's own libraries (libc, libm, the loader, ...) define GLIBC_
    symbol versions: those are the system's, every other library is packed."""
    text = readelf_versions(path)
    defs = text.split("Version definition section", 1)[1].split("Version needs section")[0] if \
        "Version definition section" in text else ""
    return re.search(r"Name: GLIBC_\d", defs) is not None


def glibc_needed(paths):
    """The newest GLIBC_x.y symbol version any of paths asks for."""
    found = set()
    for p in paths:
        text = readelf_versions(p)
        needs = text.split("Version needs section", 1)[1] if "Version needs section" in text else ""
        found.update(tuple(int(x) for x in v.split(".")) for v in re.findall(r"Name: GLIBC_(\d+(?:\.\d+)+)", needs))
    return ".".join(map(str, max(found))) if found else "none"


def soname(path):
    """A library's SONAME; None for a program."""
    m = re.search(r"\(SONAME\)\s+Library soname: \[([^]]+)\]", run("readelf", "-d", path))
    return m.group(1) if m else None


# ---- the suites, as ctest knows them ----------------------------------------
class Bundle:
    def __init__(self, src, build):
        self.src, self.build = src, build
        self.files = {}        # bundle path -> source file (bin/x, lib/x, src/x)
        self.tests, self.not_bundled = [], []

    def program(self, path):
        """The bundle path of a program or library of the build."""
        real = os.path.realpath(path)
        name = soname(real)
        rel = "lib/" + name if name else "bin/" + os.path.basename(real)
        self.files[rel] = real
        return rel

    def source_file(self, path):
        """A file of the repository, at its own path under src/; a Python
        script brings the modules beside it (its imports)."""
        rel = os.path.relpath(path, self.src)
        here = os.path.dirname(path)
        names = [n for n in os.listdir(here) if n.endswith(".py")] if path.endswith(".py") else [os.path.basename(path)]
        for n in names:
            self.files["src/" + os.path.join(os.path.dirname(rel), n)] = os.path.join(here, n)
        return "src/" + rel

    def packable(self, tok):
        """A word is packable unless it names something outside the build and
        the repository, or a folder."""
        return not tok.startswith("/") or (os.path.isfile(tok) and (inside(tok, self.build) or inside(tok, self.src)))

    def token(self, tok):
        """tok in the bundle's terms (@B@: where the bundle is unpacked)."""
        if not tok.startswith("/"):
            return tok
        return "@B@/" + (self.program(tok) if inside(tok, self.build) else self.source_file(tok))

    def add_test(self, t):
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        cmd = list(t["command"])
        if os.path.basename(cmd[0]).startswith("python3"):
            cmd[0] = "@PYTHON@"   # the machine's own (gpu-check.sh says which)
        env = [kv.split("=", 1) for kv in props.get("ENVIRONMENT", [])]
        foreign = [w for w in cmd + [v for _, v in env] if not self.packable(w)]
        if foreign:
            self.not_bundled.append({"name": t["name"], "why": "needs " + ", ".join(foreign) + " of the build machine"})
            return
        cmd = [self.token(c) for c in cmd]
        env = [f"{k}={self.token(v)}" for k, v in env]
        if any(any(c in w for c in " \t\n") for w in cmd + env):
            sys.exit(f"gpu_bundle: {t['name']}: a word of its command or environment holds a space: {cmd + env}")
        cwd = props.get("WORKING_DIRECTORY", self.build)
        self.tests.append({"name": t["name"], "labels": props.get("LABELS", []),
                           "timeout": int(props.get("TIMEOUT", 1500)), "skip_return_code": props.get("SKIP_RETURN_CODE"),
                           "cwd": "@W@/" + os.path.relpath(cwd, self.build), "env": env, "command": cmd})

    def read_ctest(self):
        tests = json.loads(run("ctest", "--show-only=json-v1", cwd=self.build))["tests"]
        for t in tests:
            self.add_test(t)
        for name in STEP_PROGRAMS:
            self.program(os.path.join(self.build, "bin", name))

    def libraries(self):
        """Every library the packed programs load, by the loader's own view:
        kiln's (in the build) and the system's that are not glibc's."""
        kiln, system, glibc = {}, {}, set()
        elves = [p for p in self.files.values() if is_elf(p)]
        for elf in elves:
            for name, path in ldd(elf):
                rel = "lib/" + name
                if inside(path, self.build):
                    kiln[rel] = os.path.realpath(path)
                elif rel in system or name in glibc:
                    continue
                elif is_glibc(path):
                    glibc.add(name)
                else:
                    system[rel] = os.path.realpath(path)
        self.files.update(kiln)
        return system, sorted(glibc)


# ---- packing ------------------------------------------------------------------
def stage(files, into, strip):
    for rel, path in files.items():
        dst = os.path.join(into, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(path, dst)
        if strip and is_elf(dst):
            run("strip", "--strip-unneeded", dst)


def tar_xz(top, names, archive):
    """A tar of top's names, sorted and with fixed owners and times, through
    xz -9 in one block per core (xz's default block, three dictionaries of 64
    MiB, would leave LLVM's library to one thread), none under 64 MiB; the
    blocks unpack in parallel too."""
    size = sum(os.path.getsize(os.path.join(top, n)) for n in names)
    block = max(64 * MIB, -(-size // (os.cpu_count() or 1)))
    tar = subprocess.Popen(["tar", "--sort=name", "--mtime=@0", "--owner=0", "--group=0", "--numeric-owner",
                            "-C", top, "-cf", "-"] + sorted(names), stdout=subprocess.PIPE)
    with open(archive + ".part", "wb") as f:
        subprocess.run(["xz", "-9", "-T0", f"--block-size={block}", "-c"], stdin=tar.stdout, stdout=f, check=True)
    if tar.wait():
        sys.exit(f"gpu_bundle: tar of {archive} failed")
    os.replace(archive + ".part", archive)


def libs_archive(system, build, out):
    """libs.tar.xz, from a cache under BUILD keyed by the libraries' contents
    (they change only with the machine's packages; xz -9 takes minutes)."""
    key = hashlib.sha256("".join(f"{r} {sha256(p)}\n" for r, p in sorted(system.items())).encode()).hexdigest()[:16]
    cache = os.path.join(build, "bundle-cache", f"libs-{key}.tar.xz")
    if not os.path.exists(cache):
        tmp = os.path.join(build, "bundle-cache", "libs-stage")
        shutil.rmtree(tmp, ignore_errors=True)
        stage(system, tmp, strip=False)
        print(f"gpu_bundle: compressing {len(system)} system libraries "
              f"({sum(os.path.getsize(p) for p in system.values()) / MIB:.0f} MiB)", flush=True)
        tar_xz(tmp, list(system), cache)
        shutil.rmtree(tmp)
    shutil.copy2(cache, os.path.join(out, "libs.tar.xz"))


def write_tsv(bundle, out):
    with open(os.path.join(out, "tests.tsv"), "w") as f:
        for t in bundle.tests:
            f.write("\t".join([t["name"], ",".join(t["labels"]) or "-", str(t["timeout"]),
                               str(t["skip_return_code"] or "-"), t["cwd"], " ".join(t["env"]) or "-",
                               " ".join(t["command"])]) + "\n")
    with open(os.path.join(out, "not-bundled.tsv"), "w") as f:
        f.writelines(f"{t['name']}\t{t['why']}\n" for t in bundle.not_bundled)


def facts(src, elves, glibc):
    def git(*a):
        try:
            return run("git", "-C", src, *a).strip()
        except (subprocess.CalledProcessError, FileNotFoundError):
            return "unknown"
    version = re.findall(r"#define KILN_VERSION_(?:MAJOR|MINOR|PATCH) +(\d+)", open(os.path.join(src, "include/kiln.h")).read())
    return {"kiln": ".".join(version), "commit": git("rev-parse", "HEAD"),
            "dirty": git("status", "--porcelain", "--untracked-files=no") != "",
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "glibc_built": run("getconf", "GNU_LIBC_VERSION").split()[-1], "glibc_needed": glibc_needed(elves),
            "system_libraries": glibc}


def write_env(info, out):
    """bundle.env: the facts gpu-check.sh (bash) needs, as shell assignments;
    SHA256SUMS: the archives', for sha256sum -c after the trip."""
    env = {"KILN_VERSION": info["kiln"], "BUNDLE_COMMIT": info["commit"] + ("+dirty" if info["dirty"] else ""),
           "BUNDLE_DATE": info["date"], "GLIBC_BUILT": info["glibc_built"], "GLIBC_NEEDED": info["glibc_needed"],
           "SYSTEM_LIBRARIES": " ".join(info["system_libraries"])}
    with open(os.path.join(out, "bundle.env"), "w") as f:
        f.writelines(f"{k}={shlex.quote(v)}\n" for k, v in env.items())
    with open(os.path.join(out, "SHA256SUMS"), "w") as f:
        f.writelines(f"{sha256(os.path.join(out, n))}  {n}\n" for n in sorted(os.listdir(out)) if n.endswith(".tar.xz"))


def files(out):
    """Every file's size, and the sha256 of all but the unpacked programs and
    libraries of an uncompressed bundle (hashing those would only cost time)."""
    listing = {}
    for r, _, ns in os.walk(out):
        for n in ns:
            rel = os.path.relpath(os.path.join(r, n), out)
            listing[rel] = {"bytes": os.path.getsize(os.path.join(r, n))}
            if not rel.startswith(("bin/", "lib/")):
                listing[rel]["sha256"] = sha256(os.path.join(r, n))
    return listing


def size_line(out, limit):
    sizes = {n: os.path.getsize(os.path.join(r, n)) for r, _, ns in os.walk(out) for n in ns}
    total = sum(sizes.values())
    parts = ", ".join(f"{n} {s / MIB:.1f}" for n, s in sorted(sizes.items()) if n.endswith(".xz"))
    rest = total - sum(s for n, s in sizes.items() if n.endswith(".xz"))
    print(f"gpu-bundle: {total / MIB:.1f} MiB of at most {limit} MiB ({parts}, scripts and data {rest / MIB:.1f})")
    return total <= limit * MIB


def main():
    src, build, out = (os.path.abspath(a) for a in sys.argv[1:4])
    limit, compress = int(sys.argv[4]), "--uncompressed" not in sys.argv[5:]
    b = Bundle(src, build)
    b.read_ctest()
    system, glibc = b.libraries()
    if os.path.exists(out):
        if os.listdir(out) and not os.path.exists(os.path.join(out, "bundle.json")):
            sys.exit(f"gpu_bundle: {out} is not a bundle: not overwriting it")
        shutil.rmtree(out)
    os.makedirs(out)
    kiln = {r: p for r, p in b.files.items() if not r.startswith("src/")}
    data = {r: p for r, p in b.files.items() if r.startswith("src/")}
    data.update({s: os.path.join(src, "scripts", s) for s in SCRIPTS})
    stage(data, out, strip=False)
    if compress:
        tmp = os.path.join(build, "bundle-stage")
        shutil.rmtree(tmp, ignore_errors=True)
        stage(kiln, tmp, strip=True)
        tar_xz(tmp, list(kiln), os.path.join(out, "kiln.tar.xz"))
        shutil.rmtree(tmp)
        libs_archive(system, build, out)
    else:
        stage(kiln, out, strip=True)
        stage(system, out, strip=False)
    write_tsv(b, out)
    info = facts(src, list(kiln.values()) + list(system.values()), glibc)
    write_env(info, out)
    info.update({"tests": b.tests, "not_bundled": b.not_bundled, "programs": sorted(kiln), "libraries": sorted(system),
                 "files": files(out)})
    with open(os.path.join(out, "bundle.json"), "w") as f:
        json.dump(info, f, indent=1)
    if compress and not size_line(out, limit):
        sys.exit(f"gpu-bundle: FAILED: over the {limit} MiB limit")


if __name__ == "__main__":
    main()
