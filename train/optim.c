/* optim.c: torch.optim's SGD, Adam and AdamW as graph builders over the
 * parameters, their gradients and the optimizer's state. A step builds
 * every update, realizes them all at once (with the gradients' own pending
 * graphs: the backward and the update fuse) and assigns them in place
 * (frontend/assign.c). The learning rate and the bias corrections are
 * numbers in the graphs, launch arguments of its kernels: a schedule
 * compiles nothing new. */
#include "frontend/frontend.h"
#include "train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum { OPT_SGD, OPT_ADAM, OPT_ADAMW } opt_kind;

struct kiln_optim {
  opt_kind kind;
  int n;
  kiln_tensor **params;     /* retained */
  kiln_tensor **state[2];   /* per parameter: SGD's momentum buffer (with momentum); Adam's exp_avg and exp_avg_sq */
  /* 0-dim f64 tensors the updates read: the learning rate and the steps
   * taken, data rather than numbers, so that a compiled step reads the
   * values of each run (a schedule's kiln_optim_set_lr, the bias
   * corrections of the step count) */
  kiln_tensor *lr, *steps;
  double momentum, dampening, weight_decay, beta1, beta2, eps;
  bool nesterov;
};

/* A new tensor with storage the optimizer's steps overwrite: the
 * optimizer's own reference, in no scope. */
static kiln_tensor *state_of(const char *f, int l, kiln_tensor *like, double v, int ndim, const int64_t *shape) {
  kiln_tensor *t = like ? kiln_zeros_like_at(f, l, like) : kiln_full_at(f, l, ndim, shape, v, KILN_F64);
  bool ok = kiln_realize_at(f, l, t) == KILN_OK;
  if (ok) ir_node_retain(t), fe_mark_assignable(t);
  fe_drop(t);
  return ok ? t : NULL;
}

/* NULL, with "file:line: op: why" as the last error. */
static kiln_optim *make_fail(const char *f, int l, const char *op, const char *why, int i) {
  char msg[200];
  snprintf(msg, sizeof msg, why, i);
  ir_error_setf("%s:%d: %s: %s", f, l, op, msg);
  return NULL;
}

static kiln_optim *make(const char *f, int l, const char *op, opt_kind kind, int n, kiln_tensor *const *params,
                        double lr) {
  if (n < 0 || (n && !params)) return make_fail(f, l, op, "invalid list of %d parameters", n);
  if (!(lr >= 0)) return make_fail(f, l, op, "invalid learning rate (it must be >= 0)%.0d", 0);
  for (int i = 0; i < n; i++) {
    if (!params[i] || !ir_node_live(params[i])) return make_fail(f, l, op, "parameter %d is NULL or released", i);
    if (params[i]->status != KILN_OK) {
      ir_error_set(ir_node_msg(params[i]));
      return NULL;
    }
    if (!ir_is_float(params[i]->dtype) || params[i]->symbolic)
      return make_fail(f, l, op, "parameter %d is not a floating tensor with storage", i);
    for (int j = 0; j < i; j++)
      if (params[j] == params[i]) return make_fail(f, l, op, "parameter %d is given twice", i);
  }
  kiln_optim *o = ir_calloc(1, sizeof *o);
  if (o) {
    o->params = ir_calloc((size_t)n + 1, sizeof *o->params);
    o->state[0] = ir_calloc((size_t)n + 1, sizeof *o->state[0]);
    o->state[1] = ir_calloc((size_t)n + 1, sizeof *o->state[1]);
  }
  if (!o || !o->params || !o->state[0] || !o->state[1]) {
    kiln_optim_free(o);
    return make_fail(f, l, op, "out of memory%.0d", 0);
  }
  *o = (kiln_optim){.kind = kind, .n = n, .params = o->params, .state = {o->state[0], o->state[1]},
                    .lr = state_of(f, l, NULL, lr, 0, NULL), .steps = state_of(f, l, NULL, 0, 0, NULL)};
  bool ok = o->lr && o->steps;
  for (int i = 0; ok && i < n; i++) {
    ok = (params[i]->op == IR_BUFFER ? KILN_OK : kiln_realize_at(f, l, params[i])) == KILN_OK;
    if (!ok) break;
    fe_mark_assignable(params[i]);   /* what is built on a parameter keeps the value it read */
    ir_node_retain(o->params[i] = params[i]);
  }
  if (ok) return o;
  kiln_optim_free(o);
  return NULL;
}

/* The state tensors of each parameter, zeros like it (nstate of them). */
static kiln_optim *with_state(const char *f, int l, kiln_optim *o, int nstate) {
  for (int i = 0; o && i < o->n; i++)
    for (int k = 0; k < nstate; k++)
      if (!(o->state[k][i] = state_of(f, l, o->params[i], 0, 0, NULL))) {
        kiln_optim_free(o);
        return NULL;
      }
  return o;
}

kiln_optim *kiln_sgd_at(const char *f, int l, int n, kiln_tensor *const *params, double lr, double momentum,
                        double dampening, double weight_decay, int nesterov) {
  if (nesterov && (momentum <= 0 || dampening != 0))
    return make_fail(f, l, "sgd", "Nesterov momentum requires a momentum and zero dampening%.0d", 0);
  if (!(momentum >= 0) || !(weight_decay >= 0)) return make_fail(f, l, "sgd", "invalid momentum or weight_decay%.0d", 0);
  kiln_optim *o = make(f, l, "sgd", OPT_SGD, n, params, lr);
  if (o) o->momentum = momentum, o->dampening = dampening, o->weight_decay = weight_decay, o->nesterov = nesterov;
  return with_state(f, l, o, momentum != 0);
}

static kiln_optim *adam(const char *f, int l, const char *op, opt_kind kind, int n, kiln_tensor *const *params,
                        double lr, double beta1, double beta2, double eps, double weight_decay) {
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
    return make_fail(f, l, op, "invalid beta parameter (each must be in [0, 1))%.0d", 0);
  if (!(eps >= 0) || !(weight_decay >= 0)) return make_fail(f, l, op, "invalid epsilon or weight_decay%.0d", 0);
  kiln_optim *o = make(f, l, op, kind, n, params, lr);
  if (o) o->beta1 = beta1, o->beta2 = beta2, o->eps = eps, o->weight_decay = weight_decay;
  return with_state(f, l, o, 2);
}

kiln_optim *kiln_adam_at(const char *f, int l, int n, kiln_tensor *const *params, double lr, double beta1,
                         double beta2, double eps, double weight_decay) {
  return adam(f, l, "adam", OPT_ADAM, n, params, lr, beta1, beta2, eps, weight_decay);
}

kiln_optim *kiln_adamw_at(const char *f, int l, int n, kiln_tensor *const *params, double lr, double beta1,
                          double beta2, double eps, double weight_decay) {
  return adam(f, l, "adamw", OPT_ADAMW, n, params, lr, beta1, beta2, eps, weight_decay);
}

void kiln_optim_set_lr(kiln_optim *o, double lr) {
  if (!o) return;
  kiln_tensor *v = kiln_scalar_at(__FILE__, __LINE__, lr, KILN_F64);
  kiln_assign_at(__FILE__, __LINE__, o->lr, v);   /* a 0-dim tensor that owns its storage: no failure to report */
  fe_drop(v);
}

void kiln_optim_free(kiln_optim *o) {
  if (!o) return;
  for (int i = 0; i < o->n; i++) {
    ir_node_release(o->params ? o->params[i] : NULL);
    for (int s = 0; s < 2; s++) ir_node_release(o->state[s] ? o->state[s][i] : NULL);
  }
  ir_node_release(o->lr);
  ir_node_release(o->steps);
  free(o->params);
  free(o->state[0]);
  free(o->state[1]);
  free(o);
}

/* ---- a step -------------------------------------------------------------- */
/* The new values a step assigns: per parameter, the parameter and its state. */
typedef struct {
  kiln_tensor *to[3];       /* a state tensor, or the parameter */
  kiln_tensor *value[3];
  int n;
} update;

static void assigns(update *u, kiln_tensor *to, kiln_tensor *value) {
  u->to[u->n] = to;
  u->value[u->n++] = value;
}

/* torch.optim.SGD: g += wd p; buf = g at the first step, else momentum buf
 * + (1 - dampening) g; g = g + momentum buf (Nesterov) or buf; p -= lr g. */
static void sgd_update(const char *f, int l, kiln_optim *o, int i, kiln_tensor *g, update *u) {
  kiln_tensor *p = o->params[i];
  if (o->weight_decay) g = kiln_add_at(f, l, g, kiln_muls_at(f, l, p, o->weight_decay));
  if (o->momentum) {
    kiln_tensor *buf = o->state[0][i];
    kiln_tensor *later = kiln_add_at(f, l, kiln_muls_at(f, l, buf, o->momentum), kiln_muls_at(f, l, g, 1 - o->dampening));
    kiln_tensor *nb = kiln_cast_at(f, l, kiln_where_at(f, l, kiln_eqs_at(f, l, o->steps, 0), g, later), p->dtype);
    assigns(u, buf, nb);
    g = o->nesterov ? kiln_add_at(f, l, g, kiln_muls_at(f, l, nb, o->momentum)) : nb;
  }
  assigns(u, p, kiln_sub_at(f, l, p, kiln_mul_at(f, l, g, o->lr)));
}

/* torch.optim.Adam / AdamW (1.13's single-tensor form): AdamW first scales
 * p by 1 - lr wd, Adam adds wd p to g; m = b1 m + (1 - b1) g; v = b2 v + (1
 * - b2) g^2; p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps),
 * the bias corrections computed in f64 from the step count t (as torch does
 * with Python floats) and rounded to p's dtype where they meet it. */
static void adam_update(const char *f, int l, kiln_optim *o, int i, kiln_tensor *g, update *u) {
  kiln_tensor *p = o->params[i], *m = o->state[0][i], *v = o->state[1][i];
  kiln_tensor *t = kiln_adds_at(f, l, o->steps, 1);
  if (o->weight_decay && o->kind == OPT_ADAM) g = kiln_add_at(f, l, g, kiln_muls_at(f, l, p, o->weight_decay));
  kiln_tensor *base = p;
  if (o->weight_decay && o->kind == OPT_ADAMW)
    base = kiln_mul_at(f, l, p, kiln_adds_at(f, l, kiln_muls_at(f, l, o->lr, -o->weight_decay), 1));
  kiln_tensor *nm = kiln_add_at(f, l, kiln_muls_at(f, l, m, o->beta1), kiln_muls_at(f, l, g, 1 - o->beta1));
  kiln_tensor *nv = kiln_add_at(f, l, kiln_muls_at(f, l, v, o->beta2), kiln_muls_at(f, l, kiln_mul_at(f, l, g, g), 1 - o->beta2));
  nm = kiln_cast_at(f, l, nm, p->dtype);
  nv = kiln_cast_at(f, l, nv, p->dtype);
  kiln_tensor *one = kiln_scalar_at(f, l, 1, KILN_F64);
  kiln_tensor *correction1 = kiln_sub_at(f, l, one, kiln_pow_at(f, l, kiln_scalar_at(f, l, o->beta1, KILN_F64), t));
  kiln_tensor *correction2 = kiln_sub_at(f, l, one, kiln_pow_at(f, l, kiln_scalar_at(f, l, o->beta2, KILN_F64), t));
  kiln_tensor *step_size = kiln_div_at(f, l, o->lr, correction1), *root = kiln_sqrt_at(f, l, correction2);
  kiln_tensor *denom = kiln_adds_at(f, l, kiln_div_at(f, l, kiln_sqrt_at(f, l, nv), root), o->eps);
  assigns(u, m, nm);
  assigns(u, v, nv);
  assigns(u, p, kiln_sub_at(f, l, base, kiln_mul_at(f, l, kiln_div_at(f, l, nm, denom), step_size)));
}

static kiln_status check_grads(const char *f, int l, const kiln_optim *o, kiln_tensor *const *grads) {
  if (!o || (o->n && !grads)) {
    ir_error_setf("%s:%d: optim_step: %s is NULL", f, l, o ? "the gradient list" : "the optimizer");
    return KILN_ERR_ARG;
  }
  for (int i = 0; i < o->n; i++) {
    const kiln_tensor *g = grads[i], *p = o->params[i];
    if (!g) continue;   /* no gradient: the parameter is left as it is (torch's p.grad None) */
    if (!ir_node_live(g) || g->status != KILN_OK) {
      if (ir_node_live(g)) ir_error_set(ir_node_msg(g));
      else ir_error_setf("%s:%d: optim_step: gradient %d " FE_FREED_MSG, f, l, i);
      return ir_node_live(g) ? g->status : KILN_ERR_ARG;
    }
    bool same = g->ndim == p->ndim && !memcmp(g->shape, p->shape, sizeof(int64_t) * (size_t)p->ndim) &&
                g->device.type == p->device.type && g->device.index == p->device.index;
    if (!same || !ir_is_float(g->dtype)) {
      ir_str a = {0}, b = {0};
      fe_describe(&a, g);
      fe_describe(&b, p);
      ir_error_setf("%s:%d: optim_step: gradient %d is %s, its parameter %s", f, l, i, a.s ? a.s : "?", b.s ? b.s : "?");
      ir_str_free(&a);
      ir_str_free(&b);
      return KILN_ERR_SHAPE;
    }
  }
  return KILN_OK;
}

kiln_status kiln_optim_step_at(const char *f, int l, kiln_optim *o, kiln_tensor *const *grads) {
  kiln_status st = check_grads(f, l, o, grads);
  if (st != KILN_OK) return st;
  update *u = ir_calloc((size_t)o->n + 2, sizeof *u);
  kiln_tensor **all = ir_calloc(3 * (size_t)o->n + 2, sizeof *all);
  if (!u || !all) {
    free(u);
    free(all);
    ir_error_setf("%s:%d: optim_step: out of memory", f, l);
    return KILN_ERR_MEMORY;
  }
  int nall = 0;
  bool symbolic = false;
  kiln_scope_begin();   /* holds the new values: each computed, then taken by its tensor */
  kiln_scope_begin();   /* holds what builds them, gone before the assignments (nothing left reading the old values) */
  for (int i = 0; i < o->n; i++) {
    if (!grads[i]) continue;
    if (o->kind == OPT_SGD) sgd_update(f, l, o, i, grads[i], &u[i]);
    else adam_update(f, l, o, i, grads[i], &u[i]);
    for (int k = 0; k < u[i].n; k++) all[nall++] = u[i].value[k], symbolic |= u[i].value[k]->symbolic;
  }
  assigns(&u[o->n], o->steps, all[nall++] = kiln_adds_at(f, l, o->steps, 1));
  /* every update (and the gradients' graphs) in one plan; with gradients over
   * placeholders, the assignments are the step kiln_compile makes of them */
  st = symbolic ? KILN_OK : kiln_realize_n_at(f, l, nall, all);
  for (int i = 0; i <= o->n; i++)
    for (int k = 0; k < u[i].n; k++)
      u[i].value[k] = kiln_keep(st != KILN_OK ? NULL : symbolic ? fe_same(u[i].value[k]) : kiln_detach_at(f, l, u[i].value[k]));
  kiln_scope_end();
  for (int i = 0; st == KILN_OK && i <= o->n; i++)
    for (int k = 0; k < u[i].n && st == KILN_OK; k++) st = fe_assign(f, l, u[i].to[k], u[i].value[k], true, symbolic);
  kiln_scope_end();
  free(u);
  free(all);
  return st;
}

/* ---- gradient clipping ----------------------------------------------------- */
kiln_tensor *kiln_clip_grad_norm_at(const char *f, int l, int n, kiln_tensor **grads, double max_norm, double norm_type) {
  if (n <= 0 || !grads) return fe_error(KILN_ERR_ARG, f, l, "clip_grad_norm: invalid list of %d gradients", n);
  for (int i = 0; i < n; i++) {
    ir_node *e = fe_check_arg(f, l, "clip_grad_norm", grads[i], i + 1);
    if (e) return e;
  }
  const char *prev = ir_api_push("clip_grad_norm");
  kiln_scope_begin();
  kiln_tensor *total = NULL;
  for (int i = 0; i < n; i++) {   /* torch: the norm of the per-gradient norms */
    kiln_tensor *g = kiln_cast_at(f, l, grads[i], KILN_F32);
    kiln_tensor *part = isinf(norm_type) ? kiln_max_at(f, l, kiln_abs_at(f, l, g))
                                         : kiln_sum_at(f, l, kiln_pow_at(f, l, kiln_abs_at(f, l, g), kiln_scalar_at(f, l, norm_type, KILN_F32)));
    total = !total ? part : isinf(norm_type) ? kiln_maximum_at(f, l, total, part) : kiln_add_at(f, l, total, part);
  }
  if (!isinf(norm_type)) total = kiln_pows_at(f, l, total, 1 / norm_type);
  kiln_tensor *coef = kiln_clamp_at(f, l, kiln_div_at(f, l, kiln_scalar_at(f, l, max_norm, KILN_F32), kiln_adds_at(f, l, total, 1e-6)),
                                    -INFINITY, 1);
  for (int i = 0; i < n; i++) {
    kiln_tensor *scaled = kiln_keep(kiln_mul_at(f, l, grads[i], kiln_cast_at(f, l, coef, grads[i]->dtype)));
    kiln_release_at(f, l, grads[i]);
    grads[i] = scaled;
  }
  total = kiln_keep(total);
  kiln_scope_end();
  ir_api_pop(prev);
  return total;
}
