/* cases.h: the graphs the CUDA tests compile: every elementwise op on every
 * dtype it accepts, casts between all dtypes, broadcasting, movement views,
 * random and other sources, scans (long ones in two passes), reductions (by rows, and whole tensors on one
 * block or the whole grid), elementwise kernels on the vector path, integer
 * divisions by zero whose kernel check must fail, gathers (loads through an
 * index tensor) and scatters, the fused attention (cases_attn.c), and
 * shape-generic kernels at two shapes.
 * test_cuda_codegen.c compiles the kernels of all of them with NVRTC; the
 * emulation generator (gen.c) runs a share of them through the emulated
 * GPU. Built through the public API only. */
#ifndef KILN_CUDA_CASES_H
#define KILN_CUDA_CASES_H

#include "kiln.h"
#include "runtime/inspect.h"
#include "util/ref.h"

typedef struct {
  char name[64];
  kiln_tensor *t;       /* the pending expression (the caller releases it) */
  ref_tol tol;          /* against the reference evaluator */
  bool reduces;         /* has a reduction: CPU and GPU may sum in other orders */
  int fails;            /* a kernel check that must fail (kc_code; 0: none) ... */
  int64_t fail_at;      /* ... at this flat position: the launch has no result to compare */
  bool per_kernel;      /* a plan of several kernels (a long scan's passes): each emulated on its own */
  bool generic;         /* planned shape-generic (KILN_DYNAMIC=1): its structure comes
                           at two shapes, which give the same kernels */
} cuda_case;

int cuda_case_count(void);
/* Builds case i; false when the combination does not exist (an op the dtype
 * rules out): nothing to release then. Random sources are reseeded per case. */
bool cuda_case_build(int i, cuda_case *c);
/* The case's kernels as the CUDA back end gets them (rt_plan_for), shape-
 * generic for a generic case; their number, or -1 (the last error says why). */
int cuda_case_plan(const cuda_case *c, rt_planned **plan);

/* The family of cases_attn.c: scaled_dot_product_attention's fused kernel. */
int cuda_attn_case_count(void);
bool cuda_attn_case_build(int j, cuda_case *c);

#endif
