/* test_random_graphs.c: differential testing on random well-typed DAGs of
 * elementwise ops, broadcasting, scalar forms, casts, constants and random
 * sources over f32/f64/i32/i64/f16/bool and odd shapes: every graph is run
 * fused and eager and both are compared with the reference evaluator.
 *
 * Each graph is a small program (a list of instructions) so it can be built
 * again for the eager run and for the reproduction printed on failure. The
 * generator tracks, per value, a bound on its magnitude, a bound on how far
 * a correct implementation may drift from the oracle (rounding, f32
 * intermediates of fused f16 chains, FMA contraction, polynomial
 * transcendentals), and whether every implementation must give exact bits.
 * What it leaves out, and why:
 * - pow: amplifies drift without bound and makes NaN of negative bases.
 * - log, sqrt, rsqrt, reciprocal, div only see operands >= 1 (built as
 *   abs(x) + 1): near a pole or a branch point a rounding difference of 1e-7
 *   becomes any difference at all. exp only sees |x| <= 4.
 * - comparisons, logical ops, floor/ceil/round/sign and float->int/bool casts
 *   only see exact values: a drift of one ulp flips a discontinuous result.
 * - values stay within |x| <= 1000 (ops that would exceed it are not chosen),
 *   so f16 never overflows and the drift bounds stay meaningful. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "util/testutil.h"

/* One process runs all graphs so that eager kernels (one op on a shape from a
 * small set) come from the kernel cache after the first few graphs. */
enum { GRAPHS = 500, MAX_INSTR = 64 };
#define MAG_LIMIT 1000.0
#define DEFAULT_SEED 0x6b696c6eu   /* "kiln"; override with KILN_TEST_SEED */

typedef struct { int ndim; int64_t d[KILN_MAX_DIMS]; } shape_t;

typedef enum { P_DATA, P_FULL, P_RAND, P_RANDN, P_RANDINT, P_UNARY, P_BINARY, P_SCALAR, P_WHERE, P_CLAMP, P_CAST } pkind;

typedef struct {
  pkind kind;
  ir_op op;             /* P_UNARY, P_BINARY, P_SCALAR */
  int a, b, c;          /* operands: earlier instructions */
  kiln_dtype dt;        /* leaves: dtype; P_CAST: target */
  shape_t shape;        /* leaves */
  double s, s2;         /* P_SCALAR number, P_FULL value, P_CLAMP bounds */
  uint64_t seed;        /* P_DATA */
} instr;

typedef struct {
  double mag;           /* bound on |value| */
  double err;           /* bound on |implementation - oracle| */
  bool exact;           /* all implementations give these exact bits */
  kiln_dtype dt;
} info;

typedef struct {
  int n;
  instr ins[MAX_INSTR];
  info inf[MAX_INSTR];
  kiln_tensor *t[MAX_INSTR];   /* while generating: the lazy nodes */
  shape_t out;                 /* every value broadcasts to this shape */
  uint64_t rng;
} program;

/* ---- building ------------------------------------------------------------- */
static kiln_tensor *instantiate(const instr *in, kiln_tensor *const *t) {
  switch (in->kind) {
  case P_DATA: return tu_data(in->dt, in->shape.ndim, in->shape.d, in->seed, TU_SMALL);
  case P_FULL: return kiln_full(in->shape.ndim, in->shape.d, in->s, in->dt);
  case P_RAND: return kiln_rand(in->shape.ndim, in->shape.d, in->dt);
  case P_RANDN: return kiln_randn(in->shape.ndim, in->shape.d, in->dt);
  case P_RANDINT: return kiln_randint(-5, 6, in->shape.ndim, in->shape.d, in->dt);
  case P_UNARY: return tu_unary(in->op)(__FILE__, __LINE__, t[in->a]);
  case P_BINARY: return tu_binary(in->op)(__FILE__, __LINE__, t[in->a], t[in->b]);
  case P_SCALAR: return tu_scalar(in->op)(__FILE__, __LINE__, t[in->a], in->s);
  case P_WHERE: return kiln_where(t[in->a], t[in->b], t[in->c]);
  case P_CLAMP: return kiln_clamp(t[in->a], in->s, in->s2);
  default: return kiln_cast(t[in->a], in->dt);
  }
}

/* tu_build_fn: the whole program again; the last instruction is the result. */
static kiln_tensor *build_program(const void *ctx) {
  const program *p = ctx;
  kiln_tensor *t[MAX_INSTR];
  for (int k = 0; k < p->n; k++) t[k] = instantiate(&p->ins[k], t);
  return t[p->n - 1];
}

/* ---- drift bounds ----------------------------------------------------------- */
/* Half an ulp relative to the magnitude (0 for integers and bool). */
static double unit(kiln_dtype dt) {
  switch (dt) {
  case KILN_F16: return 0x1p-11;
  case KILN_BF16: return 0x1p-8;
  case KILN_F32: return 0x1p-24;
  case KILN_F64: return 0x1p-53;
  default: return 0;
  }
}

static bool transcendental(ir_op op) {
  return op == IR_EXP || op == IR_LOG || op == IR_SIN || op == IR_COS || op == IR_TANH ||
         op == IR_SIGMOID || op == IR_GELU || op == IR_SILU;
}

/* Rounding drift of one op's result in half-ulps: a few more for polynomial
 * transcendentals and for results reached through a reciprocal. */
static double rounding_ulps(ir_op op) {
  return transcendental(op) ? 16 : op == IR_SQRT || op == IR_RSQRT || op == IR_RECIPROCAL || op == IR_DIV ? 4 : 2;
}

/* Ops whose result is exact when their operands are. */
static bool keeps_exact(ir_op op) {
  switch (op) {
  case IR_NEG: case IR_ABS: case IR_RELU: case IR_FLOOR: case IR_CEIL: case IR_ROUND: case IR_SIGN:
  case IR_LOGICAL_NOT: case IR_MAXIMUM: case IR_MINIMUM: case IR_EQ: case IR_NE: case IR_LT: case IR_LE:
  case IR_GT: case IR_GE: case IR_LOGICAL_AND: case IR_LOGICAL_OR:
    return true;
  default:
    return false;
  }
}

/* Ops that only take exact operands (their result jumps). */
static bool needs_exact(ir_op op) {
  return op == IR_FLOOR || op == IR_CEIL || op == IR_ROUND || op == IR_SIGN || op == IR_LOGICAL_NOT ||
         ir_ops[op].typing == TR_BOOL;
}

/* Magnitude and Lipschitz bound of a unary op on values bounded by m (log,
 * sqrt, rsqrt and reciprocal see operands >= 1). */
static void unary_bounds(ir_op op, double m, double *mag, double *lip) {
  *lip = 1;
  *mag = m;
  switch (op) {
  case IR_EXP: *mag = *lip = exp(m); break;
  case IR_LOG: *mag = log(m); break;
  case IR_SQRT: *mag = sqrt(m), *lip = 0.5; break;
  case IR_RSQRT: *mag = 1, *lip = 0.5; break;
  case IR_SIN: case IR_COS: case IR_TANH: case IR_RECIPROCAL: case IR_LOGICAL_NOT: case IR_SIGN: *mag = 1; break;
  case IR_SIGMOID: *mag = 1, *lip = 0.25; break;
  case IR_GELU: case IR_SILU: *lip = 1.13; break;
  case IR_FLOOR: case IR_CEIL: case IR_ROUND: *mag = m + 1; break;
  default: break;
  }
}

/* Magnitude and drift of a binary op (b may be a number: err 0). */
static void binary_bounds(ir_op op, const info *a, const info *b, double *mag, double *err) {
  switch (op) {
  case IR_ADD: case IR_SUB: *mag = a->mag + b->mag, *err = a->err + b->err; break;
  case IR_MUL: *mag = a->mag * b->mag, *err = a->err * b->mag + b->err * a->mag + a->err * b->err; break;
  case IR_DIV: *mag = a->mag, *err = a->err + a->mag * b->err; break;   /* |b| >= 1 */
  case IR_MAXIMUM: case IR_MINIMUM: *mag = fmax(a->mag, b->mag), *err = fmax(a->err, b->err); break;
  default: *mag = 1, *err = 0; break;   /* comparisons and logical ops of exact values */
  }
}

/* ---- generation ------------------------------------------------------------- */
/* Appends in, builds it on the lazy graph, records what is known of it:
 * err is the drift inherited from the operands; the op adds its own rounding
 * (ulps half-ulps of the result dtype) plus two for converting operands.
 * exact_if_int: the result is exact when it is an integer or bool. */
static int emit(program *p, instr in, double mag, double err, double ulps, bool exact, bool exact_if_int) {
  IR_ASSERT(p->n < MAX_INSTR);
  int k = p->n++;
  p->ins[k] = in;
  p->t[k] = instantiate(&in, p->t);
  kiln_dtype dt = kiln_dtype_of(p->t[k]);
  exact = exact || (exact_if_int && !ir_is_float(dt));
  /* a fused chain may keep a narrow cast in f32: not exact */
  if (in.kind == P_CAST && (dt == KILN_F16 || dt == KILN_BF16)) exact = false;
  p->inf[k] = (info){mag, exact ? 0 : err + (ulps + 2) * unit(dt) * mag, exact, dt};
  return k;
}

static const kiln_dtype leaf_dtypes[] = {KILN_F32, KILN_F64, KILN_I32, KILN_I64, KILN_F16, KILN_BOOL};
static const shape_t out_shapes[] = {{1, {1}}, {2, {3, 5}}, {3, {2, 1, 7}}, {2, {0, 3}}, {1, {257}}};

/* A shape that broadcasts to p->out: leading dims dropped, some dims 1. */
static shape_t sub_shape(program *p) {
  shape_t s = {0, {0}};
  int drop = tu_below(&p->rng, 4) ? 0 : 1 + tu_below(&p->rng, p->out.ndim);   /* mostly full rank */
  for (int d = drop; d < p->out.ndim; d++) s.d[s.ndim++] = tu_below(&p->rng, 6) ? p->out.d[d] : 1;
  return s;
}

static int gen_leaf(program *p) {
  instr in = {.shape = sub_shape(p), .seed = tu_next(&p->rng)};
  int pick = tu_below(&p->rng, 10);
  if (pick < 5) {
    in.kind = P_DATA, in.dt = leaf_dtypes[tu_below(&p->rng, 6)];
    return emit(p, in, in.dt == KILN_BOOL ? 1 : 4, 0, 0, true, true);
  }
  if (pick < 7) {
    static const double values[] = {1, -2, 0.5};
    in.kind = P_FULL, in.dt = leaf_dtypes[tu_below(&p->rng, 6)], in.s = values[tu_below(&p->rng, 3)];
    if (!ir_is_float(in.dt)) in.s = trunc(in.s);
    return emit(p, in, fmax(fabs(in.s), 1), 0, 0, true, true);
  }
  if (pick == 7) {
    in.kind = P_RAND, in.dt = (kiln_dtype[]){KILN_F32, KILN_F64, KILN_F16}[tu_below(&p->rng, 3)];
    return emit(p, in, 1, 0, 0, true, true);
  }
  if (pick == 8) {
    in.kind = P_RANDINT, in.dt = tu_below(&p->rng, 2) ? KILN_I32 : KILN_I64;
    return emit(p, in, 5, 0, 0, true, true);
  }
  /* randn: log and cos are polynomials in the kernel; |z| < 9 */
  in.kind = P_RANDN, in.dt = tu_below(&p->rng, 2) ? KILN_F32 : KILN_F64;
  return emit(p, in, 9, 9 * (in.dt == KILN_F32 ? 2e-5 : 1e-12), 0, false, false);
}

/* An operand, usually a recent value so chains grow deep. */
static int pick(program *p) {
  if (tu_below(&p->rng, 10) < 7) return p->n - 1 - tu_below(&p->rng, p->n < 3 ? p->n : 3);
  return tu_below(&p->rng, p->n);
}

/* An exact operand if there is one (-1 otherwise). */
static int pick_exact(program *p) {
  for (int tries = 0; tries < 8; tries++) {
    int k = pick(p);
    if (p->inf[k].exact) return k;
  }
  return -1;
}

static int gen_unary(program *p, ir_op op, int a) {
  const info *x = &p->inf[a];
  double mag, lip;
  unary_bounds(op, x->mag, &mag, &lip);
  if (ir_op_has(op, IR_NOBOOL) && x->dt == KILN_BOOL) return -1;
  if ((op == IR_EXP && x->mag > 4) || mag > MAG_LIMIT || (needs_exact(op) && !x->exact)) return -1;
  instr in = {.kind = P_UNARY, .op = op, .a = a};
  return emit(p, in, mag, lip * x->err, rounding_ulps(op), x->exact && keeps_exact(op), x->exact);
}

/* |x| + 1 (x is |x| already): an operand >= 1. */
static int add_one(program *p, int a) {
  const info *x = &p->inf[a];
  return emit(p, (instr){.kind = P_SCALAR, .op = IR_ADD, .a = a, .s = 1}, x->mag + 1, x->err,
              rounding_ulps(IR_ADD), false, x->exact);
}

/* f(|x| + 1): log, sqrt, rsqrt, reciprocal away from their poles. */
static int gen_shifted(program *p, ir_op op, int a) {
  if (p->inf[a].dt == KILN_BOOL || p->n + 3 > MAX_INSTR) return -1;
  int abs = gen_unary(p, IR_ABS, a);
  if (abs < 0) return -1;
  return gen_unary(p, op, add_one(p, abs));
}

static int gen_binary(program *p, ir_op op, int a, int b) {
  const info *x = &p->inf[a], *y = &p->inf[b];
  if (ir_op_has(op, IR_NOBOOL) && (x->dt == KILN_BOOL || y->dt == KILN_BOOL)) return -1;
  if (needs_exact(op) && !(x->exact && y->exact)) return -1;
  double mag, err;
  binary_bounds(op, x, y, &mag, &err);
  if (mag > MAG_LIMIT) return -1;
  bool exact = x->exact && y->exact;
  return emit(p, (instr){.kind = P_BINARY, .op = op, .a = a, .b = b}, mag, err, rounding_ulps(op),
              exact && keeps_exact(op), exact);
}

/* a / (|b| + 1) */
static int gen_div(program *p, int a, int b) {
  if (p->inf[b].dt == KILN_BOOL || p->inf[a].dt == KILN_BOOL || p->n + 3 > MAX_INSTR) return -1;
  int abs = gen_unary(p, IR_ABS, b);
  if (abs < 0) return -1;
  return gen_binary(p, IR_DIV, a, add_one(p, abs));
}

static int gen_scalar(program *p, ir_op op, int a) {
  static const double numbers[] = {2, 0.5, -1.5};
  double s = numbers[tu_below(&p->rng, 3)];
  const info *x = &p->inf[a];
  if (ir_op_has(op, IR_NOBOOL) && x->dt == KILN_BOOL) return -1;
  if (needs_exact(op) && !x->exact) return -1;
  info num = {fabs(s), 0, true, tu_number_dtype(s)};
  double mag, err;
  binary_bounds(op, x, &num, &mag, &err);
  if (mag > MAG_LIMIT) return -1;
  return emit(p, (instr){.kind = P_SCALAR, .op = op, .a = a, .s = s}, mag, err, rounding_ulps(op),
              x->exact && keeps_exact(op), x->exact);
}

static int gen_where(program *p) {
  int c = pick_exact(p);
  if (c < 0) return -1;
  if (p->inf[c].dt != KILN_BOOL) {   /* a condition from an exact value */
    c = gen_scalar(p, IR_GT, c);
    if (c < 0) return -1;
  }
  int a = pick(p), b = pick(p);
  const info *x = &p->inf[a], *y = &p->inf[b];
  return emit(p, (instr){.kind = P_WHERE, .a = c, .b = a, .c = b}, fmax(x->mag, y->mag),
              fmax(x->err, y->err), 0, x->exact && y->exact, false);
}

static int gen_clamp(program *p, int a) {
  static const double bounds[][2] = {{-2, 2}, {0, 3}, {-1.5, 2.5}};
  const double *bd = bounds[tu_below(&p->rng, 3)];
  const info *x = &p->inf[a];
  if (x->dt == KILN_BOOL) return -1;
  return emit(p, (instr){.kind = P_CLAMP, .a = a, .s = bd[0], .s2 = bd[1]}, fmin(x->mag, 3), x->err, 0,
              x->exact, false);
}

static int gen_cast(program *p, int a) {
  kiln_dtype to = leaf_dtypes[tu_below(&p->rng, 6)];
  const info *x = &p->inf[a];
  if (!ir_is_float(to) && ir_is_float(x->dt) && !x->exact) return -1;
  double mag = to == KILN_BOOL ? 1 : x->mag;
  return emit(p, (instr){.kind = P_CAST, .a = a, .dt = to}, mag, x->err, 0, x->exact, false);
}

static const ir_op unary_pool[] = {IR_NEG, IR_ABS, IR_EXP, IR_SIN, IR_COS, IR_TANH, IR_SIGMOID, IR_RELU,
                                   IR_GELU, IR_SILU, IR_FLOOR, IR_CEIL, IR_ROUND, IR_SIGN, IR_LOGICAL_NOT};
static const ir_op shifted_pool[] = {IR_LOG, IR_SQRT, IR_RSQRT, IR_RECIPROCAL};
static const ir_op binary_pool[] = {IR_ADD, IR_SUB, IR_MUL, IR_MAXIMUM, IR_MINIMUM, IR_EQ, IR_NE,
                                    IR_LT, IR_LE, IR_GT, IR_GE, IR_LOGICAL_AND, IR_LOGICAL_OR};
#define POOL(x) x[tu_below(&p->rng, (int)(sizeof x / sizeof *x))]

/* One step: an op on earlier values (or -1 when the pick was not valid). */
static int gen_step(program *p) {
  switch (tu_below(&p->rng, 9)) {
  case 0: case 1: return gen_unary(p, POOL(unary_pool), pick(p));
  case 2: return gen_shifted(p, POOL(shifted_pool), pick(p));
  case 3: case 4: return gen_binary(p, POOL(binary_pool), pick(p), pick(p));
  case 5: return tu_below(&p->rng, 2) ? gen_div(p, pick(p), pick(p)) : gen_scalar(p, POOL(binary_pool), pick(p));
  case 6: return gen_where(p);
  case 7: return gen_clamp(p, pick(p));
  default: return gen_cast(p, pick(p));
  }
}

/* A random program; its lazy nodes are released by the caller's scope. */
static void generate(program *p, uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->rng = seed;
  p->out = out_shapes[tu_below(&p->rng, (int)(sizeof out_shapes / sizeof *out_shapes))];
  int leaves = 2 + tu_below(&p->rng, 3), steps = 3 + tu_below(&p->rng, 9);
  for (int i = 0; i < leaves; i++) gen_leaf(p);
  for (int i = 0, tries = 0; i < steps && tries < 60 && p->n < MAX_INSTR - 8; tries++)
    i += gen_step(p) >= 0;
}

/* ---- the test ------------------------------------------------------------------ */
static uint64_t base_seed(void) {
  const char *s = getenv("KILN_TEST_SEED");
  return s && *s ? strtoull(s, NULL, 0) : DEFAULT_SEED;
}

/* The graph's text, built again lazily (the checked one was realized). */
static char *graph_text(const program *p) {
  kiln_scope_begin();
  int was = kiln_get_eager();
  kiln_set_eager(0);
  kiln_manual_seed(20240611);
  kiln_tensor *root = build_program(p);
  ir_node **topo;
  int n = ir_graph_collect(1, &root, &topo);
  ir_str b = {0};
  ir_graph_print(&b, n, topo);
  free(topo);
  kiln_set_eager(was);
  kiln_scope_end();
  return b.s;
}

/* Generates, checks fused and eager against the oracle; on failure prints
 * what reproduces it. */
static bool check_graph(uint64_t seed, int g) {
  program *p = malloc(sizeof *p);
  IR_ASSERT(p);
  kiln_scope_begin();
  generate(p, seed);
  kiln_scope_end();
  const info *r = &p->inf[p->n - 1];
  char why[1200];
  bool ok = tu_check_fused_eager(build_program, p, r->dt, (ref_tol){0, 2 * r->err}, why, sizeof why);
  if (!ok) {
    char *text = graph_text(p);
    fprintf(stderr, "random graph %d failed (KILN_TEST_SEED=%#" PRIx64 ", graph seed %#" PRIx64
            "): %s\nallowed drift %g\n%s\n", g, base_seed(), seed, why, 2 * r->err, text ? text : "");
    free(text);
  }
  free(p);
  return ok;
}

START_TEST(random_graphs) {
  uint64_t st = base_seed();
  fprintf(stderr, "random graphs: KILN_TEST_SEED=%#" PRIx64 "\n", base_seed());
  int failed = 0;
  for (int g = 0; g < GRAPHS; g++) failed += !check_graph(tu_next(&st), g);
  ck_assert_msg(failed == 0, "%d of %d random graphs differ (see stderr)", failed, GRAPHS);
}
END_TEST

/* The generator must produce what the header promises, or the differential
 * test checks less than it claims. */
START_TEST(generator_covers_its_pool) {
  uint64_t st = base_seed();
  int kinds[P_CAST + 1] = {0}, dtypes[KILN_NUM_DTYPES] = {0}, longest = 0;
  program *p = malloc(sizeof *p);
  IR_ASSERT(p);
  for (int g = 0; g < 200; g++) {
    kiln_scope_begin();
    generate(p, tu_next(&st));
    kiln_scope_end();
    for (int k = 0; k < p->n; k++) kinds[p->ins[k].kind]++, dtypes[p->inf[k].dt]++;
    if (p->n > longest) longest = p->n;
  }
  free(p);
  for (int k = 0; k <= P_CAST; k++) ck_assert_msg(kinds[k] > 0, "instruction kind %d never generated", k);
  for (size_t d = 0; d < sizeof leaf_dtypes / sizeof *leaf_dtypes; d++)
    ck_assert_msg(dtypes[leaf_dtypes[d]] > 0, "dtype %s never generated", ir_dtypes[leaf_dtypes[d]].name);
  ck_assert_int_ge(longest, 12);
}
END_TEST

static Suite *random_graphs_suite(void) {
  Suite *s = suite_create("random_graphs");
  TCase *tc = tcase_create("graphs");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, generator_covers_its_pool);
  tcase_add_test(tc, random_graphs);
  suite_add_tcase(s, tc);
  return s;
}

KILN_TEST_MAIN(random_graphs_suite)
