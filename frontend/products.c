/* products.c: outer, cross and einsum, built from views, elementwise ops,
 * sums and matmul. einsum turns a parsed equation (einsum_parse.c) into
 * diagonals, sums, permutes and reshapes around one matmul per pair of
 * operands, so "bij,bjk->bik" is matmul's own GEMM and "ii" a strided sum. */
#include "frontend/frontend.h"

#include <stdio.h>
#include <string.h>

/* a and b expanded to their broadcast shape (the add's, which also gives the
 * shape error); false with *err set when they do not broadcast. */
static bool broadcast_pair(const char *f, int l, ir_node *a, ir_node *b, ir_node **ea, ir_node **eb, ir_node **err) {
  ir_node *s = kiln_add_at(f, l, a, b);
  if (s->status != KILN_OK) {
    *err = s;
    return false;
  }
  *ea = kiln_expand_at(f, l, a, s->ndim, s->shape);
  *eb = kiln_expand_at(f, l, b, s->ndim, s->shape);
  fe_drop(s);
  return true;
}

/* ---- outer, cross ----------------------------------------------------------- */
static ir_node *outer(const char *f, int l, ir_node *a, ir_node *b) {
  ir_node *e = fe_check_args(f, l, "outer", 2, (ir_node *[]){a, b});
  if (e) return e;
  if (a->ndim != 1 || b->ndim != 1)
    return fe_error(KILN_ERR_SHAPE, f, l, "outer: expected 1-D tensors, got %dD and %dD", a->ndim, b->ndim);
  ir_node *tmp[2];
  tmp[0] = kiln_reshape_at(f, l, a, 2, (int64_t[]){a->shape[0], 1});
  tmp[1] = kiln_reshape_at(f, l, b, 2, (int64_t[]){1, b->shape[0]});
  return fe_done(kiln_mul_at(f, l, tmp[0], tmp[1]), 2, tmp);
}

kiln_tensor *kiln_outer_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b) { FE_AS("outer", outer(f, l, a, b)); }

/* The size of broadcast dim d in t (1 where t has no such dim). */
static int64_t aligned_size(const ir_node *t, int ndim, int d) {
  int j = d - (ndim - t->ndim);
  return j >= 0 ? t->shape[j] : 1;
}

/* a x b = roll(a, -1) roll(b, -2) - roll(a, -2) roll(b, -1) along dim. */
static ir_node *cross(const char *f, int l, ir_node *a, ir_node *b, int dim) {
  ir_node *e = fe_check_args(f, l, "cross", 2, (ir_node *[]){a, b}), *tmp[8];
  if (e) return e;
  if (!broadcast_pair(f, l, a, b, &tmp[0], &tmp[1], &e)) return e;
  int d = 0, nd = tmp[0]->ndim;
  if ((e = fe_wrap_dim(f, l, "cross", tmp[0], nd, dim, &d)) || nd == 0 || aligned_size(a, nd, d) != 3 ||
      aligned_size(b, nd, d) != 3) {
    if (!e)
      e = fe_error(KILN_ERR_SHAPE, f, l, "cross: inputs dimension %d must have length 3. Got %lld and %lld", dim,
                   (long long)(nd ? aligned_size(a, nd, d) : 0), (long long)(nd ? aligned_size(b, nd, d) : 0));
    return fe_done(e, 2, tmp);
  }
  int64_t dd = d;
  tmp[2] = kiln_roll_at(f, l, tmp[0], 1, (int64_t[]){-1}, 1, &dd);
  tmp[3] = kiln_roll_at(f, l, tmp[1], 1, (int64_t[]){-2}, 1, &dd);
  tmp[4] = kiln_roll_at(f, l, tmp[0], 1, (int64_t[]){-2}, 1, &dd);
  tmp[5] = kiln_roll_at(f, l, tmp[1], 1, (int64_t[]){-1}, 1, &dd);
  tmp[6] = kiln_mul_at(f, l, tmp[2], tmp[3]);
  tmp[7] = kiln_mul_at(f, l, tmp[4], tmp[5]);
  return fe_done(kiln_sub_at(f, l, tmp[6], tmp[7]), 8, tmp);
}

kiln_tensor *kiln_cross_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b, int dim) {
  FE_AS("cross", cross(f, l, a, b, dim));
}

/* ---- einsum ----------------------------------------------------------------- */
/* A tensor whose dims carry subscript ids (distinct once diagonals are taken). */
typedef struct {
  ir_node *t;
  int n;
  signed char id[KILN_MAX_DIMS];
} labeled;

typedef struct {
  const char *f, *eq;
  int l;
  int64_t size[FE_EINSUM_IDS];   /* each id's broadcast size */
} ein;

static int find(const labeled *x, int id) {
  for (int d = 0; d < x->n; d++)
    if (x->id[d] == id) return d;
  return -1;
}

static void subscript_name(int id, char buf[24]) {
  if (id < FE_EINSUM_ELL) snprintf(buf, 24, "'%c'", id < 26 ? 'A' + id : 'a' + id - 26);
  else snprintf(buf, 24, "'...' dim %d", id - FE_EINSUM_ELL);
}

static ir_node *size_error(const ein *c, int id, int i, int64_t a, int64_t b) {
  char name[24];
  subscript_name(id, name);
  return fe_error(KILN_ERR_SHAPE, c->f, c->l, "einsum: subscript %s has size %lld in operand %d but %lld before (in \"%s\")",
                  name, (long long)b, i, (long long)a, c->eq);
}

/* x with every repeated subscript reduced to its diagonal (the last dim). */
static ir_node *take_diagonals(ein *c, labeled *x, int i) {
  for (;;) {
    int j = -1, k = -1;
    for (int a = 0; a < x->n && j < 0; a++)
      for (int b = a + 1; b < x->n && j < 0; b++)
        if (x->id[a] == x->id[b]) j = a, k = b;
    if (j < 0) return NULL;
    if (x->t->shape[j] != x->t->shape[k]) return size_error(c, x->id[j], i, x->t->shape[j], x->t->shape[k]);
    ir_node *d = kiln_diagonal_at(c->f, c->l, x->t, 0, j, k);
    fe_drop(x->t);
    x->t = d;
    signed char id = x->id[j];
    int m = 0;
    for (int a = 0; a < x->n; a++)
      if (a != j && a != k) x->id[m++] = x->id[a];
    x->id[m++] = id;
    x->n = m;
  }
}

/* Records each dim's size; sizes of one id agree or are 1 (broadcast). */
static ir_node *record_sizes(ein *c, const labeled *x, int i) {
  for (int d = 0; d < x->n; d++) {
    int64_t s = x->t->shape[d], *have = &c->size[x->id[d]];
    if (*have < 0 || *have == 1) *have = s;
    else if (s != 1 && s != *have) return size_error(c, x->id[d], i, *have, s);
  }
  return NULL;
}

/* Sums x's dims whose id is not in keep. */
static void sum_out(ein *c, labeled *x, const bool *keep) {
  int64_t dims[KILN_MAX_DIMS];
  int nd = 0, m = 0;
  for (int d = 0; d < x->n; d++) {
    if (keep[x->id[d]]) x->id[m++] = x->id[d];
    else dims[nd++] = d;
  }
  if (!nd) return;
  ir_node *s = kiln_sum_dims_at(c->f, c->l, x->t, nd, dims, 0);
  fe_drop(x->t);
  x->t = s;
  x->n = m;
}

/* x's dims in the order of ids[0..n) (ids x lacks are size 1), each
 * expanded to its broadcast size when expand. */
static ir_node *arrange(ein *c, const labeled *x, int n, const signed char *ids, bool expand) {
  int64_t perm[KILN_MAX_DIMS], shape[KILN_MAX_DIMS], wide[KILN_MAX_DIMS];
  int np = 0;
  for (int i = 0; i < n; i++) {
    int d = find(x, ids[i]);
    if (d >= 0) perm[np++] = d;
    shape[i] = d >= 0 ? x->t->shape[d] : 1;
    wide[i] = c->size[ids[i]];
  }
  ir_node *tmp[2];
  tmp[0] = kiln_permute_at(c->f, c->l, x->t, np, perm);
  tmp[1] = kiln_reshape_at(c->f, c->l, tmp[0], n, shape);
  if (!expand) return fe_done(tmp[1], 1, tmp);
  return fe_done(kiln_expand_at(c->f, c->l, tmp[1], n, wide), 2, tmp);
}

static int64_t size_of(const ein *c, int n, const signed char *ids) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= c->size[ids[i]];
  return p;
}

/* (batch, M, K) @ (batch, K, N) as one matmul of the flattened groups. */
static ir_node *by_matmul(ein *c, const labeled *x, const labeled *y, const signed char *g, const int *ng) {
  const signed char *batch = g, *m = g + ng[0], *k = m + ng[1], *n = k + ng[2];
  signed char xo[2 * KILN_MAX_DIMS], yo[2 * KILN_MAX_DIMS];
  memcpy(xo, batch, (size_t)(ng[0] + ng[1] + ng[2]));
  memcpy(yo, batch, (size_t)ng[0]);
  memcpy(yo + ng[0], k, (size_t)ng[2]);
  memcpy(yo + ng[0] + ng[2], n, (size_t)ng[3]);
  int64_t B = size_of(c, ng[0], batch), M = size_of(c, ng[1], m), K = size_of(c, ng[2], k), N = size_of(c, ng[3], n);
  int r = ng[0] ? 3 : 2;
  ir_node *tmp[5];
  tmp[0] = arrange(c, x, ng[0] + ng[1] + ng[2], xo, true);
  tmp[1] = arrange(c, y, ng[0] + ng[2] + ng[3], yo, true);
  tmp[2] = kiln_reshape_at(c->f, c->l, tmp[0], r, ng[0] ? (int64_t[]){B, M, K} : (int64_t[]){M, K});
  tmp[3] = kiln_reshape_at(c->f, c->l, tmp[1], r, ng[0] ? (int64_t[]){B, K, N} : (int64_t[]){K, N});
  tmp[4] = kiln_matmul_at(c->f, c->l, tmp[2], tmp[3]);
  int64_t shape[KILN_MAX_DIMS];
  int nr = 0;
  for (int i = 0; i < ng[0] + ng[1]; i++) shape[nr++] = c->size[g[i]];
  for (int i = 0; i < ng[3]; i++) shape[nr++] = c->size[n[i]];
  return fe_done(kiln_reshape_at(c->f, c->l, tmp[4], nr, shape), 5, tmp);
}

/* The same by broadcast multiply and a sum over K, for integers, mixed
 * dtypes and products without a contracted subscript. */
static ir_node *by_product(ein *c, const labeled *x, const labeled *y, const signed char *g, const int *ng) {
  int n = ng[0] + ng[1] + ng[2] + ng[3];
  signed char order[2 * KILN_MAX_DIMS];   /* batch, M, N, K */
  memcpy(order, g, (size_t)(ng[0] + ng[1]));
  memcpy(order + ng[0] + ng[1], g + ng[0] + ng[1] + ng[2], (size_t)ng[3]);
  memcpy(order + ng[0] + ng[1] + ng[3], g + ng[0] + ng[1], (size_t)ng[2]);
  ir_node *tmp[3];
  tmp[0] = arrange(c, x, n, order, false);
  tmp[1] = arrange(c, y, n, order, false);
  tmp[2] = kiln_mul_at(c->f, c->l, tmp[0], tmp[1]);
  if (!ng[2]) return fe_done(tmp[2], 2, tmp);
  int64_t dims[KILN_MAX_DIMS];
  for (int i = 0; i < ng[2]; i++) dims[i] = n - ng[2] + i;
  ir_node *s = kiln_sum_dims_at(c->f, c->l, tmp[2], ng[2], dims, 0);
  return fe_done(fe_done(kiln_cast_at(c->f, c->l, s, tmp[2]->dtype), 1, &s), 3, tmp);
}

/* x becomes x * y summed over the shared subscripts not in keep; the result
 * is labeled batch, M (x's own), N (y's own). */
static ir_node *contract(ein *c, labeled *x, labeled *y, const bool *keep) {
  bool in_x[FE_EINSUM_IDS] = {0}, in_y[FE_EINSUM_IDS] = {0}, keep_x[FE_EINSUM_IDS], keep_y[FE_EINSUM_IDS];
  for (int d = 0; d < x->n; d++) in_x[x->id[d]] = true;
  for (int d = 0; d < y->n; d++) in_y[y->id[d]] = true;
  for (int id = 0; id < FE_EINSUM_IDS; id++) keep_x[id] = keep[id] || in_y[id], keep_y[id] = keep[id] || in_x[id];
  sum_out(c, x, keep_x);
  sum_out(c, y, keep_y);
  signed char g[2 * KILN_MAX_DIMS];   /* batch, M, K, N */
  int ng[4] = {0}, at = 0;
  for (int pass = 0; pass < 3; pass++)
    for (int d = 0; d < x->n; d++) {
      int id = x->id[d], kind = !in_y[id] ? 1 : keep[id] ? 0 : 2;
      if (kind == pass) g[at++] = (signed char)id, ng[pass]++;
    }
  for (int d = 0; d < y->n; d++)
    if (!in_x[y->id[d]]) g[at++] = y->id[d], ng[3]++;
  if (ng[0] + ng[1] + ng[2] + ng[3] > KILN_MAX_DIMS)
    return fe_error(KILN_ERR_SHAPE, c->f, c->l, "einsum: a pairwise product of \"%s\" needs %d dims; kiln holds at most %d",
                    c->eq, ng[0] + ng[1] + ng[2] + ng[3], KILN_MAX_DIMS);
  bool gemm = ng[2] && x->t->dtype == y->t->dtype && ir_is_float(x->t->dtype) && size_of(c, ng[2], g + ng[0] + ng[1]) > 0;
  ir_node *r = gemm ? by_matmul(c, x, y, g, ng) : by_product(c, x, y, g, ng);
  fe_drop(x->t);
  x->t = r;
  x->n = ng[0] + ng[1] + ng[3];
  memmove(x->id + ng[0] + ng[1], g + ng[0] + ng[1] + ng[2], (size_t)ng[3]);
  memcpy(x->id, g, (size_t)(ng[0] + ng[1]));
  return NULL;
}

/* The operands, labeled, with diagonals taken and sizes checked; *made
 * counts the entries of x that hold a reference. */
static ir_node *label_operands(ein *c, const fe_einsum *p, kiln_tensor *const *ops, labeled *x, int *made) {
  ir_node *e = NULL;
  for (int i = 0; i < p->nops && !e; i++, ++*made) {
    x[i].t = fe_same(ops[i]);
    x[i].n = p->ndim[i];
    memcpy(x[i].id, p->sub[i], sizeof x[i].id);
    if (!(e = take_diagonals(c, &x[i], i))) e = record_sizes(c, &x[i], i);
  }
  return e;
}

/* Left to right: each step keeps the subscripts of the output and of the
 * operands still to come. */
static ir_node *contract_all(ein *c, const fe_einsum *p, labeled *x) {
  bool keep[FE_EINSUM_IDS] = {0};
  for (int j = 0; j < p->nout; j++) keep[p->out[j]] = true;
  if (p->nops == 1) sum_out(c, &x[0], keep);
  for (int i = 1; i < p->nops; i++) {
    bool k[FE_EINSUM_IDS];
    memcpy(k, keep, sizeof k);
    for (int j = i + 1; j < p->nops; j++)
      for (int d = 0; d < x[j].n; d++) k[x[j].id[d]] = true;
    ir_node *e = contract(c, &x[0], &x[i], k);
    if (e) return e;
  }
  return arrange(c, &x[0], p->nout, p->out, false);   /* the output's order */
}

static ir_node *einsum(const char *f, int l, const char *equation, int n, kiln_tensor *const *operands) {
  if (n > 0 && !operands) return fe_error(KILN_ERR_ARG, f, l, "einsum: the operand list is NULL");
  ir_node *e = n > 0 && n <= FE_EINSUM_MAX_OPS ? fe_check_args(f, l, "einsum", n, operands) : NULL;
  if (e) return e;
  fe_einsum p;
  int ndim[FE_EINSUM_MAX_OPS];
  for (int i = 0; i < n && i < FE_EINSUM_MAX_OPS; i++) ndim[i] = operands[i]->ndim;
  char why[512];
  if (!fe_einsum_parse(equation, n, ndim, &p, why, sizeof why)) return fe_error(KILN_ERR_ARG, f, l, "%s", why);
  ein c = {f, equation, l, {0}};
  for (int id = 0; id < FE_EINSUM_IDS; id++) c.size[id] = -1;
  labeled x[FE_EINSUM_MAX_OPS];
  int made = 0;
  e = label_operands(&c, &p, operands, x, &made);
  ir_node *r = e ? e : contract_all(&c, &p, x);
  for (int i = 0; i < made; i++) fe_drop(x[i].t);
  return r;
}

kiln_tensor *kiln_einsum_at(const char *f, int l, const char *equation, int n, kiln_tensor *const *operands) {
  FE_AS("einsum", einsum(f, l, equation, n, operands));
}
