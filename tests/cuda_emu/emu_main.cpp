// emu_main.cpp: the run-time half of the emulation harness. Runs each
// generated kernel (kernels.cu, compiled here as host C++ with shim.h) on
// host buffers as grids of pthread blocks, then compares the output with
// the reference evaluator (within the case's tolerance) and with the CPU
// back end (bit for bit, nan matching nan, unless the case reduces:
// summation order may differ). Prints each failure; exits 1 if any.
#include "shim.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels.cu"

struct emu_param {
  int dtype;                    // kiln_dtype
  long long numel;              // outputs: elements to allocate
  const unsigned char *data;    // inputs: bytes to copy (nullptr for the output)
  size_t bytes;
  int status;                   // a kernel check's status slot (ir/kernel.h), zero before the launch
};
struct emu_case {
  const char *name;
  void (*run)(void **bufs, long long lo, long long hi, void *scratch);
  long long range;
  int block;                    // threads per block the kernel was emitted for
  int grid;                     // blocks it asks for
  long long scratch;            // bytes of scratch it needs (codegen_cuda/cuda.h)
  int nparams;
  const emu_param *params;
  int out_dtype;
  long long numel;
  const double *want;           // reference evaluator
  const unsigned char *cpu;     // CPU back end, raw storage
  double rtol, atol;
  int exact_cpu;
  int fails;                    // the kernel check that must fail (kc_code), 0: none
  long long fail_at;            // at this flat position
  int out;                      // the output param compared (a kernel of several outputs has a row per output)
};

#include "cases.inc"

enum { BOOL_, U8, I8, I16, I32, I64, F16, BF16, F32, F64 };
static const size_t dsize[] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};

// Element i of raw storage as a double (f16 and bf16 exactly).
static double load(int dt, const void *p, long long i) {
  const unsigned char *b = (const unsigned char *)p + i * (long long)dsize[dt];
  switch (dt) {
  case BOOL_: case U8: return *b;
  case I8: return *(const signed char *)b;
  case I16: { short v; memcpy(&v, b, 2); return v; }
  case I32: { int v; memcpy(&v, b, 4); return v; }
  case I64: { long long v; memcpy(&v, b, 8); return (double)v; }
  case F16: { unsigned short v; memcpy(&v, b, 2); return __half2float(__ushort_as_half(v)); }
  case BF16: { unsigned short v; memcpy(&v, b, 2); return __uint_as_float((unsigned)v << 16); }
  case F32: { float v; memcpy(&v, b, 4); return v; }
  default: { double v; memcpy(&v, b, 8); return v; }
  }
}

static bool near(double got, double want, double rtol, double atol) {
  if (isnan(want) || isnan(got)) return isnan(want) && isnan(got);
  if (isinf(want) || isinf(got)) return got == want;
  return fabs(got - want) <= atol + rtol * fabs(want);
}

// Bits equal, or both nan (payloads may differ).
static bool same(int dt, const unsigned char *a, const unsigned char *b, long long i) {
  size_t n = dsize[dt];
  if (!memcmp(a + i * n, b + i * n, n)) return true;
  return dt >= F16 && isnan(load(dt, a, i)) && isnan(load(dt, b, i));
}

// Room for bytes at a 64-byte aligned address, plus shift bytes: the GPU's
// allocations are aligned, and shift moves a buffer off it.
static unsigned char *place(std::vector<unsigned char> &v, size_t bytes, size_t shift) {
  v.resize(bytes + shift + 64);
  return (unsigned char *)(((uintptr_t)v.data() + 63) & ~(uintptr_t)63) + shift;
}

// Runs one case on a grid of grid blocks of block threads (the last block
// first when reverse), each buffer one element off its alignment when
// shifted (the vector path's fallback); scratch is the case's, zeroed, and
// must be zeroed again afterwards. Returns the number of mismatches.
static int run_case(const emu_case &c, unsigned grid, unsigned block, bool reverse, bool shifted,
                    unsigned char *scratch) {
  std::vector<std::vector<unsigned char>> store(c.nparams);
  std::vector<void *> bufs(c.nparams);
  for (int p = 0; p < c.nparams; p++) {
    const emu_param &pp = c.params[p];
    size_t bytes = pp.data ? pp.bytes : (size_t)pp.numel * dsize[pp.dtype] + 1;
    unsigned char *b = place(store[p], bytes, shifted ? dsize[pp.dtype] : 0);
    if (pp.data) memcpy(b, pp.data, bytes);
    else memset(b, 0xcd, bytes);  // unwritten shows
    bufs[p] = b;
  }
  if (c.range > 0) emu_launch(grid, block, reverse, [&] { c.run(bufs.data(), 0, c.range, scratch); });
  unsigned counter = 0;  // finished blocks: the last one resets it
  if (scratch) memcpy(&counter, scratch, sizeof counter);
  if (counter) printf("FAIL %s (%u blocks of %u): scratch counter left at %u\n", c.name, grid, block, counter);
  const unsigned char *out = (const unsigned char *)bufs[c.out];
  int bad = 0;
  for (int p = 0; p < c.nparams; p++) {
    long long slot[4];
    if (!c.params[p].status) continue;
    memcpy(slot, bufs[p], sizeof slot);
    if (slot[0] == c.fails && (!c.fails || slot[2] == c.fail_at)) continue;
    printf("FAIL %s: kernel check slot: code %lld, site %lld, element %lld; wanted code %d at %lld\n", c.name, slot[0],
           slot[1], slot[2], c.fails, c.fail_at);
    bad++;
  }
  for (long long i = 0; i < c.numel; i++) {
    double got = load(c.out_dtype, out, i);
    bool ok = near(got, c.want[i], c.rtol, c.atol);
    bool cpu_ok = !c.exact_cpu || same(c.out_dtype, out, c.cpu, i);
    if ((ok && cpu_ok) || bad++ >= 3) continue;
    printf("FAIL %s[%lld] (%u blocks of %u): emulated %.9g, reference %.9g, CPU %.9g%s\n", c.name, i, grid, block,
           got, c.want[i], load(c.out_dtype, c.cpu, i), ok ? " (differs from the CPU)" : "");
  }
  return bad + (counter != 0);
}

int main() {
  int failed = 0, n = (int)(sizeof emu_cases / sizeof *emu_cases);
  // Each case runs on the grid and block it was emitted for, with aligned
  // buffers (the vector path where there is one); then on 3 blocks of 40
  // threads (two warps, one partial), last block first, every buffer one
  // element off its alignment: grid-stride loops wrap, block-wide folds
  // meet a partial warp, the vector path falls back to scalars, and a
  // grid-wide reduction reuses the scratch the first run left.
  for (int i = 0; i < n; i++) {
    const emu_case &c = emu_cases[i];
    std::vector<unsigned char> scratch_store;
    unsigned char *scratch = c.scratch ? place(scratch_store, (size_t)c.scratch, 0) : nullptr;
    if (scratch) memset(scratch, 0, (size_t)c.scratch);
    int bad = run_case(c, (unsigned)c.grid, (unsigned)c.block, false, false, scratch);
    failed += bad + run_case(c, 3, 40, true, true, scratch) > 0;
  }
  printf("cuda_emu: %d cases, %d failed\n", n, failed);
  return failed ? 1 : 0;
}
