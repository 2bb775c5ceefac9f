/* gemm.c: a kernel of batch loops around one KS_GEMM (passes/lower.c) split
 * for the GPU (cuda.h): the product becomes one cuBLASLt matmul that reads
 * every operand in place (a unit stride and a leading dimension give the
 * transpose flag; batch loops whose strides nest give a strided batch, the
 * others one call each), and so does the head of the epilogue when cuBLASLt
 * can apply it: a bias along the output rows, then relu or the tanh gelu.
 * kiln's gelu is the exact erf form, which cuBLASLt does not have: it stays
 * in the rest, an elementwise kernel over the same loops that reads the
 * product from a temp where the KS_GEMM body read its accumulator.
 * f64 products keep their whole epilogue in the rest (kiln uses cuBLASLt's
 * epilogues for f32, f16 and bf16 only, the types PyTorch fuses them for).
 * Kernel IR in, kernel IR out: it needs no CUDA toolkit. */
#include "codegen_cuda/cuda.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_VARS = KILN_MAX_DIMS + 2 };   /* batch loops, then i and j */

static bool fail(char **err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(char **err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err) *err = ir_vstrprintf(fmt, ap);
  va_end(ap);
  return false;
}

/* ---- the loop nest ------------------------------------------------------ */
typedef struct {
  const kernel *k;
  const kstmt *gemm;
  int nb;                         /* batch loops */
  const kstmt *loop[KILN_MAX_DIMS];  /* outermost first */
  int nv;                         /* nb + 2 */
  int var[MAX_VARS];              /* loop variables: the batches', then i and j */
  int64_t extent[MAX_VARS];
  int64_t dstride[MAX_VARS];      /* the contiguous output's strides over them */
  /* scratch cuda_gemm_split makes first, so the split allocates nothing else */
  int64_t *val;                   /* by loop var: where affine evaluates (zero between uses) */
  bool *seen, *reached;           /* by expr id: choose_head's and dominates' walks */
  struct head *cand;              /* choose_head's candidates, one per expr at most */
} nest;

static bool find_nest(const kernel *k, nest *t) {
  *t = (nest){.k = k};
  const kstmt *s = k->body;
  for (; s && s->kind == KS_LOOP && !s->next && t->nb < KILN_MAX_DIMS; s = s->body) t->loop[t->nb++] = s;
  if (!s || s->kind != KS_GEMM || s->next) return false;
  t->gemm = s;
  t->nv = t->nb + 2;
  for (int d = 0; d < t->nb; d++) {
    t->var[d] = t->loop[d]->var;
    t->extent[d] = t->loop[d]->extent;
  }
  t->var[t->nb] = s->var;
  t->extent[t->nb] = s->extent;
  t->var[t->nb + 1] = s->gemm.var_j;
  t->extent[t->nb + 1] = s->gemm.n;
  int64_t st = 1;
  for (int d = t->nv - 1; d >= 0; d--) {
    t->dstride[d] = st;
    st *= t->extent[d];
  }
  return true;
}

/* e with loop variable v at val[v]; false unless e is lower's index
 * arithmetic (i64 sums, products by a constant), which is affine. */
static bool eval(const kexpr *e, const int64_t *val, int64_t *out) {
  int64_t a, b;
  switch (e->kind) {
  case KX_CONST: *out = e->i; return e->type == KILN_I64;
  case KX_VAR: *out = val[e->var]; return true;
  case KX_OP:
    if (e->type != KILN_I64 || (e->op != IR_ADD && e->op != IR_MUL)) return false;
    if (e->op == IR_MUL && e->a->kind != KX_CONST && e->b->kind != KX_CONST) return false;
    if (!eval(e->a, val, &a) || !eval(e->b, val, &b)) return false;
    *out = e->op == IR_ADD ? a + b : a * b;
    return true;
  default: return false;
  }
}

/* e = c[nv] + sum of c[d] * var[d]. */
static bool affine(const nest *t, const kexpr *e, int64_t *c) {
  int64_t *val = t->val;
  bool ok = eval(e, val, &c[t->nv]);
  for (int d = 0; ok && d < t->nv; d++) {
    val[t->var[d]] = 1;
    ok = eval(e, val, &c[d]);
    c[d] -= c[t->nv];
    val[t->var[d]] = 0;
  }
  return ok;
}

/* ---- operands ----------------------------------------------------------- */
/* op(X) is r x c with element (x, y) at x*sr + y*sc: the column-major
 * matrix cuBLASLt reads it as, stored as is or (trans) transposed. */
static bool layout(int64_t r, int64_t c, int64_t sr, int64_t sc, bool trans, cuda_gemm_matrix *x) {
  int64_t rows = trans ? c : r, cols = trans ? r : c;
  int64_t ld = k_blas_ld(rows, cols, trans ? sc : sr, trans ? sr : sc);
  if (!ld) return false;
  x->trans = trans;
  x->rows = rows;
  x->cols = cols;
  x->ld = ld;
  return true;
}

/* The matrix for op(X) = r x c (strides sr, sc) read from parameter buf at
 * offset off (an expression of the batch loops: their strides go to bs). */
static bool operand(const nest *t, int buf, const kexpr *off, int64_t r, int64_t c, int64_t sr, int64_t sc,
                    int64_t *bs, cuda_gemm_matrix *x, char **err) {
  int64_t co[MAX_VARS + 1];
  *x = (cuda_gemm_matrix){.param = buf, .dtype = t->k->params[buf].dtype};
  if (!affine(t, off, co)) return fail(err, "%s: a matrix operand's offset is not affine", t->k->name);
  x->off = co[t->nv];
  memcpy(bs, co, sizeof(int64_t) * (size_t)t->nb);
  if (layout(r, c, sr, sc, false, x) || layout(r, c, sr, sc, true, x)) return true;
  /* in kiln's row-major terms the operand is c x r with strides (sc, sr) */
  return fail(err, "a (%lld, %lld) matrix operand with strides (%lld, %lld) is not a transpose that cuBLASLt reads "
              "in place (one stride must be 1 and the other at least the size of that dim)",
              (long long)c, (long long)r, (long long)sc, (long long)sr);
}

/* Batch dims of extent > 1, innermost first, fold into one stride per
 * matrix while each dim's strides are the inner stride times the inner
 * count (a broadcast operand's are all 0) and not negative (a flipped
 * batch); the dims outside the first one that does not fold are calls of
 * their own. bs: per matrix, per loop. */
static void batches(const nest *t, int64_t (*bs)[KILN_MAX_DIMS], cuda_gemm *g) {
  cuda_gemm_matrix *m[3] = {&g->a, &g->b, &g->d};
  int d = t->nb - 1;
  g->batch = 1;
  for (; d >= 0; d--) {
    if (t->extent[d] == 1) continue;
    bool folds = true;
    for (int x = 0; x < 3; x++)
      folds = folds && bs[x][d] >= 0 && (g->batch == 1 || bs[x][d] == m[x]->batch_stride * g->batch);
    if (!folds) break;
    for (int x = 0; x < 3 && g->batch == 1; x++) m[x]->batch_stride = bs[x][d];
    g->batch *= t->extent[d];
  }
  for (int o = 0; o <= d; o++) {
    if (t->extent[o] == 1) continue;
    for (int x = 0; x < 3; x++) g->outer_stride[x][g->nouter] = bs[x][o];
    g->outer[g->nouter++] = t->extent[o];
  }
}

static bool fits_int(int64_t v) { return v <= INT32_MAX; }

/* cuBLASLt's A is kiln's B (n x k), its B is kiln's A (k x m). */
static bool fold(const nest *t, cuda_gemm *g, char **err) {
  const kstmt *s = t->gemm;
  int64_t bs[3][KILN_MAX_DIMS];
  if (!operand(t, s->gemm.b_buf, s->gemm.b_off, g->m, g->k, s->gemm.b_sn, s->gemm.b_sk, bs[0], &g->a, err) ||
      !operand(t, s->gemm.a_buf, s->gemm.a_off, g->k, g->n, s->gemm.a_sk, s->gemm.a_si, bs[1], &g->b, err))
    return false;
  g->d.rows = g->d.ld = g->m;
  g->d.cols = g->n;
  memcpy(bs[2], t->dstride, sizeof(int64_t) * (size_t)t->nb);
  batches(t, bs, g);
  const cuda_gemm_matrix *m[3] = {&g->a, &g->b, &g->d};
  bool ok = fits_int(g->batch);
  for (int x = 0; x < 3; x++) ok = ok && fits_int(m[x]->rows) && fits_int(m[x]->cols) && fits_int(m[x]->ld);
  return ok || fail(err, "%s: a %lld x %lld x %lld product (batch %lld) is too large for one cuBLASLt call", t->k->name,
                    (long long)g->n, (long long)g->k, (long long)g->m, (long long)g->batch);
}

/* ---- the epilogue's head ------------------------------------------------ */
/* What cuBLASLt computes of the KS_GEMM body: acc, acc + bias[j],
 * act(acc) or act(acc + bias[j]), bias[j] a load of an input at index j
 * (kiln's column; cuBLASLt's row). */
typedef struct head {
  const kexpr *e;
  int bias;             /* parameter, -1: none */
  cuda_act act;
} head;

static bool is_acc(const kstmt *s, const kexpr *e) { return e->kind == KX_ACC && e->var == s->acc; }

static int bias_of(const kernel *k, const kstmt *s, const kexpr *e) {
  if (e->kind != KX_OP || e->op != IR_ADD || e->type != s->type) return -1;
  const kexpr *l = is_acc(s, e->a) ? e->b : is_acc(s, e->b) ? e->a : NULL;
  if (!l || l->kind != KX_LOAD || l->type != s->type || k->params[l->buf].output) return -1;
  return l->a->kind == KX_VAR && l->a->var == s->gemm.var_j ? l->buf : -1;
}

static bool head_of(const kernel *k, const kstmt *s, const kexpr *e, head *h) {
  *h = (head){e, -1, CUDA_ACT_NONE};
  if (e->kind == KX_OP && e->type == s->type && (e->op == IR_RELU || e->op == IR_GELU_TANH)) {
    h->act = e->op == IR_RELU ? CUDA_ACT_RELU : CUDA_ACT_GELU_TANH;
    e = e->a;
  }
  if (is_acc(s, e)) return true;
  h->bias = bias_of(k, s, e);
  return h->bias >= 0;
}

static int rank(const head *h) { return 2 * (h->act != CUDA_ACT_NONE) + (h->bias >= 0); }

/* Every head among the body's expressions, each once. */
static void collect(const kernel *k, const kstmt *s, const kexpr *e, bool *seen, head *out, int *n) {
  if (seen[e->id]) return;
  seen[e->id] = true;
  if (head_of(k, s, e, &out[*n])) ++*n;
  const kexpr *ops[3] = {e->a, e->b, e->c};
  for (int i = 0; i < 3; i++)
    if (ops[i]) collect(k, s, ops[i], seen, out, n);
}

/* Whether e reads the accumulator other than through h. */
static bool bypasses(const kstmt *s, const kexpr *e, const kexpr *h, bool *seen) {
  if (seen[e->id] || e == h) return false;
  seen[e->id] = true;
  if (is_acc(s, e)) return true;
  return (e->a && bypasses(s, e->a, h, seen)) || (e->b && bypasses(s, e->b, h, seen)) ||
         (e->c && bypasses(s, e->c, h, seen));
}

static bool dominates(const nest *t, const kexpr *h) {
  bool *seen = t->reached, by = false;
  memset(seen, 0, sizeof *seen * ((size_t)t->k->nexprs + 1));
  for (const kstmt *st = t->gemm->body; st && !by; st = st->next)
    by = bypasses(t->gemm, st->index, h, seen) || bypasses(t->gemm, st->value, h, seen);
  return !by;
}

/* D can be the kernel's one output: the body is one store of the head at
 * the contiguous index, into a dtype cuBLASLt writes (the operands' or the
 * accumulator's). */
static bool writes_output(const nest *t, const head *h, kiln_dtype operands) {
  const kstmt *st = t->gemm->body;
  if (!st || st->next || st->value != h->e) return false;
  kiln_dtype od = t->k->params[st->buf].dtype;
  int64_t c[MAX_VARS + 1];
  if ((od != operands && od != t->gemm->type) || !affine(t, st->index, c) || c[t->nv] != 0) return false;
  for (int d = 0; d < t->nv; d++)
    if (t->extent[d] > 1 && c[d] != t->dstride[d]) return false;
  return true;
}

/* The largest head cuBLASLt can take: every use of the accumulator goes
 * through it, and its bias has D's dtype. Sets D. */
static head choose_head(const nest *t, cuda_gemm *g) {
  const kernel *k = t->k;
  const kstmt *s = t->gemm;
  bool *seen = t->seen;
  head *cand = t->cand, best = {NULL, -1, CUDA_ACT_NONE};
  int n = 0;
  for (const kstmt *st = s->body; st; st = st->next) {
    collect(k, s, st->index, seen, cand, &n);
    collect(k, s, st->value, seen, cand, &n);
  }
  int top = g->call && s->type != KILN_F64 ? 3 : 0;
  for (int r = top; r >= 0 && !best.e; r--)
    for (int i = 0; i < n && !best.e; i++) {
      if (rank(&cand[i]) != r || !dominates(t, cand[i].e)) continue;
      bool direct = g->call && writes_output(t, &cand[i], g->a.dtype);
      g->d.param = direct ? s->body->buf : -1;
      g->d.dtype = direct ? k->params[s->body->buf].dtype : s->type;
      if (cand[i].bias < 0 || k->params[cand[i].bias].dtype == g->d.dtype) best = cand[i];
    }
  return best;  /* e NULL: the body never reads the product */
}

/* ---- the rest: the epilogue after the head, as an elementwise kernel ---- */
typedef struct {
  const kernel *k;
  kernel *r;
  int *param;           /* k's parameter -> r's, -1 until used */
  int *src;             /* r's parameter -> k's (cuda_gemm.rest_src) */
  int *var;             /* k's loop variable -> r's */
  kexpr **memo;         /* k's expression id -> its copy in r */
} cloner;

static int clone_param(cloner *c, int p) {
  if (c->param[p] >= 0) return c->param[p];
  const kparam *kp = &c->k->params[p];
  int q = k_param(c->r, kp->dtype, kp->output, kp->numel);
  c->src[q] = p;
  return c->param[p] = q;
}

/* Launch arguments keep their numbers: the first one read brings k's whole
 * args block (its param is bound to r->args, not to one of k's). */
static kexpr *clone_arg(cloner *c, const kexpr *e) {
  if (!c->r->nargs) {
    for (int i = 0; i < c->k->nargs; i++) k_arg_push(c->r, c->k->args[i]);
    int p = k_args_param(c->r);
    if (p >= 0) c->src[p] = k_args_param(c->k);   /* none: out of memory, r is dropped */
  }
  return kx_arg(c->r, e->type, (int)e->i);
}

static kexpr *clone(cloner *c, const kexpr *e) {
  if (c->memo[e->id]) return c->memo[e->id];
  kernel *r = c->r;
  kexpr *a = e->a ? clone(c, e->a) : NULL, *b = e->b ? clone(c, e->b) : NULL, *x;
  switch (e->kind) {
  case KX_CONST: x = ir_is_float(e->type) ? kx_float(r, e->type, e->f) : kx_int(r, e->type, e->i); break;
  case KX_VAR: x = kx_var(r, c->var[e->var]); break;
  case KX_LOAD: x = kx_load(r, clone_param(c, e->buf), a, e->type); break;
  case KX_OP: x = kx_op(r, e->op, e->type, a, b, e->c ? clone(c, e->c) : NULL); break;
  case KX_CAST: x = kx_cast(r, a, e->type); break;
  case KX_IDIV: x = kx_idiv(r, a, b); break;
  case KX_IMOD: x = kx_imod(r, a, b); break;
  case KX_PHILOX: x = kx_philox(r, b, a, (int)e->i); break;
  case KX_ARG: x = clone_arg(c, e); break;
  default: IR_ASSERT(!"the accumulator is read only through the head");
  }
  return c->memo[e->id] = x;
}

/* for batches, i (parallel when there is no batch), j (vector): the body's
 * stores with the head replaced by the temp at the contiguous index (or 0
 * when nothing was multiplied). */
static void clone_rest(cloner *cl, const nest *t, const head *h, cuda_gemm *g) {
  const kernel *k = t->k;
  kernel *r = cl->r;
  cloner c = *cl;
  memset(c.param, -1, sizeof(int) * (size_t)k->nparams);
  for (int p = 0; p < k->nparams; p++)
    if (k->params[p].output) clone_param(&c, p);  /* outputs first (kernel.h) */
  kstmt **link = &r->body;
  kexpr *at = kx_int(r, KILN_I64, 0);
  for (int d = 0; d < t->nv; d++) {
    int v = k_var(r);
    kl_kind kind = d < t->nb ? t->loop[d]->loop : d == t->nv - 1 ? KL_VECTOR : t->nb == 0 ? KL_PARALLEL : KL_SERIAL;
    kstmt *l = ks_loop(r, v, t->extent[d], kind);
    *link = l;
    link = &l->body;
    c.var[t->var[d]] = v;
    at = kx_iadd(r, at, kx_imul(r, kx_var(r, v), kx_int(r, KILN_I64, t->dstride[d])));
  }
  if (h->e && g->call) {
    int q = k_param(r, g->compute, false, g->temp);
    c.src[q] = -1;
    c.memo[h->e->id] = kx_load(r, q, at, g->compute);
  } else if (h->e) {
    c.memo[h->e->id] = kx_float(r, g->compute, 0);
  }
  for (const kstmt *st = t->gemm->body; st; st = st->next, link = &(*link)->next)
    *link = ks_store(r, clone_param(&c, st->buf), clone(&c, st->index), clone(&c, st->value));
  r->work = k->work;
}

/* NULL when out of memory. */
static kernel *build_rest(const nest *t, const head *h, cuda_gemm *g) {
  const kernel *k = t->k;
  kernel *r = k_new();
  cloner c = {k, r, ir_malloc(sizeof(int) * ((size_t)k->nparams + 1)), ir_malloc(sizeof(int) * ((size_t)k->nparams + 2)),
              ir_calloc((size_t)k->nvars + 1, sizeof(int)), ir_calloc((size_t)k->nexprs + 1, sizeof(kexpr *))};
  if (r && c.param && c.src && c.var && c.memo) clone_rest(&c, t, h, g);
  free(c.param);
  free(c.var);
  free(c.memo);
  if (r && c.param && c.src && c.var && c.memo && !r->oom) {
    g->rest_src = c.src;
    return r;
  }
  free(c.src);
  k_free(r);
  return NULL;
}

/* ---- the split ---------------------------------------------------------- */
static bool split(const nest *t, cuda_gemm *g, char **err) {
  const kernel *k = t->k;
  const kstmt *s = t->gemm;
  for (const kstmt *st = s->body; st; st = st->next)
    if (st->kind != KS_STORE) return fail(err, "%s: a matrix product's epilogue holds more than stores", k->name);
  g->compute = s->type;
  g->m = s->gemm.n;
  g->n = s->extent;
  g->k = s->gemm.kdim;
  g->call = g->k > 0 && k->work > 0;
  if (g->call && !fold(t, g, err)) return false;
  head h = choose_head(t, g);
  g->bias = h.bias;
  g->act = h.act;
  g->call = g->call && h.e;
  if (g->d.param >= 0 && g->call) return true;  /* D is the output: nothing else to run */
  g->temp = g->call ? k->work : 0;
  g->rest = build_rest(t, &h, g);
  return g->rest || !(g->oom = true);
}

bool cuda_gemm_split(const kernel *k, cuda_gemm *g, char **err) {
  nest t;
  *g = (cuda_gemm){.bias = -1, .d = {.param = -1}};
  if (!find_nest(k, &t)) return fail(err, "%s: not batch loops around one matrix product", k->name);
  size_t nx = (size_t)k->nexprs + 1;
  t.val = ir_calloc((size_t)k->nvars + 1, sizeof *t.val);
  t.seen = ir_calloc(nx, sizeof *t.seen);
  t.reached = ir_malloc(sizeof *t.reached * nx);
  t.cand = ir_malloc(sizeof *t.cand * nx);
  bool ok = t.val && t.seen && t.reached && t.cand ? split(&t, g, err) : !(g->oom = true);
  free(t.val);
  free(t.seen);
  free(t.reached);
  free(t.cand);
  return ok;
}

void cuda_gemm_free(cuda_gemm *g) {
  k_free(g->rest);
  free(g->rest_src);
  *g = (cuda_gemm){.bias = -1};
}

int64_t cuda_gemm_calls(const cuda_gemm *g) {
  int64_t n = 1;
  for (int d = 0; d < g->nouter; d++) n *= g->outer[d];
  return n;
}

void cuda_gemm_offsets(const cuda_gemm *g, int64_t c, int64_t off[3]) {
  off[0] = off[1] = off[2] = 0;
  for (int d = g->nouter - 1; d >= 0; d--) {
    int64_t i = c % g->outer[d];
    c /= g->outer[d];
    for (int x = 0; x < 3; x++) off[x] += i * g->outer_stride[x][d];
  }
}
