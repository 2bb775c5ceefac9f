/* attention.c: scaled_dot_product_attention as one IR_ATTN node (ops.def),
 * which the CPU and CUDA back ends run as one kernel with an online softmax;
 * the cases it does not cover stay on nn.c's composition. */
#include "frontend/frontend.h"

#include <string.h>

/* Whether k [..., Hkv, S, E] (or v) has q's batch dims, dim -3 divided by
 * the GQA group. */
static bool same_batch(const ir_node *q, const ir_node *t, int64_t group) {
  for (int d = 0; d < q->ndim - 2; d++)
    if (t->shape[d] * (d == q->ndim - 3 ? group : 1) != q->shape[d]) return false;
  return true;
}

/* Whether mask broadcasts to shape (the result's batch dims and [L, S]). */
static bool mask_fits(const ir_node *mask, int nd, const int64_t *shape) {
  if (mask->ndim > nd) return false;
  for (int d = 0; d < mask->ndim; d++) {
    int64_t m = mask->shape[d], t = shape[nd - mask->ndim + d];
    if (m != t && m != 1) return false;
  }
  return true;
}

static bool fused_covers(const ir_node *q, const ir_node *k, const ir_node *v, const ir_node *mask, int64_t group) {
  int nd = q->ndim;
  bool floats = (q->dtype == KILN_F32 || q->dtype == KILN_F64) && k->dtype == q->dtype && v->dtype == q->dtype;
  bool symbolic = q->symbolic || k->symbolic || v->symbolic || (mask && mask->symbolic);
  bool empty = !ir_numel(nd, q->shape) || !ir_numel(nd, k->shape) || !ir_numel(nd, v->shape);
  bool mask_dtype = !mask || mask->dtype == KILN_BOOL || mask->dtype == q->dtype;
  return floats && !symbolic && !empty && mask_dtype && same_batch(q, k, group) && same_batch(q, v, group);
}

ir_node *fe_attention_fused(const char *f, int l, ir_node *q, ir_node *k, ir_node *v, ir_node *mask, bool causal,
                            double scale, bool gqa) {
  int nd = q->ndim;
  int64_t group = gqa ? q->shape[nd - 3] / k->shape[nd - 3] : 1, shape[KILN_MAX_DIMS];
  if (!fused_covers(q, k, v, mask, group)) return NULL;
  memcpy(shape, q->shape, sizeof shape);
  shape[nd - 1] = k->shape[nd - 2];   /* the mask's shape: [..., L, S] */
  if (mask && !mask_fits(mask, nd, shape)) return NULL;
  ir_node *m = mask ? kiln_expand_at(f, l, mask, nd, shape) : NULL;
  if (m && m->status != KILN_OK) return m;
  shape[nd - 1] = v->shape[nd - 1];
  ir_node *src[IR_MAX_SRC] = {q, k, v, m};
  ir_node *n = ir_node_new(m ? IR_ATTENTION_MASKED : IR_ATTENTION, q->dtype, nd, shape, m ? 4 : 3, src, f, l);
  if (m) fe_drop(m);
  if (!n) return fe_nomem();
  n->attr.value = scale;
  n->attr.causal = causal;
  n->attr.group = group;
  return fe_finish(n);
}
