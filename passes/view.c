/* view.c: the strided-view algebra of the affine movement ops. A view of a
 * buffer with strides s and offset o stays a strided view after PERMUTE,
 * EXPAND, SLICE, SELECT, FLIP and a RESHAPE that only adds or drops size-1
 * dims (or reshapes a contiguous source); fold_views turns such chains into
 * buffer nodes and the GEMM lowering reads its operands through them. */
#include "pass.h"

#include <string.h>

/* RESHAPE that only inserts or removes size-1 dims. */
static bool unit_reshape(const ir_node *n) {
  const ir_node *s = n->src[0];
  int a = 0, b = 0;
  for (; a < n->ndim || b < s->ndim; a++, b++) {
    while (a < n->ndim && n->shape[a] == 1) a++;
    while (b < s->ndim && s->shape[b] == 1) b++;
    if ((a < n->ndim) != (b < s->ndim) || (a < n->ndim && n->shape[a] != s->shape[b])) return false;
  }
  return true;
}

bool pass_view_affine(const ir_node *n) {
  switch (n->op) {
  case IR_PERMUTE: case IR_EXPAND: case IR_SLICE: case IR_SELECT: case IR_FLIP: return true;
  case IR_RESHAPE: return unit_reshape(n);
  default: return false;
  }
}

bool pass_view_strides(const ir_node *n, const int64_t *s, int64_t *st, int64_t *off) {
  const ir_node *src = n->src[0];
  if (n->op == IR_RESHAPE && !unit_reshape(n)) {
    int64_t c[KILN_MAX_DIMS];
    ir_contiguous_strides(src->ndim, src->shape, c);
    for (int d = 0; d < src->ndim; d++)
      if (src->shape[d] != 1 && c[d] != s[d]) return false;
    ir_contiguous_strides(n->ndim, n->shape, st);  /* a contiguous source flattens freely */
    return true;
  }
  if (!pass_view_affine(n)) return false;
  int o = n->ndim - src->ndim;
  for (int d = 0, j = 0; d < n->ndim; d++) {
    switch (n->op) {
    case IR_PERMUTE: st[d] = s[n->attr.perm[d]]; break;
    case IR_EXPAND: st[d] = d < o || (src->shape[d - o] == 1 && n->shape[d] != 1) ? 0 : s[d - o]; break;
    case IR_FLIP:
      st[d] = n->attr.flip_mask >> d & 1 ? -s[d] : s[d];
      if (n->attr.flip_mask >> d & 1) *off += (n->shape[d] - 1) * s[d];
      break;
    case IR_SLICE:  /* a step past the end never scales anything (and may overflow) */
      st[d] = d == n->attr.dim && n->shape[d] > 1 ? s[d] * n->attr.stride : s[d];
      break;
    case IR_SELECT: st[d] = s[d < n->attr.dim ? d : d + 1]; break;
    default:  /* unit RESHAPE: size-1 dims take stride 0 */
      while (j < src->ndim && src->shape[j] == 1) j++;
      st[d] = n->shape[d] == 1 ? 0 : s[j++];
    }
  }
  if (n->op == IR_SLICE || n->op == IR_SELECT) *off += n->attr.index * s[n->attr.dim];
  return true;
}

bool pass_window_operand(const pass_graph *g, const ir_node *mm) {
  return mm->src[1]->op == IR_UNFOLD && pass_target(g, mm) == KILN_CPU;
}

bool pass_reduce_trailing(const ir_node *n) {
  const ir_node *s = n->src[0];
  bool reduced = false;
  for (int d = 0; d < s->ndim; d++) {
    if (s->shape[d] == 1) continue;
    if (n->attr.axes >> d & 1) reduced = true;
    else if (reduced) return false;
  }
  return true;
}

bool pass_column_sibling(const ir_node *a, const ir_node *b) {
  const ir_node *sa = a->src[0], *sb = b->src[0];
  return !pass_reduce_trailing(a) && !pass_reduce_trailing(b) && a->attr.axes == b->attr.axes &&
         sa->ndim == sb->ndim && memcmp(sa->shape, sb->shape, sizeof(int64_t) * (size_t)sa->ndim) == 0;
}
