/* kernel.c: builders for the kernel IR (hash-consed, folding constant index
 * arithmetic) and its printer, whose text is the kernel's identity. */
#include "kernel.h"

#include <stdlib.h>
#include <string.h>

struct kx_dims { kexpr **arg; int n; };  /* the size arguments; their values are in k->args */

/* Room for a first parameter and argument comes with the kernel, so that
 * k_param and k_arg_push out of memory can return entry 0. */
kernel *k_new(void) {
  kernel *k = ir_calloc(1, sizeof *k);
  if (!k) return NULL;
  k->arena = ir_arena_new();
  k->params = ir_malloc(sizeof *k->params);
  k->args = ir_malloc(sizeof *k->args);
  k->arg_src = ir_malloc(sizeof *k->arg_src);
  k->oom_expr = (kexpr){.kind = KX_CONST, .type = KILN_I64};
  if (k->arena && k->params && k->args && k->arg_src) return k;
  k_free(k);
  return NULL;
}

void k_free(kernel *k) {
  if (!k) return;
  free(k->cse.slot);
  if (k->dims) free(k->dims->arg);
  free(k->params);
  free(k->args);
  free(k->arg_src);
  free(k->sites);
  ir_arena_free(k->arena);
  free(k);
}

static kexpr *expr_oom(kernel *k) {
  k->oom = true;
  return &k->oom_expr;
}

int k_param(kernel *k, kiln_dtype dt, bool output, int64_t numel) {
  if (k->oom) return 0;
  if ((k->nparams & (k->nparams - 1)) == 0) {  /* grow at powers of two */
    kparam *p = ir_realloc(k->params, sizeof *p * (size_t)(k->nparams ? 2 * k->nparams : 4));
    if (!p) return (k->oom = true), 0;
    k->params = p;
  }
  k->params[k->nparams] = (kparam){.dtype = dt, .output = output, .numel = numel};
  return k->nparams++;
}

int k_var(kernel *k) { return k->nvars++; }
int k_acc(kernel *k) { return k->naccs++; }

/* ---- hash-consing ------------------------------------------------------- */
static uint64_t kx_hash(const kexpr *e) {
  uint64_t f[8] = {(uint64_t)e->kind << 48 | (uint64_t)e->type << 32 | (uint32_t)e->op,
                   (uint64_t)(uint32_t)e->var << 32 | (uint32_t)e->buf, (uint64_t)e->i, 0, 0,
                   (uint64_t)(uintptr_t)e->a, (uint64_t)(uintptr_t)e->b, (uint64_t)(uintptr_t)e->c};
  memcpy(&f[4], &e->f, sizeof e->f);
  return ir_hash_bytes(f, sizeof f, 0);
}

static bool kx_same(const kexpr *x, const kexpr *y) {
  return x->kind == y->kind && x->type == y->type && x->op == y->op && x->var == y->var &&
         x->buf == y->buf && x->i == y->i && memcmp(&x->f, &y->f, sizeof x->f) == 0 &&
         x->a == y->a && x->b == y->b && x->c == y->c;
}

static bool kx_grow(kx_table *t) {
  int cap = t->cap ? t->cap * 2 : 256;
  kexpr **slot = ir_calloc((size_t)cap, sizeof *slot);
  if (!slot) return false;
  for (int i = 0; i < t->cap; i++) {
    if (!t->slot[i]) continue;
    size_t j = kx_hash(t->slot[i]) & (size_t)(cap - 1);
    while (slot[j]) j = (j + 1) & (size_t)(cap - 1);
    slot[j] = t->slot[i];
  }
  free(t->slot);
  t->slot = slot;
  t->cap = cap;
  return true;
}

/* Returns the canonical copy of *proto, creating it on first sight. */
static kexpr *kx_intern(kernel *k, const kexpr *proto) {
  kx_table *t = &k->cse;
  if (k->oom || (2 * (t->used + 1) > t->cap && !kx_grow(t))) return expr_oom(k);
  size_t j = kx_hash(proto) & (size_t)(t->cap - 1);
  for (; t->slot[j]; j = (j + 1) & (size_t)(t->cap - 1))
    if (kx_same(t->slot[j], proto)) return t->slot[j];
  kexpr *e = ir_arena_alloc(k->arena, sizeof *e);
  if (!e) return expr_oom(k);
  *e = *proto;
  e->id = k->nexprs++;
  t->slot[j] = e;
  t->used++;
  return e;
}

kexpr *kx_int(kernel *k, kiln_dtype t, int64_t v) {
  return kx_intern(k, &(kexpr){.kind = KX_CONST, .type = t, .i = v});
}

kexpr *kx_float(kernel *k, kiln_dtype t, double v) {
  IR_ASSERT(ir_is_float(t));
  return kx_intern(k, &(kexpr){.kind = KX_CONST, .type = t, .f = v});
}

kexpr *kx_var(kernel *k, int var) {
  return kx_intern(k, &(kexpr){.kind = KX_VAR, .type = KILN_I64, .var = var});
}

kexpr *kx_load(kernel *k, int buf, kexpr *index, kiln_dtype t) {
  return kx_intern(k, &(kexpr){.kind = KX_LOAD, .type = t, .buf = buf, .a = index});
}

kexpr *kx_op(kernel *k, ir_op op, kiln_dtype t, kexpr *a, kexpr *b, kexpr *c) {
  /* commutative ops: one operand order, so a+b and b+a are one expression */
  if (ir_op_has(op, IR_COMM) && b && a->id > b->id) {
    kexpr *s = a;
    a = b;
    b = s;
  }
  return kx_intern(k, &(kexpr){.kind = KX_OP, .type = t, .op = op, .a = a, .b = b, .c = c});
}

kexpr *kx_cast(kernel *k, kexpr *a, kiln_dtype t) {
  if (a->type == t) return a;
  return kx_intern(k, &(kexpr){.kind = KX_CAST, .type = t, .a = a});
}

static bool is_ic(const kexpr *e, int64_t v) { return e->kind == KX_CONST && e->i == v; }

/* Index arithmetic folds: c1 op c2, x+0, x*1, x*0, x/1, x%1. */
kexpr *kx_iadd(kernel *k, kexpr *a, kexpr *b) {
  if (a->kind == KX_CONST && b->kind == KX_CONST) return kx_int(k, KILN_I64, a->i + b->i);
  if (is_ic(a, 0)) return b;
  if (is_ic(b, 0)) return a;
  return kx_op(k, IR_ADD, KILN_I64, a, b, NULL);
}

kexpr *kx_imul(kernel *k, kexpr *a, kexpr *b) {
  if (a->kind == KX_CONST && b->kind == KX_CONST) return kx_int(k, KILN_I64, a->i * b->i);
  if (is_ic(a, 1)) return b;
  if (is_ic(b, 1)) return a;
  if (is_ic(a, 0) || is_ic(b, 0)) return kx_int(k, KILN_I64, 0);
  return kx_op(k, IR_MUL, KILN_I64, a, b, NULL);
}

kexpr *kx_idiv(kernel *k, kexpr *a, kexpr *b) {
  if (a->kind == KX_CONST && b->kind == KX_CONST) return kx_int(k, KILN_I64, a->i / b->i);
  if (is_ic(b, 1)) return a;
  return kx_intern(k, &(kexpr){.kind = KX_IDIV, .type = KILN_I64, .a = a, .b = b});
}

kexpr *kx_imod(kernel *k, kexpr *a, kexpr *b) {
  if (a->kind == KX_CONST && b->kind == KX_CONST) return kx_int(k, KILN_I64, a->i % b->i);
  if (is_ic(b, 1)) return kx_int(k, KILN_I64, 0);
  return kx_intern(k, &(kexpr){.kind = KX_IMOD, .type = KILN_I64, .a = a, .b = b});
}

kexpr *kx_philox(kernel *k, kexpr *key, kexpr *counter, int word) {
  IR_ASSERT(word >= 0 && word < 4);
  return kx_intern(k, &(kexpr){.kind = KX_PHILOX, .type = KILN_I64, .i = word, .a = counter, .b = key});
}

/* Operand i (0..2) of e, in the order every walk takes them. */
static kexpr **operand(kexpr *e, int i) { return i == 0 ? &e->a : i == 1 ? &e->b : &e->c; }

/* A rewrite in progress: e's copy p collects its rewritten operands. */
typedef struct {
  kexpr *e, p;
  int next;             /* the operand to rewrite next; 3: all done */
} kx_frame;

typedef struct {
  kernel *k;
  kx_map_fn map;
  void *ctx;
  int n;                /* expressions that existed before: memo's size */
  kexpr **memo;         /* by id: the rewritten expression */
  kx_frame *stack;      /* the expressions being rewritten, innermost last */
  int depth, cap;
} kx_rewriter;

static void memo_put(kx_rewriter *w, const kexpr *e, kexpr *r) {
  if (e->id < w->n) w->memo[e->id] = r;
}

/* e's rewrite when it is known at once (none, memoized, or what map gives);
 * else false, with a frame pushed to rewrite its operands first. */
static bool rewrite_known(kx_rewriter *w, kexpr *e, kexpr **out) {
  *out = NULL;
  if (!e) return true;
  if (e->id < w->n && w->memo[e->id]) return (*out = w->memo[e->id]), true;
  if ((*out = w->map(w->ctx, e))) {
    memo_put(w, e, *out);
    return true;
  }
  if (w->depth == w->cap) {
    int cap = w->cap ? 2 * w->cap : 64;
    kx_frame *grown = ir_realloc(w->stack, sizeof *w->stack * (size_t)cap);
    if (!grown) return (*out = expr_oom(w->k)), true;   /* the frames below unwind */
    w->stack = grown;
    w->cap = cap;
  }
  w->stack[w->depth++] = (kx_frame){e, *e, 0};
  return false;
}

/* e with its rewritten operands p.a, p.b, p.c (e itself when none changed). */
static kexpr *rebuild(kx_rewriter *w, kexpr *e, kexpr p) {
  kexpr *r = p.a == e->a && p.b == e->b && p.c == e->c ? e
             : p.kind == KX_OP ? kx_op(w->k, p.op, p.type, p.a, p.b, p.c)
             : kx_intern(w->k, &p);
  memo_put(w, e, r);
  return r;
}

/* Operands first, each expression once (memo), with an explicit stack: a
 * kernel's expression may be as deep as the chain of ops fused into it. */
static kexpr *rewrite(kx_rewriter *w, kexpr *root) {
  kexpr *r;
  if (rewrite_known(w, root, &r)) return r;
  while (w->depth) {
    kx_frame *f = &w->stack[w->depth - 1];
    if (f->next == 3) {
      r = rebuild(w, f->e, f->p);
      if (--w->depth) *operand(&w->stack[w->depth - 1].p, w->stack[w->depth - 1].next - 1) = r;
      continue;
    }
    int i = f->next++;
    kexpr *child = *operand(f->e, i), *done;
    if (rewrite_known(w, child, &done)) *operand(&w->stack[w->depth - 1].p, i) = done;
  }
  return r;
}

kexpr *kx_rewrite(kernel *k, kexpr *e, kx_map_fn map, void *ctx) {
  kx_rewriter w = {k, map, ctx, k->nexprs, ir_calloc((size_t)k->nexprs + 1, sizeof(kexpr *)), NULL, 0, 0};
  kexpr *r = w.memo ? rewrite(&w, e) : expr_oom(k);
  free(w.memo);
  free(w.stack);
  return r;
}

int k_args_param(const kernel *k) {
  for (int p = 0; p < k->nparams; p++)
    if (k->params[p].args) return p;
  return -1;
}

int k_arg_push(kernel *k, int64_t bits) {
  if (k->oom) return 0;
  int p = k_args_param(k);
  if (p < 0) {
    p = k_param(k, KILN_I64, false, 0);
    k->params[p].args = true;
  }
  if ((k->nargs & (k->nargs - 1)) == 0) {  /* grow at powers of two */
    size_t cap = (size_t)(k->nargs ? 2 * k->nargs : 2);
    int64_t *a = ir_realloc(k->args, sizeof *a * cap);
    if (a) k->args = a;
    karg_src *src = a ? ir_realloc(k->arg_src, sizeof *src * cap) : NULL;
    if (!src) return (k->oom = true), 0;
    k->arg_src = src;
  }
  k->args[k->nargs] = bits;
  k->arg_src[k->nargs] = (karg_src){.node = NULL};
  k->params[p].numel = k->nargs + 1;
  return k->nargs++;
}

kexpr *kx_arg(kernel *k, kiln_dtype t, int i) {
  if (k->oom) return &k->oom_expr;
  IR_ASSERT(i >= 0 && i < k->nargs);
  return kx_intern(k, &(kexpr){.kind = KX_ARG, .type = t, .i = i});
}

const kc_info kc_infos[KC_NUM] = {
  [KC_NONE] = {"no failure", NULL},
#define KC_INFO(c, msg, value) [c] = {msg, value},
  KC_CODES(KC_INFO)
#undef KC_INFO
};

int k_status_param(const kernel *k) {
  for (int p = 0; p < k->nparams; p++)
    if (k->params[p].status) return p;
  return -1;
}

int k_site(kernel *k, const kc_site *site) {
  if (k->oom) return 0;
  if ((k->nsites & (k->nsites - 1)) == 0) {  /* grow at powers of two */
    kc_site *s = ir_realloc(k->sites, sizeof *s * (size_t)(k->nsites ? 2 * k->nsites : 1));
    if (!s) return (k->oom = true), 0;
    k->sites = s;
  }
  k->sites[k->nsites] = *site;
  return k->nsites++;
}

/* A linear search: a kernel has a handful of distinct sizes. */
kexpr *kx_dim(kernel *k, int64_t v) {
  if (k->oom || !k->generic || v == 0 || v == 1) return kx_int(k, KILN_I64, v);
  if (k->sizes_only) return k_arg_int(k, KILN_I64, v);
  if (!k->dims && !(k->dims = ir_arena_alloc(k->arena, sizeof *k->dims))) return expr_oom(k);
  struct kx_dims *d = k->dims;
  for (int i = 0; i < d->n; i++)
    if (k->args[d->arg[i]->i] == v) return d->arg[i];
  if ((d->n & (d->n - 1)) == 0) {  /* grow at powers of two */
    kexpr **a = ir_realloc(d->arg, sizeof *a * (size_t)(d->n ? 2 * d->n : 2));
    if (!a) return expr_oom(k);
    d->arg = a;
  }
  kexpr *arg = k_arg_int(k, KILN_I64, v);
  if (!k->oom) d->arg[d->n++] = arg;
  return arg;
}

kexpr *k_arg_int(kernel *k, kiln_dtype t, int64_t v) {
  IR_ASSERT(!ir_is_float(t));
  return kx_arg(k, t, k_arg_push(k, t == KILN_BOOL ? v != 0 : v));
}

int64_t k_float_bits(kiln_dtype t, double v) {
  IR_ASSERT(t == KILN_F32 || t == KILN_F64);
  int64_t bits = 0;
  if (t == KILN_F64) {
    memcpy(&bits, &v, sizeof v);
  } else {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    bits = u;
  }
  return bits;
}

void k_arg_from(kernel *k, int i, const kiln_tensor *node, int field, kiln_dtype type) {
  if (k->oom) return;
  IR_ASSERT(i >= 0 && i < k->nargs);
  k->arg_src[i] = (karg_src){node, field, type};
}

/* ---- statements --------------------------------------------------------- */
/* A statement holding init; out of memory the stand-in (kernel.h). */
static kstmt *new_stmt(kernel *k, kstmt init) {
  kstmt *s = k->oom ? NULL : ir_arena_alloc(k->arena, sizeof *s);
  if (!s) {
    k->oom = true;
    s = &k->oom_stmt;
  }
  *s = init;
  return s;
}

kstmt *ks_loop(kernel *k, int var, int64_t extent, kl_kind kind) {
  kstmt *s = new_stmt(k, (kstmt){.kind = KS_LOOP, .var = var, .extent = extent, .loop = kind});
  kexpr *b = kx_dim(k, extent);
  if (b->kind == KX_ARG) s->bound = b;
  return s;
}

kstmt *ks_store(kernel *k, int buf, kexpr *index, kexpr *value) {
  return new_stmt(k, (kstmt){.kind = KS_STORE, .buf = buf, .index = index, .value = value, .acc2 = -1});
}

kexpr *kx_acc(kernel *k, int acc, kiln_dtype t) {
  return kx_intern(k, &(kexpr){.kind = KX_ACC, .type = t, .var = acc});
}

kstmt *ks_acc(kernel *k, int acc, kiln_dtype t, kexpr *init) {
  return new_stmt(k, (kstmt){.kind = KS_ACC, .acc = acc, .acc2 = -1, .type = t, .value = init});
}

kstmt *ks_update(kernel *k, int acc, ir_op op, kexpr *value) {
  return new_stmt(k, (kstmt){.kind = KS_UPDATE, .acc = acc, .acc2 = -1, .op = op, .type = value->type,
                             .value = value});
}

kstmt *ks_argupdate(kernel *k, int acc, int acc_index, ir_op better, kexpr *value, kexpr *index) {
  kstmt *s = ks_update(k, acc, better, value);
  s->acc2 = acc_index;
  s->index = index;
  return s;
}

kstmt *ks_carry(kernel *k, int acc, ir_op scan, kiln_dtype t, kexpr *value) {
  return new_stmt(k, (kstmt){.kind = KS_CARRY, .acc = acc, .acc2 = -1, .op = scan, .type = t, .value = value,
                             .var = ++k->ncarries});
}

kexpr *kx_acc_after(kernel *k, const kstmt *carry) {
  return kx_intern(k, &(kexpr){.kind = KX_ACC, .type = carry->type, .var = carry->acc, .i = carry->var,
                               .a = carry->index});
}

void ks_lanes(kstmt *s, int64_t lanes, kexpr *lane) {
  IR_ASSERT(s->kind == KS_ACC || s->kind == KS_CARRY);
  s->extent = lanes;
  s->index = lane;
}

kexpr *kx_acc_lane(kernel *k, int acc, kiln_dtype t, kexpr *lane) {
  return kx_intern(k, &(kexpr){.kind = KX_ACC, .type = t, .var = acc, .a = lane});
}

kstmt *ks_sort(kernel *k, int64_t n, int64_t keep, bool descending) {
  kstmt *s = new_stmt(k, (kstmt){.kind = KS_SORT, .acc = -1, .acc2 = -1});
  s->sort.n = n;
  s->sort.k = keep;
  s->sort.descending = descending;
  s->sort.vals = s->sort.idx = s->sort.in = -1;
  return s;
}

kstmt *ks_attn(kernel *k, int64_t rows) {
  kstmt *s = ir_arena_alloc(k->arena, sizeof *s);
  *s = (kstmt){.kind = KS_ATTN, .acc = -1, .acc2 = -1};
  s->attn.rows = rows;
  s->attn.q = s->attn.k = s->attn.v = s->attn.mask = s->attn.out = -1;
  return s;
}

kstmt *ks_gemm(kernel *k, int acc, kiln_dtype t, int64_t m, int64_t n, int64_t kdim) {
  kstmt *s = new_stmt(k, (kstmt){.kind = KS_GEMM, .acc = acc, .acc2 = -1, .type = t, .var = k_var(k), .extent = m});
  s->gemm.var_j = k_var(k);
  s->gemm.n = n;
  s->gemm.kdim = kdim;
  return s;
}

int64_t ks_gemm_value(const kstmt *s, int which) {
  const int64_t v[KG_NUM] = {s->extent, s->gemm.n, s->gemm.kdim, s->gemm.a_si, s->gemm.a_sk, s->gemm.b_sk,
                             s->gemm.b_sn};
  IR_ASSERT(s->kind == KS_GEMM && which >= 0 && which < KG_NUM);
  return v[which];
}

void ks_gemm_bind(kernel *k, kstmt *s) {
  IR_ASSERT(!k->generic || !s->gemm.win);
  for (int i = 0; i < KG_NUM; i++) {
    kexpr *b = kx_dim(k, ks_gemm_value(s, i));
    s->gemm.bound[i] = b->kind == KX_ARG ? b : NULL;
  }
}

kstmt *ks_check(kernel *k, kc_code code, int site, kexpr *fail, kexpr *pos, kexpr *what) {
  if (k->oom) return new_stmt(k, (kstmt){.kind = KS_CHECK});   /* the site and fail may be stand-ins */
  IR_ASSERT(code > KC_NONE && code < KC_NUM && site >= 0 && site < k->nsites && fail->type == KILN_BOOL);
  if (k_status_param(k) < 0) {
    int p = k_param(k, KILN_I64, false, KC_SLOT_WORDS);   /* may move k->params */
    k->params[p].status = true;
  }
  return new_stmt(k, (kstmt){.kind = KS_CHECK, .acc2 = -1, .value = fail, .index = pos,
                             .check = {code, site, what ? what : kx_int(k, KILN_I64, 0)}});
}

/* ---- parallel range ------------------------------------------------------ */
/* a * b and a + b of non-negative costs, at most INT64_MAX: an empty
 * tensor's other dims may multiply past it ((0, 2^62, 8)). */
static int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

static int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

static int64_t block_cost(const kstmt *s) {
  int64_t c = 0;
  for (; s; s = s->next) {
    int64_t one = 1;
    if (s->kind == KS_LOOP) one = sat_mul(s->extent, block_cost(s->body));
    else if (s->kind == KS_GEMM) one = sat_mul(sat_mul(s->extent, s->gemm.n), s->gemm.kdim + 1);
    else if (s->kind == KS_SORT) one = sat_mul(16, s->sort.n);   /* a few passes over the line */
    else if (s->kind == KS_ATTN)   /* 8: the exp */
      one = sat_mul(sat_mul(s->attn.rows, s->attn.s), s->attn.e + s->attn.ev + 8);
    c = sat_add(c, one);
  }
  return c;
}

int64_t k_blas_ld(int64_t rows, int64_t cols, int64_t unit, int64_t lead) {
  int64_t need = rows > 1 ? rows : 1, ld = cols > 1 ? lead : need;
  return (rows > 1 && unit != 1) || ld < need ? 0 : ld;
}

int64_t k_parallel(const kernel *k, int64_t *iter_cost) {
  for (const kstmt *s = k->body; s; s = s->next) {
    if (s->kind == KS_LOOP && s->loop == KL_PARALLEL) {
      *iter_cost = block_cost(s->body);
      return s->extent;
    }
    if (s->kind == KS_GEMM) {
      *iter_cost = sat_mul(s->gemm.n, s->gemm.kdim + 1);
      return s->extent;
    }
  }
  *iter_cost = block_cost(k->body);
  return 0;
}

/* ---- walking the kernel: every expression once, operands first ---------- */
typedef void (*kx_visit)(void *ctx, const kexpr *e, int depth);
typedef void (*ks_visit)(void *ctx, const kstmt *s, int depth, bool enter);

typedef struct {
  unsigned char *done;
  kx_visit on_expr;
  ks_visit on_stmt;
  void *ctx;
  struct { const kexpr *e; int next; } *stack;   /* walk_expr's open expressions */
  int cap;
  bool skip_checks;     /* leave out KS_CHECK and what only it reads */
  bool failed;          /* out of memory: not every expression was visited */
} kwalk;

/* Out of memory the walk goes on without e (and w->failed says so). */
static int walk_push(kwalk *w, int n, const kexpr *e) {
  if (n == w->cap) {
    int cap = w->cap ? 2 * w->cap : 64;
    void *grown = ir_realloc(w->stack, sizeof *w->stack * (size_t)cap);
    if (!grown) return (w->failed = true), n;
    w->stack = grown;
    w->cap = cap;
  }
  w->done[e->id] = 1;
  w->stack[n].e = e;
  w->stack[n].next = 0;
  return n + 1;
}

/* Post-order, each expression once, with an explicit stack (an expression
 * is as deep as the chain of ops fused into it): e is visited after a, b
 * and c, in that order, as a recursive walk would. */
static void walk_expr(kwalk *w, const kexpr *root, int depth) {
  if (w->done[root->id]) return;
  int n = walk_push(w, 0, root);
  while (n) {
    const kexpr *e = w->stack[n - 1].e, *c = NULL;
    while (!c && w->stack[n - 1].next < 3) {
      c = *operand((kexpr *)e, w->stack[n - 1].next++);
      if (c && w->done[c->id]) c = NULL;
    }
    if (c) {
      n = walk_push(w, n, c);
    } else {
      w->on_expr(w->ctx, e, depth);
      n--;
    }
  }
}

/* A statement's expressions are walked before it; loops and gemms print
 * their header (enter) before their body. */
static void walk_block(kwalk *w, const kstmt *s, int depth) {
  for (; s; s = s->next) {
    if (s->kind == KS_CHECK && w->skip_checks) continue;
    if (s->kind == KS_GEMM) {
      walk_expr(w, s->gemm.a_off, depth);
      walk_expr(w, s->gemm.b_off, depth);
      for (int i = 0; i < KG_NUM; i++)
        if (s->gemm.bound[i]) walk_expr(w, s->gemm.bound[i], depth);
    }
    if (s->kind == KS_LOOP && s->bound) walk_expr(w, s->bound, depth);
    if (s->kind == KS_SORT) {
      walk_expr(w, s->sort.in_off, depth);
      walk_expr(w, s->sort.out_off, depth);
      w->on_stmt(w->ctx, s, depth, false);
      continue;
    }
    if (s->kind == KS_ATTN) {
      kexpr *const offs[6] = {s->attn.q_off, s->attn.k_off, s->attn.v_off, s->attn.m_off, s->attn.o_off, s->attn.row0};
      for (int i = 0; i < 6; i++) walk_expr(w, offs[i], depth);
      w->on_stmt(w->ctx, s, depth, false);
      continue;
    }
    if (s->kind == KS_LOOP || s->kind == KS_GEMM) {
      w->on_stmt(w->ctx, s, depth, true);
      walk_block(w, s->body, depth + 1);
      continue;
    }
    if (s->index) walk_expr(w, s->index, depth);
    if (s->kind == KS_CHECK) walk_expr(w, s->check.what, depth);
    walk_expr(w, s->value, depth);
    w->on_stmt(w->ctx, s, depth, false);
  }
}

/* False when out of memory: the walk was incomplete. */
static bool k_walk_checks(kernel *k, kx_visit on_expr, ks_visit on_stmt, void *ctx, bool checks) {
  kwalk w = {ir_calloc((size_t)k->nexprs + 1, 1), on_expr, on_stmt, ctx, NULL, 0, !checks, false};
  if (w.done) walk_block(&w, k->body, 1);
  free(w.done);
  free(w.stack);
  return w.done && !w.failed;
}

static bool k_walk(kernel *k, kx_visit on_expr, ks_visit on_stmt, void *ctx) {
  return k_walk_checks(k, on_expr, on_stmt, ctx, true);
}

/* ---- binary key ---------------------------------------------------------- */
static void key_expr(void *ctx, const kexpr *e, int depth) {
  (void)depth;
  int32_t f[8] = {e->kind, e->type, e->op, e->var, e->buf, e->a ? e->a->id : -1,
                  e->b ? e->b->id : -1, e->c ? e->c->id : -1};
  ir_str_append(ctx, f, sizeof f);
  int64_t v[2] = {e->i, 0};
  memcpy(&v[1], &e->f, sizeof e->f);
  ir_str_append(ctx, v, sizeof v);
}

/* KS_ATTN's fields: f's free words, then the strides and the scale's bits. */
static void key_attn(ir_str *key, const kstmt *s, int64_t *f) {
  const kexpr *offs[6] = {s->attn.q_off, s->attn.k_off, s->attn.v_off, s->attn.m_off, s->attn.o_off, s->attn.row0};
  int64_t g[8] = {s->attn.q | (int64_t)s->attn.k << 16 | (int64_t)s->attn.v << 32 | (int64_t)s->attn.out << 48,
                  s->attn.mask, s->attn.rows, s->attn.l, s->attn.s, s->attn.e, s->attn.ev, s->attn.causal};
  memcpy(f + 12, g, sizeof g);
  for (int i = 0; i < 6; i++) ir_str_append(key, &offs[i]->id, sizeof offs[i]->id);
  ir_str_append(key, s->attn.st, sizeof s->attn.st);
  ir_str_append(key, &s->attn.scale, sizeof s->attn.scale);
}

static void key_stmt(void *ctx, const kstmt *s, int depth, bool enter) {
  (void)enter;
  int64_t f[20] = {s->kind, depth, s->var, s->bound ? -1 - s->bound->id : s->extent, s->loop, s->buf,
                   s->index ? s->index->id : -1,
                   s->value ? s->value->id : -1, s->acc, s->acc2, s->op, s->type};
  if (s->kind == KS_GEMM) {
    int64_t g[8] = {s->gemm.var_j, s->gemm.a_buf, s->gemm.b_buf, s->gemm.a_off->id, s->gemm.b_off->id,
                    s->gemm.win != NULL};
    memcpy(f + 12, g, sizeof g);
    int64_t dims[KG_NUM];   /* a size or stride: its argument's id, or its literal value */
    for (int i = 0; i < KG_NUM; i++) dims[i] = s->gemm.bound[i] ? -1 - s->gemm.bound[i]->id : ks_gemm_value(s, i);
    ir_str_append(ctx, dims, sizeof dims);
    f[3] = dims[KG_ROWS];
    if (s->gemm.win) ir_str_append(ctx, s->gemm.win, sizeof(int64_t) * KW_N);
  }
  if (s->kind == KS_CHECK) {
    f[12] = s->check.code;
    f[13] = s->check.site;
    f[14] = s->check.what->id;
  }
  if (s->kind == KS_SORT) {
    int64_t g[8] = {s->sort.in, s->sort.vals, s->sort.idx, s->sort.in_off->id, s->sort.out_off->id, s->sort.n,
                    s->sort.k, s->sort.in_stride};
    int64_t h[2] = {s->sort.out_stride, s->sort.descending};
    memcpy(f + 12, g, sizeof g);
    ir_str_append(ctx, h, sizeof h);
  }
  if (s->kind == KS_ATTN) key_attn(ctx, s, f);
  ir_str_append(ctx, f, sizeof f);
}

/* ---- the name: what the kernel computes, then its hash -------------------
 * "k_softmax_f32_3a9c5e7f01b2": a pattern the ops seen match, else the
 * reductions and then the other value ops in the order met ("copy" or
 * "fill" without any), the first
 * output's dtype, and as many hex digits of the hash as fit (at least 12:
 * names stay unique, the JIT knows kernels by them). */
typedef struct {
  bool seen[IR_NUM_OPS];
  ir_op order[2 * IR_NUM_OPS];  /* reductions first (IR_SUM...), then value ops */
  int n;
  bool loads;           /* reads memory: without ops a "copy", else a "fill" */
} kdesc;

static void desc_add(kdesc *d, ir_op op) {
  if (d->seen[op]) return;
  d->seen[op] = true;
  d->order[d->n++] = op;
}

/* Index arithmetic (on i64 operands) says nothing about what is computed. */
static void desc_expr(void *ctx, const kexpr *e, int depth) {
  (void)depth;
  ((kdesc *)ctx)->loads |= e->kind == KX_LOAD;
  if (e->kind == KX_OP && e->a->type != KILN_I64 && e->op != IR_CAST) desc_add(ctx, e->op);
}

static ir_op reduction_of(const kstmt *s) {
  switch (s->op) {
  case IR_ADD: return IR_SUM;
  case IR_MUL: return IR_PROD;
  case IR_MAXIMUM: return IR_MAX;
  case IR_MINIMUM: return IR_MIN;
  default: return s->op == IR_GT ? IR_ARGMAX : IR_ARGMIN;
  }
}

static void desc_stmt(void *ctx, const kstmt *s, int depth, bool enter) {
  (void)depth;
  (void)enter;
  if (s->kind == KS_UPDATE) desc_add(ctx, reduction_of(s));
  if (s->kind == KS_CARRY) desc_add(ctx, s->op);
  if (s->kind == KS_SORT) desc_add(ctx, s->sort.k < s->sort.n ? IR_TOPK : IR_SORT);
  if (s->kind == KS_GEMM) desc_add(ctx, IR_MATMUL);
  if (s->kind == KS_ATTN) desc_add(ctx, IR_ATTENTION);
}

static const struct {
  const char *name;
  ir_op need[4];
  int n;
} desc_patterns[] = {
  {"log_softmax", {IR_MAX, IR_SUM, IR_EXP, IR_LOG}, 4},
  {"softmax", {IR_MAX, IR_SUM, IR_EXP, IR_DIV}, 4},
  {"layer_norm", {IR_SUM, IR_RSQRT}, 2},
};

/* False when out of memory. A check's compare is not what the kernel computes. */
static bool describe(kernel *k, char *out, size_t room) {
  kdesc d = {0};
  if (!k_walk_checks(k, desc_expr, desc_stmt, &d, false)) return false;
  for (size_t p = 0; p < sizeof desc_patterns / sizeof *desc_patterns; p++) {
    int have = 0;
    for (int i = 0; i < desc_patterns[p].n; i++) have += d.seen[desc_patterns[p].need[i]];
    if (have == desc_patterns[p].n) {
      snprintf(out, room, "%s", desc_patterns[p].name);
      return true;
    }
  }
  ir_op sorted[2 * IR_NUM_OPS];
  int m = 0;
  for (int pass = 0; pass < 2; pass++)  /* matmul, reductions and scans lead */
    for (int i = 0; i < d.n; i++)
      if ((ir_op_has(d.order[i], IR_REDUCE | IR_CONTRACT | IR_SCAN | IR_SORTING) != 0) == (pass == 0)) sorted[m++] = d.order[i];
  size_t len = 0;
  out[0] = 0;
  for (int i = 0; i < m; i++) {
    const char *name = ir_ops[sorted[i]].name;
    if (len + (len > 0) + strlen(name) >= room) break;
    len += (size_t)snprintf(out + len, room - len, "%s%s", len ? "_" : "", name);
  }
  if (!len) snprintf(out, room, "%s", d.loads ? "copy" : "fill");
  return true;
}

#define NAME_MIN_HEX 12

static bool name_kernel(kernel *k, uint64_t h) {
  const char *dt = k->nparams ? ir_dtypes[k->params[0].dtype].short_name : "none";
  int fixed = 2 + 1 + (int)strlen(dt) + 1 + NAME_MIN_HEX;  /* "k_" "_" dt "_" hex */
  char desc[sizeof k->name];
  if (!describe(k, desc, sizeof k->name - (size_t)fixed)) return false;
  int hex = (int)sizeof k->name - 1 - (fixed - NAME_MIN_HEX) - (int)strlen(desc);
  if (hex > 16) hex = 16;
  char full[2 * sizeof k->name];  /* fits k->name by construction */
  snprintf(full, sizeof full, "k_%s_%s_%0*llx", desc, dt, hex, (unsigned long long)(h >> 4 * (16 - hex)));
  memcpy(k->name, full, sizeof k->name - 1);
  k->name[sizeof k->name - 1] = 0;
  return true;
}

uint64_t k_key(kernel *k, ir_str *key) {
  size_t start = key->len;
  for (int i = 0; i < k->nparams; i++) {
    int64_t f[4] = {k->params[i].dtype, k->params[i].output, k->generic ? -1 : k->params[i].numel,
                    k->params[i].args | k->params[i].status << 1};
    ir_str_append(key, f, sizeof f);
  }
  if (!k_walk(k, key_expr, key_stmt, key)) key->failed = true;
  if (key->failed) return 0;   /* out of memory: the caller drops the kernel */
  uint64_t h = ir_hash_bytes(key->s + start, key->len - start, 0);
  if (!name_kernel(k, h)) return (key->failed = true), 0;
  return h;
}

/* ---- printer ------------------------------------------------------------ */
static void kp_indent(ir_str *b, int depth) { ir_str_printf(b, "%*s", 2 * depth, ""); }

static void kp_expr(void *ctx, const kexpr *e, int depth) {
  ir_str *b = ctx;
  kp_indent(b, depth);
  ir_str_printf(b, "%%%d = ", e->id);
  const char *t = ir_dtypes[e->type].short_name;
  switch (e->kind) {
  case KX_CONST:
    if (ir_is_float(e->type)) ir_str_printf(b, "const.%s %.17g", t, e->f);
    else ir_str_printf(b, "const.%s %lld", t, (long long)e->i);
    break;
  case KX_VAR: ir_str_printf(b, "v%d", e->var); break;
  case KX_LOAD: ir_str_printf(b, "load.%s p%d[%%%d]", t, e->buf, e->a->id); break;
  case KX_OP:
    ir_str_printf(b, "%s.%s %%%d", ir_ops[e->op].name, t, e->a->id);
    if (e->b) ir_str_printf(b, ", %%%d", e->b->id);
    if (e->c) ir_str_printf(b, ", %%%d", e->c->id);
    break;
  case KX_CAST: ir_str_printf(b, "cast.%s %%%d", t, e->a->id); break;
  case KX_IDIV: ir_str_printf(b, "idiv %%%d, %%%d", e->a->id, e->b->id); break;
  case KX_IMOD: ir_str_printf(b, "imod %%%d, %%%d", e->a->id, e->b->id); break;
  case KX_PHILOX:
    ir_str_printf(b, "philox.w%lld key %%%d, ctr %%%d", (long long)e->i, e->b->id, e->a->id);
    break;
  case KX_ACC:
    ir_str_printf(b, "acc.%s a%d", t, e->var);
    if (e->a) ir_str_printf(b, "[%%%d]", e->a->id);
    if (e->i) ir_str_printf(b, " after carry %lld", (long long)e->i);
    break;
  case KX_ARG: ir_str_printf(b, "arg.%s %lld", t, (long long)e->i); break;
  }
  ir_str_printf(b, "\n");
}

static void kp_stmt(void *ctx, const kstmt *s, int depth, bool enter) {
  static const char *kinds[] = {"for", "parallel for", "vector for"};
  ir_str *b = ctx;
  kp_indent(b, depth);
  (void)enter;
  switch (s->kind) {
  case KS_LOOP:
    if (s->bound) ir_str_printf(b, "%s v%d in 0..%%%d\n", kinds[s->loop], s->var, s->bound->id);
    else ir_str_printf(b, "%s v%d in 0..%lld\n", kinds[s->loop], s->var, (long long)s->extent);
    break;
  case KS_STORE: ir_str_printf(b, "store p%d[%%%d] = %%%d\n", s->buf, s->index->id, s->value->id); break;
  case KS_ACC:
    ir_str_printf(b, "acc a%d.%s", s->acc, ir_dtypes[s->type].short_name);
    if (s->index) ir_str_printf(b, "[%%%d of %lld]", s->index->id, (long long)s->extent);
    ir_str_printf(b, " = %%%d\n", s->value->id);
    break;
  case KS_UPDATE:
    if (s->acc2 < 0) ir_str_printf(b, "a%d = %s(a%d, %%%d)\n", s->acc, ir_ops[s->op].name, s->acc, s->value->id);
    else
      ir_str_printf(b, "a%d, a%d = arg%s(a%d, %%%d at %%%d)\n", s->acc, s->acc2, ir_ops[s->op].name, s->acc,
                    s->value->id, s->index->id);
    break;
  case KS_SORT:
    ir_str_printf(b, "sort%s p%d[%%%d + j*%lld] j in 0..%lld -> first %lld: values p%d, positions p%d [%%%d + j*%lld]\n",
                  s->sort.descending ? " descending" : "", s->sort.in, s->sort.in_off->id, (long long)s->sort.in_stride,
                  (long long)s->sort.n, (long long)s->sort.k, s->sort.vals, s->sort.idx, s->sort.out_off->id,
                  (long long)s->sort.out_stride);
    break;
  case KS_ATTN:
    ir_str_printf(b, "attention%s rows %%%d + 0..%lld of %lld: q p%d[%%%d], k p%d[%%%d], v p%d[%%%d], mask p%d[%%%d] "
                  "(s %lld, e %lld, ev %lld, scale %g) -> p%d[%%%d]\n",
                  s->attn.causal ? " causal" : "", s->attn.row0->id, (long long)s->attn.rows, (long long)s->attn.l,
                  s->attn.q, s->attn.q_off->id, s->attn.k, s->attn.k_off->id, s->attn.v, s->attn.v_off->id,
                  s->attn.mask, s->attn.m_off->id, (long long)s->attn.s, (long long)s->attn.e, (long long)s->attn.ev,
                  s->attn.scale, s->attn.out, s->attn.o_off->id);
    break;
  case KS_CARRY:
    ir_str_printf(b, "carry %lld (%s): a%d", (long long)s->var, ir_ops[s->op].name, s->acc);
    if (s->index) ir_str_printf(b, "[%%%d]", s->index->id);
    ir_str_printf(b, " = %%%d\n", s->value->id);
    break;
  case KS_GEMM: {
    char d[KG_NUM][24];   /* a literal, or %id of the argument that holds it */
    for (int i = 0; i < KG_NUM; i++)
      if (s->gemm.bound[i]) snprintf(d[i], sizeof d[i], "%%%d", s->gemm.bound[i]->id);
      else snprintf(d[i], sizeof d[i], "%lld", (long long)ks_gemm_value(s, i));
    ir_str_printf(b, "gemm a%d.%s v%d in 0..%s, v%d in 0..%s, k in 0..%s: p%d[%%%d + v%d*%s + k*%s] * "
                  "p%d[%%%d + k*%s + v%d*%s]\n",
                  s->acc, ir_dtypes[s->type].short_name, s->var, d[KG_ROWS], s->gemm.var_j, d[KG_COLS], d[KG_DEPTH],
                  s->gemm.a_buf, s->gemm.a_off->id, s->var, d[KG_A_SI], d[KG_A_SK], s->gemm.b_buf,
                  s->gemm.b_off->id, d[KG_B_SK], s->gemm.var_j, d[KG_B_SN]);
    if (s->gemm.win) {
      ir_str_printf(b, "  B is a window:");
      for (int i = 0; i < KW_N; i++) ir_str_printf(b, " %lld", (long long)s->gemm.win[i]);
      ir_str_printf(b, "\n");
    }
    break;
  }
  case KS_CHECK:
    ir_str_printf(b, "check %s if %%%d at %%%d (value %%%d, site %d)\n", kc_infos[s->check.code].message,
                  s->value->id, s->index->id, s->check.what->id, s->check.site);
    break;
  }
}

void k_print(ir_str *b, kernel *k) {
  if (!k->name[0]) {
    ir_str key = {0};
    k_key(k, &key);
    ir_str_free(&key);
  }
  ir_str_printf(b, "kernel %s", k->name);
  for (int i = 0; i < k->nparams; i++)
    ir_str_printf(b, "%sp%d: %s%s[%lld]", i ? ", " : "(", i,
                  k->params[i].output ? "out " : k->params[i].args ? "args " : k->params[i].status ? "status " : "",
                  ir_dtypes[k->params[i].dtype].short_name, (long long)k->params[i].numel);
  ir_str_printf(b, ")\n");
  if (!k_walk(k, kp_expr, kp_stmt, b)) b->failed = true;
}
