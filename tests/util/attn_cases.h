/* attn_cases.h: the scaled_dot_product_attention cases the CPU suite
 * (test_attention.c) checks and the CUDA emulation (cuda_emu/cases_attn.c)
 * emits: odd sizes, masks of each kind with fully masked rows, GQA,
 * transposed views, head dims over one tile chunk, f32 and f64. */
#ifndef KILN_TEST_ATTN_CASES_H
#define KILN_TEST_ATTN_CASES_H

#include "kiln.h"

#include <stdbool.h>

typedef struct {
  int b, hq, hkv, l, s, e, ev;
  int mode;            /* 0 none, 1 causal, 2 bool mask, 3 float mask */
  kiln_dtype dt;
  bool transposed;     /* q, k, v are [b, seq, h, e] data viewed as [b, h, seq, e] */
} tu_attn_case;

extern const tu_attn_case tu_attn_cases[];
extern const int tu_attn_ncases;

typedef struct { kiln_tensor *q, *k, *v, *mask; } tu_attn_inputs;

/* The case's mask as an f64 tensor [L, S] of additive values: 0 keeps,
 * -inf drops (the causal one for mode 1, zeros for mode 0). */
kiln_tensor *tu_attn_mask_values(const tu_attn_case *c);
/* Seeded q, k, v and the mask SDPA is given (bool, true keeps, or of the
 * case's dtype; NULL for modes 0 and 1), all pending. */
tu_attn_inputs tu_attn_inputs_of(const tu_attn_case *c);
/* kiln_scaled_dot_product_attention of the inputs as the case asks. */
kiln_tensor *tu_attn_sdpa(const tu_attn_case *c, tu_attn_inputs in);

#endif
