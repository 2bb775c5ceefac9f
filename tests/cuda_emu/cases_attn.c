/* cases_attn.c: the fused attention's CUDA cases (cases.h): the cases of
 * test_attention.c (tests/util/attn_cases.c), each one kernel: the mask is
 * computed and stored before. */
#include "cuda_emu/cases.h"
#include "ir/ir.h"
#include "util/attn_cases.h"

#include <stdio.h>

int cuda_attn_case_count(void) { return tu_attn_ncases; }

bool cuda_attn_case_build(int j, cuda_case *c) {
  const tu_attn_case *a = &tu_attn_cases[j];
  snprintf(c->name, sizeof c->name, "attention_%d_%s", j, ir_dtypes[a->dt].short_name);
  kiln_scope_begin();
  tu_attn_inputs in = tu_attn_inputs_of(a);
  if (in.mask) kiln_realize(in.mask);
  c->t = kiln_keep(tu_attn_sdpa(a, in));
  kiln_scope_end();
  c->tol = a->dt == KILN_F32 ? (ref_tol){2e-5, 2e-5} : (ref_tol){1e-12, 1e-12};
  c->reduces = true;   /* sums in another order than the CPU's kernel */
  return true;         /* a failed build is test_cuda_codegen's failure, not a missing case */
}
