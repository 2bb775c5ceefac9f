/* stash.c: a kernel pass for row-wise kernels on the CPU. Softmax's kernel
 * sums exp(x - max) over a row in one loop and divides exp(x - max) by the
 * sum in the next: the costly exp would be computed twice per element. When
 * a costly subexpression X of a reduction loop's update reappears, with the
 * loop variable renamed, in the value that a later loop of the same extent
 * stores to an output, the reduction loop also stores X to that output at
 * the later loop's index, and the later loop loads it back instead: the
 * output row is the scratch, still in cache when it is read.
 *
 * Sound because the output is written nowhere else in the kernel and read
 * only by the new load, the later loop's store index is the output's flat
 * index (each element once, in that loop), and X reads no accumulator that
 * changes between the two loops. Only f32/f64 outputs of X's own type hold
 * X exactly. On a GPU the recomputation is cheaper than the extra traffic,
 * so pass_run_kernel runs this only for CPU kernels. */
#include "pass.h"

#include <stdint.h>
#include <stdlib.h>

typedef struct {
  kernel *k;
  int from, to;         /* rename loop var `from` to `to` */
  kexpr *old, *repl;    /* or replace old by repl */
} subst;

static kexpr *rename_var(void *ctx, kexpr *x) {
  subst *s = ctx;
  return x->kind == KX_VAR && x->var == s->from ? kx_var(s->k, s->to) : NULL;
}

static kexpr *replace(void *ctx, kexpr *x) {
  subst *s = ctx;
  return x == s->old ? s->repl : NULL;
}

static kexpr *renamed(kernel *k, kexpr *e, int from, int to) {
  subst s = {k, from, to, NULL, NULL};
  return kx_rewrite(k, e, rename_var, &s);
}

/* Whether e or one of its subexpressions x has is(x, arg). */
typedef bool (*kx_pred)(const kexpr *x, intptr_t arg);
static bool has(const kexpr *e, kx_pred is, intptr_t arg) {
  return e && (is(e, arg) || has(e->a, is, arg) || has(e->b, is, arg) || has(e->c, is, arg));
}
static bool is_node(const kexpr *x, intptr_t arg) { return x == (const kexpr *)arg; }  /* hash-consed */
static bool is_var(const kexpr *x, intptr_t var) { return x->kind == KX_VAR && x->var == var; }
static bool is_load(const kexpr *x, intptr_t buf) { return x->kind == KX_LOAD && x->buf == buf; }
static bool is_costly(const kexpr *x, intptr_t unused) {
  (void)unused;
  return x->kind == KX_OP && ir_op_has(x->op, IR_COSTLY);
}

/* Stores to param buf and writes of accumulator acc in the statements from
 * s up to (not including) stop, nested ones included; -1 matches nothing. */
static int writes(const kstmt *s, const kstmt *stop, int buf, int acc) {
  int n = 0;
  for (; s != stop; s = s->next) {
    n += s->kind == KS_STORE && s->buf == buf;
    n += (s->kind == KS_ACC || s->kind == KS_UPDATE || s->kind == KS_CARRY || s->kind == KS_GEMM) && s->acc == acc;
    n += s->kind == KS_UPDATE && s->acc2 >= 0 && s->acc2 == acc;
    if (s->kind == KS_LOOP || s->kind == KS_GEMM) n += writes(s->body, NULL, buf, acc);
  }
  return n;
}

/* Whether any expression of the statements in s loads param buf. */
static bool reads(const kstmt *s, int buf) {
  for (; s; s = s->next) {
    if (has(s->index, is_load, buf) || has(s->value, is_load, buf)) return true;
    if ((s->kind == KS_LOOP || s->kind == KS_GEMM) && reads(s->body, buf)) return true;
  }
  return false;
}

/* The accumulators X reads are final from r (the reduction loop) through o
 * (the later loop): none of the statements r .. o updates them. */
static bool accs_settled(const kexpr *x, const kstmt *r, const kstmt *o) {
  if (!x) return true;
  if (x->kind == KX_ACC) return writes(r, o->next, -1, x->var) == 0;
  return accs_settled(x->a, r, o) && accs_settled(x->b, r, o) && accs_settled(x->c, r, o);
}

/* The largest costly subexpression of v (in loop r's variable) whose copy in
 * loop o's variable is part of want; NULL if none. */
static kexpr *shared_costly(kernel *k, kexpr *v, int rvar, int ovar, const kexpr *want) {
  if (!has(v, is_costly, 0) || !has(v, is_var, rvar)) return NULL;
  if (v->kind == KX_OP && has(want, is_node, (intptr_t)renamed(k, v, rvar, ovar))) return v;
  kexpr *x = shared_costly(k, v->a, rvar, ovar, want);
  if (!x) x = shared_costly(k, v->b, rvar, ovar, want);
  if (!x) x = shared_costly(k, v->c, rvar, ovar, want);
  return x;
}

/* Tries the reduction loop r against the later loop o (siblings; root is
 * the kernel's body, for the whole-kernel checks). */
static bool stash_pair(kernel *k, const kstmt *root, kstmt *r, kstmt *o) {
  if (k->oom) return false;   /* the stand-in statement may be linked: no more walks */
  if (r->extent != o->extent || r->bound != o->bound) return false;
  for (kstmt *s = o->body; s; s = s->next) {
    if (s->kind != KS_STORE || !has(s->index, is_var, o->var)) continue;
    kiln_dtype dt = k->params[s->buf].dtype;
    if ((dt != KILN_F32 && dt != KILN_F64) || reads(root, s->buf)) continue;
    if (writes(root, NULL, s->buf, -1) != 1) continue;  /* the later loop's store is the output's only writer */
    for (kstmt *u = r->body; u; u = u->next) {
      if (u->kind != KS_UPDATE) continue;
      kexpr *x = shared_costly(k, u->value, r->var, o->var, s->value);
      if (!x || x->type != dt || !accs_settled(x, r, o)) continue;
      kstmt *st = ks_store(k, s->buf, renamed(k, s->index, o->var, r->var), x);
      st->next = u->next;
      u->next = st;
      subst rep = {k, -1, -1, renamed(k, x, r->var, o->var), kx_load(k, s->buf, s->index, dt)};
      s->value = kx_rewrite(k, s->value, replace, &rep);
      return true;
    }
  }
  return false;
}

static bool stash_block(kernel *k, const kstmt *root, kstmt *list) {
  bool changed = false;
  for (kstmt *r = list; r && !k->oom; r = r->next) {
    if (r->kind != KS_LOOP) continue;
    if (r->loop == KL_PARALLEL) {
      changed |= stash_block(k, root, r->body);
      continue;
    }
    for (kstmt *o = r->next; o; o = o->next) {
      if (o->kind == KS_LOOP && o->loop != KL_PARALLEL && stash_pair(k, root, r, o)) {
        changed = true;
        break;
      }
    }
  }
  return changed;
}

void pass_stash(kernel *k) {
  if (stash_block(k, k->body, k->body)) k->name[0] = '\0';  /* changed: k_key names it again */
}
