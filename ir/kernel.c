/* kernel.c: builders for the kernel IR (hash-consed, folding constant index
 * arithmetic) and its printer, whose text is the kernel's identity. */
#include "kernel.h"

#include <stdlib.h>
#include <string.h>

struct kx_table { kexpr **slot; int cap, used; };

kernel *k_new(void) {
  kernel *k = calloc(1, sizeof *k);
  IR_ASSERT(k);
  k->arena = ir_arena_new();
  k->cse = ir_arena_alloc(k->arena, sizeof *k->cse);
  return k;
}

void k_free(kernel *k) {
  if (!k) return;
  free(k->cse->slot);
  free(k->params);
  ir_arena_free(k->arena);
  free(k);
}

int k_param(kernel *k, kiln_dtype dt, bool output, int64_t numel) {
  if ((k->nparams & (k->nparams - 1)) == 0) {  /* grow at powers of two */
    kparam *p = realloc(k->params, sizeof *p * (size_t)(k->nparams ? 2 * k->nparams : 4));
    IR_ASSERT(p);
    k->params = p;
  }
  k->params[k->nparams] = (kparam){dt, output, numel};
  return k->nparams++;
}

int k_var(kernel *k) { return k->nvars++; }

/* ---- hash-consing ------------------------------------------------------- */
static uint64_t kx_hash(const kexpr *e) {
  uint64_t h = ir_hash_bytes(&e->kind, sizeof e->kind, 0);
  h = ir_hash_bytes(&e->type, sizeof e->type, h);
  h = ir_hash_bytes(&e->op, sizeof e->op, h);
  h = ir_hash_bytes(&e->var, sizeof e->var, h);
  h = ir_hash_bytes(&e->buf, sizeof e->buf, h);
  h = ir_hash_bytes(&e->i, sizeof e->i, h);
  h = ir_hash_bytes(&e->f, sizeof e->f, h);
  h = ir_hash_bytes(&e->seed, sizeof e->seed, h);
  kexpr *ops[3] = {e->a, e->b, e->c};
  return ir_hash_bytes(ops, sizeof ops, h);
}

static bool kx_same(const kexpr *x, const kexpr *y) {
  return x->kind == y->kind && x->type == y->type && x->op == y->op && x->var == y->var &&
         x->buf == y->buf && x->i == y->i && memcmp(&x->f, &y->f, sizeof x->f) == 0 &&
         x->seed == y->seed && x->a == y->a && x->b == y->b && x->c == y->c;
}

static void kx_grow(kx_table *t) {
  int cap = t->cap ? t->cap * 2 : 256;
  kexpr **slot = calloc((size_t)cap, sizeof *slot);
  IR_ASSERT(slot);
  for (int i = 0; i < t->cap; i++) {
    if (!t->slot[i]) continue;
    size_t j = kx_hash(t->slot[i]) & (size_t)(cap - 1);
    while (slot[j]) j = (j + 1) & (size_t)(cap - 1);
    slot[j] = t->slot[i];
  }
  free(t->slot);
  t->slot = slot;
  t->cap = cap;
}

/* Returns the canonical copy of *proto, creating it on first sight. */
static kexpr *kx_intern(kernel *k, const kexpr *proto) {
  kx_table *t = k->cse;
  if (2 * (t->used + 1) > t->cap) kx_grow(t);
  size_t j = kx_hash(proto) & (size_t)(t->cap - 1);
  for (; t->slot[j]; j = (j + 1) & (size_t)(t->cap - 1))
    if (kx_same(t->slot[j], proto)) return t->slot[j];
  kexpr *e = ir_arena_alloc(k->arena, sizeof *e);
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

kexpr *kx_philox(kernel *k, uint64_t seed, kexpr *counter, int word) {
  IR_ASSERT(word >= 0 && word < 4);
  return kx_intern(k, &(kexpr){.kind = KX_PHILOX, .type = KILN_I64, .seed = seed, .i = word, .a = counter});
}

/* ---- statements --------------------------------------------------------- */
kstmt *ks_loop(kernel *k, int var, int64_t extent, kl_kind kind) {
  kstmt *s = ir_arena_alloc(k->arena, sizeof *s);
  *s = (kstmt){.kind = KS_LOOP, .var = var, .extent = extent, .loop = kind};
  return s;
}

kstmt *ks_store(kernel *k, int buf, kexpr *index, kexpr *value) {
  kstmt *s = ir_arena_alloc(k->arena, sizeof *s);
  *s = (kstmt){.kind = KS_STORE, .buf = buf, .index = index, .value = value};
  return s;
}

/* ---- printer ------------------------------------------------------------ */
typedef struct { ir_str *b; unsigned char *done; } kprinter;

static void kp_indent(ir_str *b, int depth) { ir_str_printf(b, "%*s", 2 * depth, ""); }

static void kp_expr(kprinter *p, const kexpr *e, int depth) {
  if (p->done[e->id]) return;
  p->done[e->id] = 1;
  const kexpr *ops[3] = {e->a, e->b, e->c};
  for (int i = 0; i < 3; i++)
    if (ops[i]) kp_expr(p, ops[i], depth);
  ir_str *b = p->b;
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
    ir_str_printf(b, "philox.w%lld seed=0x%llx %%%d", (long long)e->i, (unsigned long long)e->seed, e->a->id);
    break;
  }
  ir_str_printf(b, "\n");
}

static void kp_block(kprinter *p, const kstmt *s, int depth) {
  static const char *kinds[] = {"for", "parallel for", "vector for"};
  for (; s; s = s->next) {
    if (s->kind == KS_LOOP) {
      kp_indent(p->b, depth);
      ir_str_printf(p->b, "%s v%d in 0..%lld\n", kinds[s->loop], s->var, (long long)s->extent);
      kp_block(p, s->body, depth + 1);
      continue;
    }
    kp_expr(p, s->index, depth);
    kp_expr(p, s->value, depth);
    kp_indent(p->b, depth);
    ir_str_printf(p->b, "store p%d[%%%d] = %%%d\n", s->buf, s->index->id, s->value->id);
  }
}

static void k_print_body(ir_str *b, kernel *k) {
  for (int i = 0; i < k->nparams; i++)
    ir_str_printf(b, "%sp%d: %s%s[%lld]", i ? ", " : "(", i, k->params[i].output ? "out " : "",
                  ir_dtypes[k->params[i].dtype].short_name, (long long)k->params[i].numel);
  ir_str_printf(b, ")\n");
  kprinter p = {b, calloc((size_t)k->nexprs + 1, 1)};
  IR_ASSERT(p.done);
  kp_block(&p, k->body, 1);
  free(p.done);
}

uint64_t k_hash(kernel *k) {
  ir_str body = {0};
  k_print_body(&body, k);
  uint64_t h = ir_hash_bytes(body.s, body.len, 0);
  ir_str_free(&body);
  return h;
}

void k_print(ir_str *b, kernel *k) {
  ir_str body = {0};
  k_print_body(&body, k);
  uint64_t h = ir_hash_bytes(body.s, body.len, 0);
  snprintf(k->name, sizeof k->name, "k_%016llx", (unsigned long long)h);
  ir_str_printf(b, "kernel %s%s", k->name, body.s);
  ir_str_free(&body);
}
