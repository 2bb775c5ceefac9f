/* gemm_operands.c: on a CUDA target a matmul's operands go to cuBLASLt,
 * which reads a matrix in place only with unit stride along one of its two
 * dims and the other dim's stride at least the first one's size
 * (codegen_cuda/gemm.c). A flipped, stepped or row-broadcast operand is read
 * through a contiguous copy instead: a cast to its own dtype (a kernel that
 * loads through the view and stores), which fuse stores as it stores every
 * matmul operand that is not a view. Batch dims need nothing: strides that
 * do not fold become separate calls. CPU kernels are left alone: packing
 * reads any strides. Needs fold_views (a view of a buffer is then a buffer
 * with strides); keeps every node's value. The copies are held in
 * g->created. */
#include "pass.h"

#include <stdlib.h>
#include <string.h>

/* The strides the GEMM reads n with (lower.c's gemm_view): a buffer's own,
 * a stored node's contiguous ones, composed through the views above it.
 * fuse stores the operand itself when a view in its chain is not a strided
 * view (fuse.c's strided_leaf): false then. */
static bool view_strides(const ir_node *n, int64_t *st) {
  if (n->op == IR_BUFFER) {
    memcpy(st, n->strides, sizeof(int64_t) * (size_t)n->ndim);
    return true;
  }
  if (!ir_op_has(n->op, IR_MOVE)) {
    ir_contiguous_strides(n->ndim, n->shape, st);
    return true;
  }
  int64_t s[KILN_MAX_DIMS], off = 0;
  return pass_view_affine(n) && view_strides(n->src[0], s) && pass_view_strides(n, s, st, &off);
}

/* An r x c matrix (strides sr, sc) as stored (cuBLASLt's column-major
 * c x r) or transposed (r x c): k_blas_ld, as codegen_cuda/gemm.c asks it. */
static bool readable(const ir_node *n) {
  int64_t st[KILN_MAX_DIMS];
  if (!view_strides(n, st)) return true;  /* stored contiguously by fuse */
  int d = n->ndim - 2;
  int64_t r = n->shape[d], c = n->shape[d + 1], sr = st[d], sc = st[d + 1];
  return k_blas_ld(c, r, sc, sr) || k_blas_ld(r, c, sr, sc);
}

void pass_gemm_operands(pass_graph *g) {
  bool changed = false;
  for (int i = 0; i < g->n; i++) {
    ir_node *n = g->topo[i];
    if (n->op != IR_MATMUL || pass_target(g, n) != KILN_CUDA) continue;
    for (int k = 0; k < 2; k++) {
      ir_node *s = n->src[k];
      if (readable(s)) continue;
      ir_node *copy = ir_node_new(IR_CAST, s->dtype, s->ndim, s->shape, 1, &s, n->file, n->line);
      if (!copy) {
        g->oom = true;
        return;
      }
      copy->attr.to = copy->attr.compute = s->dtype;
      pass_hold(g, copy);
      if (g->oom) return;
      ir_node_set_src(n, k, copy);
      changed = true;
    }
  }
  if (!changed) return;
  free(g->topo);  /* the copies take their place in topological order */
  g->n = ir_graph_collect(g->ntargets, g->targets, &g->topo);
  if (g->n < 0) g->n = 0, g->oom = true;
}
