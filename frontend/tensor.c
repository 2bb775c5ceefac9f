/* tensor.c: what a handle is to the user: lifetimes (reference counts and
 * the thread's stack of scopes), info queries that never realize, errors and
 * their stickiness, and the eager / bounded-laziness hook every op goes through. */
#include "frontend/frontend.h"
#include "runtime/rt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- scopes: per thread, each a list of the handles it will release ------ */
typedef struct {
  ir_node **v;
  int n;
  size_t cap;
} fe_scope;

static _Thread_local fe_scope *scopes;
static _Thread_local int nscopes;
static _Thread_local size_t scopes_cap;
/* A thread's first scopes need no allocation, so a scope can always begin
 * when there is no enclosing one to take its handles. Deeper, a
 * kiln_scope_begin that finds no memory is lost: its handles go to the
 * enclosing scope, and the matching kiln_scope_end closes nothing. */
#define INLINE_SCOPES 8
static _Thread_local fe_scope inline_scopes[INLINE_SCOPES];
static _Thread_local int lost_scopes;

static bool scope_push(fe_scope *s, ir_node *n) {
  if (!ir_grow((void **)&s->v, &s->cap, (size_t)s->n, (size_t)s->n + 1, sizeof *s->v, NULL)) return false;
  s->v[s->n++] = n;
  return true;
}

/* Removes one registration of n from s; false when n is not there. Searches
 * from the newest handle, the one a release most often refers to. */
static bool scope_remove(fe_scope *s, ir_node *n) {
  for (int i = s->n - 1; i >= 0; i--) {
    if (s->v[i] != n) continue;
    memmove(s->v + i, s->v + i + 1, (size_t)(s->n - i - 1) * sizeof *s->v);
    s->n--;
    return true;
  }
  return false;
}

/* A scope that cannot record n would leak it: n goes, the OOM node comes,
 * saying what n said (an error node's message names the op that failed). */
ir_node *fe_register(ir_node *n) {
  if (!nscopes || n == ir_node_oom() || scope_push(&scopes[nscopes - 1], n)) return n;
  if (n->status != KILN_OK) ir_error_set(n->msg);
  else ir_error_setf("%s:%d: %s: out of memory", n->file ? n->file : "?", n->line, n->api ? n->api : ir_ops[n->op].name);
  ir_node_release(n);
  return ir_node_oom_named();
}

void kiln_scope_begin(void) {
  if (!scopes) scopes = inline_scopes, scopes_cap = INLINE_SCOPES;
  if (lost_scopes || !ir_grow((void **)&scopes, &scopes_cap, (size_t)nscopes, (size_t)nscopes + 1, sizeof *scopes,
                              inline_scopes)) {
    ir_error_set("scope_begin: out of memory (the enclosing scope holds this one's handles)");
    lost_scopes++;
    return;
  }
  scopes[nscopes++] = (fe_scope){0};
}

/* Releases newest first, so users go before what they were built from. The
 * scope array itself is freed with the last scope: nothing lingers at exit. */
void kiln_scope_end(void) {
  if (lost_scopes) {
    lost_scopes--;
    return;
  }
  if (!nscopes) return;
  fe_scope s = scopes[--nscopes];
  for (int i = s.n - 1; i >= 0; i--) ir_node_release(s.v[i]);
  free(s.v);
  if (!nscopes) {
    if (scopes != inline_scopes) free(scopes);
    scopes = NULL;
    scopes_cap = 0;
  }
}

/* Like returning a value from a function: the handle moves to the enclosing
 * scope, or, at the outermost one, becomes the caller's to release. */
/* Out of memory the handle stays in its scope (removing it left the room)
 * and the caller gets the OOM node. */
kiln_tensor *kiln_keep(kiln_tensor *t) {
  if (t && nscopes && scope_remove(&scopes[nscopes - 1], t) && nscopes > 1 && !scope_push(&scopes[nscopes - 2], t)) {
    scope_push(&scopes[nscopes - 1], t);
    ir_error_set("keep: out of memory");
    return ir_node_oom_named();
  }
  return t;
}

/* Takes one of the references kiln_retain counted, if there is one: a
 * compare-and-swap, since any thread may retain and release a handle. */
static bool take_retained(ir_node *t) {
  int r = __atomic_load_n(&t->retained, __ATOMIC_RELAXED);
  while (r > 0 && !__atomic_compare_exchange_n(&t->retained, &r, r - 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return r > 0;
}

/* Drops a reference kiln_retain took if there is one, else the one a scope
 * holds (so that scope will not release it again). */
void kiln_release_at(const char *f, int l, kiln_tensor *t) {
  if (!t || fe_bad_handle(f, l, "release", t)) return;
  if (!take_retained(t))
    for (int i = nscopes - 1; i >= 0; i--)
      if (scope_remove(&scopes[i], t)) break;
  ir_node_release(t);
}

void fe_drop(ir_node *t) {
  if (!t) return;
  if (nscopes) scope_remove(&scopes[nscopes - 1], t);
  ir_node_release(t);
}

ir_node *fe_same(ir_node *t) {
  ir_node_retain(t);
  return fe_register(t);
}

ir_node *fe_keep(fe_temps *s, ir_node *t) {
  IR_ASSERT(s->n < (int)(sizeof s->t / sizeof *s->t));   /* a composition outgrew the array: a kiln bug */
  s->t[s->n++] = t;
  return t;
}

ir_node *fe_temps_done(fe_temps *s, ir_node *result) {
  int n = s->n;
  s->n = 0;
  return fe_done(result, n, s->t);
}

/* The new reference is the caller's own: scopes never release it. */
kiln_tensor *kiln_retain_at(const char *f, int l, kiln_tensor *t) {
  if (!t || fe_bad_handle(f, l, "retain", t)) return NULL;
  ir_node_retain(t);
  __atomic_add_fetch(&t->retained, 1, __ATOMIC_RELAXED);
  return t;
}

void kiln_shutdown(void) {
  while (nscopes) kiln_scope_end();
  ir_quarantine_flush();
  rt_shutdown();
}

/* ---- errors ------------------------------------------------------------- */
bool fe_bad_handle(const char *f, int l, const char *op, const ir_node *t) {
  if (!t) ir_error_setf("%s:%d: %s: argument is NULL", f, l, op);
  else if (!ir_node_live(t)) ir_error_setf("%s:%d: %s: argument " FE_FREED_MSG, f, l, op);
  return !t || !ir_node_live(t);
}

ir_node *fe_nomem(void) { return fe_register(ir_node_error(KILN_ERR_MEMORY, NULL, 0, "%s", ir_error_get())); }

ir_node *fe_locate(ir_node *e, const char *f, int l) {
  if (e != ir_node_oom()) e->file = f, e->line = l;
  return e;
}

ir_node *fe_check_arg(const char *f, int l, const char *op, ir_node *t, int argno) {
  if (!t) return fe_error(KILN_ERR_ARG, f, l, "%s: argument %d is NULL", op, argno);
  if (!ir_node_live(t)) return fe_error(KILN_ERR_ARG, f, l, "%s: argument %d " FE_FREED_MSG, op, argno);
  if (t->status == KILN_OK) return NULL;
  return fe_register(fe_locate(ir_node_error(t->status, NULL, 0, "%s", ir_node_msg(t)), f, l));
}

#define NULL_LIST_MSG "%s: %s is NULL with a count of %lld"

ir_node *fe_check_list(const char *f, int l, const char *op, const char *name, int64_t n, const void *list) {
  if (n <= 0 || list) return NULL;
  return fe_error(KILN_ERR_ARG, f, l, NULL_LIST_MSG, op, name, (long long)n);
}

bool fe_bad_list(const char *f, int l, const char *op, const char *name, int64_t n, const void *list) {
  if (n <= 0 || list) return false;
  char msg[256];
  snprintf(msg, sizeof msg, NULL_LIST_MSG, op, name, (long long)n);
  ir_error_setf("%s:%d: %s", f, l, msg);
  return true;
}

ir_node *fe_check_numel(const char *f, int l, const char *op, int ndim, const int64_t *shape) {
  if (ir_numel(ndim, shape) >= 0) return NULL;
  ir_str s = {0};
  ir_str_shape(&s, ndim, shape);
  ir_node *e = fe_error(KILN_ERR_SHAPE, f, l, "%s: shape %s has more elements than int64 can count", op, s.s);
  ir_str_free(&s);
  return e;
}

bool fe_int_fits(double v, kiln_dtype dt) {
  int bits = 8 * (int)ir_dtypes[dt].size - (ir_dtypes[dt].is_signed ? 1 : 0);
  double lo = ir_dtypes[dt].is_signed ? -ldexp(1, bits) : 0;
  return v >= lo && v < ldexp(1, bits);
}

void fe_describe(ir_str *b, const ir_node *n) {
  ir_str_printf(b, "%s ", ir_dtypes[n->dtype].name);
  ir_str_shape(b, n->ndim, n->shape);
}

const char *fe_device_name(kiln_device d, char *buf) {
  if (d.type == KILN_CPU) return "cpu";
  snprintf(buf, 24, "cuda:%d", d.index);
  return buf;
}

const char *kiln_last_error(void) { return ir_error_get(); }

/* An error node's status surfaces here as well as at realize. */
kiln_status kiln_status_of(kiln_tensor *t) {
  if (!t || !ir_node_live(t)) {
    ir_error_set(t ? "status_of: argument " FE_FREED_MSG : "status_of: argument is NULL");
    return KILN_ERR_ARG;
  }
  if (t->status != KILN_OK) ir_error_set(ir_node_msg(t));
  return t->status;
}

/* ---- eager mode and bounded laziness ------------------------------------ */
static ir_node *realize_or_error(ir_node *n) {
  kiln_status st = rt_realize(1, &n);
  if (st == KILN_OK) return n;
  ir_node *e = fe_locate(ir_node_error(st, NULL, 0, "%s", kiln_last_error()), n->file, n->line);
  ir_node_release(n);
  return e;
}

ir_node *fe_finish(ir_node *n) {
  rt_options *o = rt_opts();
  if (!n) return fe_nomem();
  /* a graph over placeholders has no value to compute: kiln_compile plans it */
  if (n->op == IR_BUFFER || n->status != KILN_OK || n->symbolic) return fe_register(n);
  if (kiln_get_eager()) return fe_register(realize_or_error(n));
  if (n->pending <= o->max_pending) return fe_register(n);
  rt_count(&rt_stats_mut()->auto_realizes, 1);
  if (o->debug >= 1)
    fprintf(stderr, "kiln: realizing at %s:%d: the pending graph holds up to %lld nodes (KILN_MAX_PENDING=%lld)\n",
            n->file ? n->file : "?", n->line, (long long)n->pending, (long long)o->max_pending);
  return fe_register(realize_or_error(n));
}

/* ---- info: never realizes ----------------------------------------------- */
static bool info_null(const ir_node *t, const char *fn) {
  if (!t) ir_error_setf("%s: argument is NULL", fn);
  else if (!ir_node_live(t)) ir_error_setf("%s: argument " FE_FREED_MSG, fn);
  return !t || !ir_node_live(t);
}

int kiln_ndim(kiln_tensor *t) { return info_null(t, "ndim") ? 0 : t->ndim; }
const int64_t *kiln_shape(kiln_tensor *t) { return info_null(t, "shape") ? NULL : t->shape; }
kiln_dtype kiln_dtype_of(kiln_tensor *t) { return info_null(t, "dtype_of") ? KILN_F32 : t->dtype; }

kiln_device kiln_device_of(kiln_tensor *t) {
  return info_null(t, "device_of") ? (kiln_device){KILN_CPU, 0} : t->device;
}

int64_t kiln_numel(kiln_tensor *t) {
  return info_null(t, "numel") ? 0 : ir_numel(t->ndim, t->shape);
}

/* -1 and an error for a dim out of range (PyTorch's IndexError). */
int64_t kiln_size(kiln_tensor *t, int dim) {
  if (info_null(t, "size")) return -1;
  int d = dim < 0 ? dim + t->ndim : dim;
  if (d < 0 || d >= t->ndim) {
    ir_error_setf("size: dim %d is out of range for a tensor of %d dims (expected [%d, %d])",
                  dim, t->ndim, -t->ndim, t->ndim - 1);
    return -1;
  }
  return t->shape[d];
}

const char *kiln_version(void) { return KILN_VERSION_STRING; }

const char *kiln_dtype_name(kiln_dtype d) { return ir_dtype_valid(d) ? ir_dtypes[d].name : "invalid"; }
size_t kiln_dtype_size(kiln_dtype d) { return ir_dtype_valid(d) ? ir_dtypes[d].size : 0; }

ir_node *fe_done(ir_node *result, int n, ir_node **tmp) {
  for (int i = 0; i < n; i++) fe_drop(tmp[i]);
  return result;
}
