/* attn_cases.c: see attn_cases.h. */
#include "util/attn_cases.h"
#include "util/testutil.h"

#include <math.h>

const tu_attn_case tu_attn_cases[] = {
  {2, 2, 2, 5, 7, 4, 3, 0, KILN_F32, false},
  {2, 2, 2, 70, 70, 13, 13, 1, KILN_F32, false},   /* 3 row blocks, 2 key blocks, e not a vector multiple */
  {1, 2, 2, 9, 150, 16, 5, 2, KILN_F32, false},    /* bool mask, row 0 fully masked: nan */
  {1, 3, 3, 6, 65, 8, 8, 3, KILN_F64, false},      /* float mask with -inf, row 1 fully masked */
  {2, 4, 2, 33, 33, 8, 4, 1, KILN_F32, false},     /* GQA: 2 query heads per key/value head */
  {1, 2, 2, 1, 1, 3, 2, 0, KILN_F64, false},       /* L = S = 1 */
  {1, 2, 2, 40, 1, 5, 3, 1, KILN_F32, false},      /* S = 1, causal: every row sees key 0 */
  {2, 3, 3, 20, 12, 6, 7, 1, KILN_F32, true},      /* L > S causal, transposed views */
  {1, 2, 1, 17, 90, 12, 9, 2, KILN_F64, true},     /* GQA, bool mask, transposed */
  {1, 1, 1, 100, 200, 64, 64, 1, KILN_F32, false}, /* causal over 4 key blocks, 3 row blocks */
  {1, 2, 2, 60, 130, 9, 70, 1, KILN_F64, false},   /* f64 blocks of 24 rows, 3 key blocks, ev past 64 */
  {1, 2, 2, 50, 129, 3, 17, 3, KILN_F32, false},   /* float mask over 3 key blocks, the last of one key */
  {1, 1, 1, 97, 64, 70, 9, 0, KILN_F32, true},     /* one key block exactly, e past 64, a last row block of 1 */
  {1, 2, 2, 6, 20, 40, 36, 3, KILN_F64, false},    /* head dims over CUDA's f64 chunk (32) */
  {1, 1, 1, 10, 9, 70, 66, 0, KILN_F32, false},    /* ... and over its f32 chunk (64) */
};
const int tu_attn_ncases = (int)(sizeof tu_attn_cases / sizeof *tu_attn_cases);

static double mask_value(const tu_attn_case *c, int i, int j) {
  if (c->mode == 1) return j > i ? -INFINITY : 0;
  if (c->mode == 2) return i > 0 && (i + 2 * j) % 5 != 0 ? 0 : -INFINITY;
  if (c->mode == 3) return i == 1 || (i + j) % 7 == 0 ? -INFINITY : 0.125 * (i - j % 4);
  return 0;
}

kiln_tensor *tu_attn_mask_values(const tu_attn_case *c) {
  static double mv[200 * 200];
  for (int i = 0; i < c->l; i++)
    for (int j = 0; j < c->s; j++) mv[i * c->s + j] = mask_value(c, i, j);
  return kiln_from_data(mv, KILN_F64, KILN_SHAPE(c->l, c->s));
}

static kiln_tensor *mask_of(const tu_attn_case *c) {
  kiln_tensor *m = tu_attn_mask_values(c);
  return c->mode == 2 ? kiln_eqs(m, 0) : kiln_cast(m, c->dt);
}

static kiln_tensor *input(const tu_attn_case *c, int h, int seq, int e, uint64_t seed) {
  if (!c->transposed) return tu_data(c->dt, KILN_SHAPE(c->b, h, seq, e), seed, TU_SMALL);
  return kiln_transpose(tu_data(c->dt, KILN_SHAPE(c->b, seq, h, e), seed, TU_SMALL), 1, 2);
}

tu_attn_inputs tu_attn_inputs_of(const tu_attn_case *c) {
  return (tu_attn_inputs){input(c, c->hq, c->l, c->e, 40), input(c, c->hkv, c->s, c->e, 41),
                          input(c, c->hkv, c->s, c->ev, 42), c->mode >= 2 ? mask_of(c) : NULL};
}

kiln_tensor *tu_attn_sdpa(const tu_attn_case *c, tu_attn_inputs in) {
  return kiln_scaled_dot_product_attention(in.q, in.k, in.v, in.mask, c->mode == 1, 0, c->hq != c->hkv);
}
