/* sort.c: sort, argsort and topk. Each result is one IR_SORTING node along one
 * dim (the values, or their int64 positions); the fuser gives the two
 * results of one call one kernel, which sorts each line once. Every sort is
 * stable, so `stable` asks for nothing more. A 0-dim tensor sorts as one
 * element. */
#include "frontend/frontend.h"

/* NULL, or the error node for a bad dim, a bad k or a dtype topk refuses. */
static ir_node *sort_check(const char *f, int l, const char *name, ir_node *t, int64_t dim, int64_t k, bool topk) {
  ir_node *e = fe_check_arg(f, l, name, t, 1);
  int d;
  if (e || (e = fe_wrap_dim(f, l, name, t, t->ndim, dim, &d))) return e;
  if (!topk) return NULL;
  int64_t size = t->ndim ? t->shape[d] : 1;
  if (k < 0 || k > size)
    return fe_error(KILN_ERR_ARG, f, l, "%s: k (%lld) is out of range for dim %lld of size %lld", name, (long long)k,
                    (long long)dim, (long long)size);
  if (t->dtype == KILN_BOOL) return fe_error(KILN_ERR_DTYPE, f, l, "%s: not implemented for bool", name);
  return NULL;
}

/* One result (op) of sorting t along dim (in range), keeping k per line. */
static ir_node *sort_node(const char *f, int l, ir_op op, ir_node *t, int64_t dim, int64_t k, bool descending) {
  if (t->ndim == 0) {   /* one element: sorted as shape (1,), then viewed back */
    ir_node *one = kiln_reshape_at(f, l, t, 1, (const int64_t[]){1});
    ir_node *s = sort_node(f, l, op, one, 0, k, descending);
    ir_node *r = k ? kiln_reshape_at(f, l, s, 0, NULL) : fe_same(s);
    fe_drop(one);
    fe_drop(s);
    return r;
  }
  int d = (int)(dim < 0 ? dim + t->ndim : dim);
  int64_t shape[KILN_MAX_DIMS];
  for (int i = 0; i < t->ndim; i++) shape[i] = i == d ? k : t->shape[i];
  bool positions = op == IR_ARGSORT || op == IR_ARGTOPK;
  ir_node *n = ir_node_new(op, positions ? KILN_I64 : t->dtype, t->ndim, shape, 1, &t, f, l);
  if (!n) return fe_nomem();
  n->attr.axes = 1u << d;
  n->attr.sort_k = k;
  n->attr.descending = descending;
  return fe_finish(n);
}

/* The values (vop) and positions (iop) into the pointers that are not NULL;
 * on an error both are that error. */
static void sort_pair(const char *f, int l, const char *name, ir_op vop, ir_op iop, ir_node *t, int64_t dim,
                      int64_t k, bool topk, bool descending, kiln_tensor **values, kiln_tensor **indices) {
  ir_node *e = sort_check(f, l, name, t, dim, k, topk);
  if (e) {
    if (values) *values = e;
    if (indices) *indices = values ? fe_same(e) : e;
    if (!values && !indices) fe_drop(e);
    return;
  }
  const char *prev = ir_api_push(name);
  int64_t size = t->ndim ? t->shape[dim < 0 ? dim + t->ndim : dim] : 1;
  if (values) *values = sort_node(f, l, vop, t, dim, topk ? k : size, descending);
  if (indices) *indices = sort_node(f, l, iop, t, dim, topk ? k : size, descending);
  ir_api_pop(prev);
}

void kiln_sort_at(const char *f, int l, kiln_tensor *t, int64_t dim, int descending, int stable, kiln_tensor **values,
                  kiln_tensor **indices) {
  (void)stable;   /* every sort is stable */
  sort_pair(f, l, "sort", IR_SORT, IR_ARGSORT, t, dim, 0, false, descending, values, indices);
}

kiln_tensor *kiln_argsort_at(const char *f, int l, kiln_tensor *t, int64_t dim, int descending, int stable) {
  kiln_tensor *r = NULL;
  (void)stable;
  sort_pair(f, l, "argsort", IR_SORT, IR_ARGSORT, t, dim, 0, false, descending, NULL, &r);
  return r;
}

void kiln_topk_at(const char *f, int l, kiln_tensor *t, int64_t k, int64_t dim, int largest, int sorted,
                  kiln_tensor **values, kiln_tensor **indices) {
  (void)sorted;   /* the k are always in order */
  sort_pair(f, l, "topk", IR_TOPK, IR_ARGTOPK, t, dim, k, true, largest, values, indices);
}
