/* emit.c: kernel IR -> CUDA C. Three mappings of the work to threads:
 * - one thread per iteration: the parallel loop, flattened with the loops
 *   perfectly nested in it, becomes a grid-stride loop; inner loops and
 *   reductions run inside the thread. Elementwise kernels, and reductions
 *   whose loads are contiguous along the innermost of those loops (column
 *   sums: neighbouring threads read neighbouring elements). An elementwise
 *   kernel whose loads and stores are at the flat index (plus a constant)
 *   first runs groups of iterations per thread with 128-bit vector loads
 *   and stores, where the addresses are aligned.
 * - one block per iteration (a "row"): when the iteration holds reductions
 *   over a row, the block's threads stride over each reduction's loop and
 *   combine their partial accumulators (prelude.cuh's kiln_block_fold:
 *   warp shuffles, then shared memory), every thread gets the result, and
 *   the loops after it (softmax's normalising store loop) are split across
 *   the threads too. A kernel without a parallel loop (a full reduction) is
 *   one such row: on one block, or, when it is one long reduction and its
 *   epilogue, on the whole grid (each block's partial result goes through
 *   the kernel's scratch to the last block to finish; cuda.h).
 * - a fused attention (KS_ATTN): one block per block of query rows of one
 *   (batch, head), which calls attention.cuh's kiln_attention (a thread a
 *   query row, key and value tiles in shared memory).
 * Accumulators are locals of the thread, expressions `const` temporaries
 * named by their id (hash-consing makes them shared). Elementwise ops come
 * from one template table with the CPU back end's exact semantics
 * (codegen_cpu/emit.c); the math and Philox live in the prelude. */
#include "codegen_cuda/cuda.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_BLOCK 256        /* threads per block, one thread per iteration */
#define CUDA_ROW_BLOCK 256    /* most threads per block for a row of many rows,
                                 and the blocks of a grid-wide reduction */
#define CUDA_ONE_BLOCK 1024   /* ... and for a kernel that is one row on one block */
#define CUDA_GRID_ITEMS 16    /* elements per thread before a reduction takes
                                 another block */
#define VEC_BYTES 16          /* a vector load or store moves 128 bits */
#define MAX_CHAIN (2 * KILN_MAX_DIMS)

typedef struct {
  kernel *k;
  ir_str *out;
  bool block_wide;      /* the statements being emitted run on every thread of
                           the block alike (a row's uniform level) */
  int *acc_stamp, stamp;   /* by accumulator: declared inside the loop being classified */
  unsigned char *seen;  /* by expr id: visited by the current walk */
  int depth;            /* indentation */
  bool *done;           /* by expr id: its temporary is declared and in scope */
  int *defined, ndefined;  /* declared ids in order, so a loop forgets its own */
  signed char *reads_acc;  /* by expr id: -1 unknown, else whether it reads an accumulator */
  int fresh;            /* numbers the recomputed (accumulator-reading) temporaries */
  const kstmt *grid_loop;  /* the reduction loop the whole grid splits, if any */
  const kstmt *grid_body;  /* the statements around it (the one iteration) */
  bool *vec;            /* by expr id: a load the vector path moves by vectors */
  const kexpr **vloads; /* those loads, nvloads of them */
  int nvloads;
  bool lanes;           /* emitting the lanes of a vector group */
  int nstore;           /* numbers the stores of the lanes */
  /* room for outer_updates' lists (k->naccs each), made with the emitter so
   * that emitting allocates nothing but text: the one split_loop and
   * grid_slots look at, the one emit_split folds after its loop (splits do
   * not nest: their bodies are not block-wide), the grid loop's, and its
   * accumulators */
  const kstmt **outer, **split_outer, **grid_outer;
  int *grid_accs;
} cuda_em;

/* ---- types -------------------------------------------------------------- */
static const char *ctype(kiln_dtype t) {  /* compute type */
  static const char *const names[KILN_NUM_DTYPES] = {
    [KILN_BOOL] = "bool", [KILN_U8] = "unsigned char", [KILN_I8] = "signed char",
    [KILN_I16] = "short", [KILN_I32] = "int", [KILN_I64] = "long long",
    [KILN_F16] = "float", [KILN_BF16] = "float", [KILN_F32] = "float", [KILN_F64] = "double"};
  return names[t];
}

static const char *stype(kiln_dtype t) {  /* storage type */
  if (t == KILN_BOOL) return "unsigned char";
  if (t == KILN_F16 || t == KILN_BF16) return "unsigned short";
  return ctype(t);
}

/* The unsigned type integer arithmetic wraps in (C's signed overflow is UB). */
static const char *wtype(kiln_dtype t) { return t == KILN_I64 ? "unsigned long long" : "unsigned"; }

/* Saturation bounds of float -> integer casts, as literals of the type. */
static const char *const int_lo[KILN_NUM_DTYPES] = {
  [KILN_U8] = "0", [KILN_I8] = "-128", [KILN_I16] = "-32768",
  [KILN_I32] = "-2147483647 - 1", [KILN_I64] = "-9223372036854775807LL - 1"};
static const char *const int_hi[KILN_NUM_DTYPES] = {
  [KILN_U8] = "255", [KILN_I8] = "127", [KILN_I16] = "32767",
  [KILN_I32] = "2147483647", [KILN_I64] = "9223372036854775807LL"};

/* ---- templates ---------------------------------------------------------- */
/* Expands tmpl: $T the operands' C type, $W its wrapping unsigned type, $f
 * the libm suffix ("f" for f32), $a $b $c the operands. */
static void expand(ir_str *o, const char *tmpl, kiln_dtype t, const char *a, const char *b, const char *c) {
  for (const char *p = tmpl; *p; p++) {
    if (*p != '$') {
      ir_str_append(o, p, 1);
      continue;
    }
    switch (*++p) {
    case 'T': ir_str_printf(o, "%s", ctype(t)); break;
    case 'W': ir_str_printf(o, "%s", wtype(t)); break;
    case 'f': ir_str_printf(o, "%s", t == KILN_F64 ? "" : "f"); break;
    case 'a': ir_str_printf(o, "%s", a); break;
    case 'b': ir_str_printf(o, "%s", b); break;
    case 'c': ir_str_printf(o, "%s", c); break;
    default: IR_ASSERT(!"bad template");
    }
  }
}

/* One row per elementwise op: its C by operand kind (float, signed and
 * unsigned integer, bool); NULL where ops.def rules the kind out. */
typedef struct { const char *fl, *si, *ui, *bo; } op_tmpl;

#define WRAP(op) "(($T)(($W)$a " op " ($W)$b))"
#define SAME4(s) {s, s, s, s}
static const op_tmpl op_tmpls[IR_NUM_OPS] = {
  [IR_NEG] = {"(-$a)", "(($T)-($W)$a)", "(($T)-($W)$a)", NULL},
  [IR_ABS] = {"fabs$f($a)", "(($T)($a < 0 ? -($W)$a : ($W)$a))", "$a", NULL},
  [IR_EXP] = {"kiln_exp$f($a)"}, [IR_LOG] = {"kiln_log$f($a)"},
  [IR_SQRT] = {"sqrt$f($a)"}, [IR_RSQRT] = {"(($T)1 / sqrt$f($a))"},
  [IR_SIN] = {"kiln_sin$f($a)"}, [IR_COS] = {"kiln_cos$f($a)"}, [IR_TANH] = {"kiln_tanh$f($a)"},
  [IR_SIGMOID] = {"kiln_sigmoid$f($a)"}, [IR_GELU] = {"kiln_gelu$f($a)"}, [IR_SILU] = {"kiln_silu$f($a)"},
  [IR_GELU_TANH] = {"kiln_gelu_tanh$f($a)"},
  [IR_ERF] = {"kiln_erf$f($a)"}, [IR_ERFC] = {"kiln_erfc$f($a)"}, [IR_EXPM1] = {"kiln_expm1$f($a)"},
  [IR_LOG1P] = {"kiln_log1p$f($a)"}, [IR_LOG2] = {"kiln_log2$f($a)"}, [IR_LOG10] = {"kiln_log10$f($a)"},
  [IR_EXP2] = {"kiln_exp2$f($a)"}, [IR_TAN] = {"kiln_tan$f($a)"}, [IR_ASIN] = {"kiln_asin$f($a)"},
  [IR_ACOS] = {"kiln_acos$f($a)"}, [IR_ATAN] = {"kiln_atan$f($a)"}, [IR_SINH] = {"kiln_sinh$f($a)"},
  [IR_COSH] = {"kiln_cosh$f($a)"}, [IR_ASINH] = {"kiln_asinh$f($a)"}, [IR_ACOSH] = {"kiln_acosh$f($a)"},
  [IR_ATANH] = {"kiln_atanh$f($a)"}, [IR_ATAN2] = {"kiln_atan2$f($a, $b)"},
  [IR_RELU] = {"($a < 0 ? ($T)0 : $a)", "($a < 0 ? ($T)0 : $a)", "$a", NULL},
  [IR_FLOOR] = {"floor$f($a)", "$a", "$a", NULL},
  [IR_CEIL] = {"ceil$f($a)", "$a", "$a", NULL},
  [IR_ROUND] = {"rint$f($a)", "$a", "$a", NULL},  /* half to even in the default rounding mode */
  [IR_SIGN] = {"(($T)($a > 0) - ($T)($a < 0))", "(($T)(($a > 0) - ($a < 0)))", "(($T)($a != 0))", NULL},
  [IR_RECIPROCAL] = {"(($T)1 / $a)"},
  [IR_LOGICAL_NOT] = SAME4("(!($a != 0))"),
  [IR_ADD] = {"($a + $b)", WRAP("+"), WRAP("+"), "($a || $b)"},
  [IR_SUB] = {"($a - $b)", WRAP("-"), WRAP("-"), NULL},
  [IR_MUL] = {"($a * $b)", WRAP("*"), WRAP("*"), "($a && $b)"},
  [IR_DIV] = {"($a / $b)"},
  [IR_POW] = {"kiln_pow$f($a, $b)", "kiln_spow<$T, $W>($a, $b)", "kiln_upow<$T, $W>($a, $b)", NULL},
  [IR_MAXIMUM] = {"kiln_max$f($a, $b)", "kiln_imax($a, $b)", "kiln_imax($a, $b)", "($a || $b)"},
  [IR_MINIMUM] = {"kiln_min$f($a, $b)", "kiln_imin($a, $b)", "kiln_imin($a, $b)", "($a && $b)"},
  [IR_EQ] = SAME4("($a == $b)"), [IR_NE] = SAME4("($a != $b)"),  /* float != is unordered: nan != nan */
  [IR_LT] = SAME4("($a < $b)"), [IR_LE] = SAME4("($a <= $b)"),
  [IR_GT] = SAME4("($a > $b)"), [IR_GE] = SAME4("($a >= $b)"),
  [IR_LOGICAL_AND] = SAME4("(($a != 0) && ($b != 0))"),
  [IR_LOGICAL_OR] = SAME4("(($a != 0) || ($b != 0))"),
  [IR_WHERE] = SAME4("(($a != 0) ? $b : $c)"),
  [IR_CLAMP] = {"kiln_min$f(kiln_max$f($a, $b), $c)", "kiln_imin(kiln_imax($a, $b), $c)",
                "kiln_imin(kiln_imax($a, $b), $c)", NULL},
  [IR_FLOOR_DIVIDE] = {"kiln_floordiv($a, $b)", "kiln_sfloordiv<$T, $W>($a, $b)", "kiln_udiv($a, $b)", NULL},
  [IR_TRUNC_DIVIDE] = {"trunc$f($a / $b)", "kiln_sdiv<$T, $W>($a, $b)", "kiln_udiv($a, $b)", NULL},
  [IR_REMAINDER] = {"kiln_fremainder($a, $b)", "kiln_sremainder($a, $b)", "kiln_umod($a, $b)", NULL},
  [IR_FMOD] = {"fmod$f($a, $b)", "kiln_smod($a, $b)", "kiln_umod($a, $b)", NULL},
  [IR_COPYSIGN] = {"copysign$f($a, $b)"},
  [IR_BITWISE_AND] = {NULL, "(($T)($a & $b))", "(($T)($a & $b))", "($a && $b)"},
  [IR_BITWISE_OR] = {NULL, "(($T)($a | $b))", "(($T)($a | $b))", "($a || $b)"},
  [IR_BITWISE_XOR] = {NULL, "(($T)($a ^ $b))", "(($T)($a ^ $b))", "($a != $b)"},
  [IR_LSHIFT] = {NULL, "kiln_shl<$T, $W>($a, $b)", "kiln_shl<$T, $W>($a, $b)", NULL},
  [IR_RSHIFT] = {NULL, "kiln_sshr($a, $b)", "kiln_ushr($a, $b)", NULL},
  [IR_TRUNC] = {"trunc$f($a)", "$a", "$a", NULL},
  [IR_BITWISE_NOT] = {NULL, "(($T)~$a)", "(($T)~$a)", "(!$a)"},
};
#undef WRAP
#undef SAME4

static const char *op_template(ir_op op, kiln_dtype t) {
  const op_tmpl *r = &op_tmpls[op];
  const ir_dtype_info *d = &ir_dtypes[t];
  const char *s = d->kind == DK_FLOAT ? r->fl : d->kind == DK_BOOL ? r->bo : d->is_signed ? r->si : r->ui;
  IR_ASSERT(s);
  return s;
}

/* The text of a temporary t that goes into o: out of memory t's failure
 * becomes o's, so that the source says it is incomplete. */
static const char *text_into(ir_str *o, const ir_str *t) {
  o->failed |= t->failed;
  return t->s && !t->failed ? t->s : "";
}

/* ---- casts and memory (semantics of codegen_cpu/emit.c's emit_cast) ------ */
static void emit_cast(ir_str *o, const char *v, kiln_dtype from, kiln_dtype to) {
  if ((to == KILN_F16 || to == KILN_BF16) && from != to) {  /* an f32 rounded to that precision */
    ir_str inner = {0};
    emit_cast(&inner, v, from, KILN_F32);
    const char *fmt = to == KILN_F16 ? "kiln_h2f(kiln_f2h(%s))" : "kiln_bf2f(kiln_f2bf(%s))";
    ir_str_printf(o, fmt, text_into(o, &inner));
    ir_str_free(&inner);
    return;
  }
  from = ir_compute_dtype(from);
  to = ir_compute_dtype(to);
  const ir_dtype_info *fi = &ir_dtypes[from], *ti = &ir_dtypes[to];
  if (from == to) ir_str_printf(o, "%s", v);
  else if (to == KILN_BOOL) ir_str_printf(o, "(%s != 0)", v);
  else if (fi->kind == DK_FLOAT && ti->kind == DK_INT)
    ir_str_printf(o, "kiln_sat<%s>((double)%s, (%s)(%s), (%s)(%s))", ctype(to), v, ctype(to), int_lo[to],
                  ctype(to), int_hi[to]);
  else ir_str_printf(o, "((%s)%s)", ctype(to), v);
}

/* A loaded storage element as its compute value (bool normalised to 0/1). */
static void emit_widen(ir_str *o, const char *v, kiln_dtype st) {
  const char *fmt = st == KILN_BOOL ? "(%s != 0)" : st == KILN_F16 ? "kiln_h2f(%s)"
                  : st == KILN_BF16 ? "kiln_bf2f(%s)" : "%s";
  ir_str_printf(o, fmt, v);
}

static void emit_narrow(ir_str *o, const char *v, kiln_dtype st) {
  const char *fmt = st == KILN_BOOL ? "(unsigned char)%s" : st == KILN_F16 ? "kiln_f2h(%s)"
                  : st == KILN_BF16 ? "kiln_f2bf(%s)" : "%s";
  ir_str_printf(o, fmt, v);
}

/* ---- expressions -------------------------------------------------------- */
static void indent(cuda_em *em) {
  for (int i = 0; i < em->depth; i++) ir_str_printf(em->out, "  ");
}

/* A float literal exactly as LLVMConstReal rounds it: the double, cast. */
static void float_literal(char *buf, size_t n, kiln_dtype t, double f) {
  bool f32 = t != KILN_F64;
  if (f != f) snprintf(buf, n, "%s", f32 ? "KILN_NAN_F" : "KILN_NAN_D");
  else if (f == 1.0 / 0.0 || f == -1.0 / 0.0)
    snprintf(buf, n, "(%s%s)", f < 0 ? "-" : "", f32 ? "KILN_INF_F" : "KILN_INF_D");
  else snprintf(buf, n, "((%s)%a)", f32 ? "float" : "double", f);
}

static void int_literal(char *buf, size_t n, kiln_dtype t, int64_t v) {
  if (t == KILN_BOOL) snprintf(buf, n, "%s", v ? "true" : "false");
  else if (v == INT64_MIN) snprintf(buf, n, "((long long)(-9223372036854775807LL - 1))");
  else snprintf(buf, n, "((%s)%" PRId64 "LL)", ctype(t), v);
}

static bool reads_acc(cuda_em *em, const kexpr *e) {
  if (!e) return false;
  if (em->reads_acc[e->id] < 0)
    em->reads_acc[e->id] = e->kind == KX_ACC || reads_acc(em, e->a) || reads_acc(em, e->b) || reads_acc(em, e->c);
  return em->reads_acc[e->id];
}

typedef struct { char s[64]; } operand;
static operand use(cuda_em *em, const kexpr *e);

/* The C of e from its operands' names. */
static void expr_text(cuda_em *em, const kexpr *e, ir_str *o) {
  switch (e->kind) {
  case KX_LOAD: {
    const kparam *p = &em->k->params[e->buf];
    char ref[96];
    if (em->lanes && em->vec[e->id]) snprintf(ref, sizeof ref, "q%d.v[ke]", e->id);
    else snprintf(ref, sizeof ref, "p%d[%s]", e->buf, use(em, e->a).s);
    ir_str w = {0};
    emit_widen(&w, ref, p->dtype);
    emit_cast(o, text_into(o, &w), p->dtype, e->type);
    ir_str_free(&w);
    return;
  }
  case KX_OP: {
    operand a = use(em, e->a), b = {""}, c = {""};
    if (e->b) b = use(em, e->b);
    if (e->c) c = use(em, e->c);
    if (e->op == IR_CAST) emit_cast(o, a.s, e->a->type, e->type);
    else expand(o, op_template(e->op, e->a->type), e->a->type, a.s, b.s, c.s);
    return;
  }
  case KX_CAST: emit_cast(o, use(em, e->a).s, e->a->type, e->type); return;
  case KX_IDIV: ir_str_printf(o, "(%s / %s)", use(em, e->a).s, use(em, e->b).s); return;
  case KX_IMOD: ir_str_printf(o, "(%s %% %s)", use(em, e->a).s, use(em, e->b).s); return;
  case KX_PHILOX:
    ir_str_printf(o, "(long long)kiln_philox(%s, %s, %d)", use(em, e->a).s, use(em, e->b).s, (int)e->i);
    return;
  case KX_ARG: {  /* the bits k_arg_int / k_float_bits wrote */
    int p = k_args_param(em->k);
    long long i = (long long)e->i;
    if (e->type == KILN_F64) ir_str_printf(o, "__longlong_as_double(p%d.v[%lld])", p, i);
    else if (e->type == KILN_F32) ir_str_printf(o, "__int_as_float((int)p%d.v[%lld])", p, i);
    else ir_str_printf(o, "((%s)p%d.v[%lld])", ctype(e->type), p, i);
    return;
  }
  default: IR_ASSERT(!"not a computed expression");
  }
}

/* Declares e's temporary where it is first needed. Expressions reading an
 * accumulator are recomputed at each use: the accumulator changes. */
static void define(cuda_em *em, const kexpr *e, operand *r) {
  bool memo = !reads_acc(em, e);
  if (memo && em->done[e->id]) return;
  ir_str text = {0};
  expr_text(em, e, &text);
  if (memo) {
    indent(em);
    ir_str_printf(em->out, "const %s t%d = %s;\n", ctype(e->type), e->id, text_into(em->out, &text));
    em->done[e->id] = true;
    em->defined[em->ndefined++] = e->id;
  } else {
    snprintf(r->s, sizeof r->s, "t%d_%d", e->id, em->fresh++);
    indent(em);
    ir_str_printf(em->out, "const %s %s = %s;\n", ctype(e->type), r->s, text_into(em->out, &text));
  }
  ir_str_free(&text);
}

/* The name or literal that stands for e, emitting its definition first. */
static operand use(cuda_em *em, const kexpr *e) {
  operand r;
  switch (e->kind) {
  case KX_CONST:
    if (ir_is_float(e->type)) float_literal(r.s, sizeof r.s, e->type, e->f);
    else int_literal(r.s, sizeof r.s, e->type, e->i);
    return r;
  case KX_VAR: snprintf(r.s, sizeof r.s, "v%d", e->var); return r;
  case KX_ACC: snprintf(r.s, sizeof r.s, "a%d", e->var); return r;
  default:
    snprintf(r.s, sizeof r.s, "t%d", e->id);
    define(em, e, &r);
    return r;
  }
}

/* ---- statements --------------------------------------------------------- */
static void emit_block(cuda_em *em, const kstmt *s);

static void forget_since(cuda_em *em, int mark) {
  while (em->ndefined > mark) em->done[em->defined[--em->ndefined]] = false;
}

/* A nested block whose temporaries go out of scope at its end. */
static void emit_scoped(cuda_em *em, const kstmt *body) {
  int mark = em->ndefined;
  em->depth++;
  emit_block(em, body);
  em->depth--;
  forget_since(em, mark);
  indent(em);
  ir_str_printf(em->out, "}\n");
}

/* Loop s's extent in the source: a literal, or in a shape-generic kernel
 * the launch argument that holds it (the source stays the same for every
 * shape of the structure). */
static void extent_text(const cuda_em *em, const kstmt *s, char *buf, size_t n) {
  if (s->bound) snprintf(buf, n, "p%d.v[%lld]", k_args_param(em->k), (long long)s->bound->i);
  else snprintf(buf, n, "%" PRId64 "LL", s->extent);
}

/* The product of the extents of chain[from..to) as text: one literal when
 * none is a launch argument. True when it is the literal 1. */
static bool extent_product(const cuda_em *em, const kstmt *const *chain, int from, int to, char *buf, size_t n) {
  int64_t lit = 1;
  size_t len = 0;
  buf[0] = '\0';
  for (int d = from; d < to; d++) {
    if (!chain[d]->bound) {
      lit *= chain[d]->extent;
      continue;
    }
    char e[48];
    extent_text(em, chain[d], e, sizeof e);
    len += (size_t)snprintf(buf + len, len < n ? n - len : 0, "%s%s", len ? " * " : "(", e);
  }
  if (!len) {
    snprintf(buf, n, "%" PRId64 "LL", lit);
    return lit == 1;
  }
  snprintf(buf + len, len < n ? n - len : 0, lit == 1 ? ")" : " * %" PRId64 "LL)", lit);
  return false;
}

static void emit_loop(cuda_em *em, const kstmt *s) {
  char e[48];
  extent_text(em, s, e, sizeof e);
  indent(em);
  ir_str_printf(em->out, "for (long long v%d = 0; v%d < %s; v%d++) {\n", s->var, s->var, e, s->var);
  emit_scoped(em, s->body);
}

/* A store; in the lanes of a vector group, into lane ke of the group's
 * vector for that store (emit_vector_loop stores it). */
static void emit_store(cuda_em *em, const kstmt *s) {
  kiln_dtype st = em->k->params[s->buf].dtype;
  operand idx = {""};
  if (!em->lanes) idx = use(em, s->index);
  operand v = use(em, s->value);
  ir_str c = {0}, n = {0};
  emit_cast(&c, v.s, s->value->type, ir_compute_dtype(st));
  emit_narrow(&n, text_into(&n, &c), st);
  indent(em);
  /* at a row's uniform level every thread holds the value: one stores it */
  const char *value = text_into(em->out, &n);
  if (em->lanes) ir_str_printf(em->out, "w%d.v[ke] = %s;\n", em->nstore++, value);
  else
    ir_str_printf(em->out, "%sp%d[%s] = %s;\n", em->block_wide ? "if (threadIdx.x == 0) " : "", s->buf, idx.s, value);
  ir_str_free(&c);
  ir_str_free(&n);
}

static void emit_acc(cuda_em *em, const kstmt *s) {
  IR_ASSERT(!s->index);   /* lane accumulators are lowered for CPU kernels only */
  operand v = use(em, s->value);
  indent(em);
  ir_str_printf(em->out, "%s a%d = %s;\n", ctype(s->type), s->acc, v.s);
}

/* A failed check claims the status slot (prelude.cuh's kiln_check_fail). */
static void emit_check(cuda_em *em, const kstmt *s) {
  operand fail = use(em, s->value), pos = use(em, s->index), what = use(em, s->check.what);
  indent(em);
  ir_str_printf(em->out, "if (%s) kiln_check_fail(p%d, %d, %d, %s, %s);\n", fail.s, k_status_param(em->k),
                s->check.code, s->check.site, pos.s, what.s);
}

/* A carried accumulator (a scan): acc = value, in loop order. Expressions
 * reading it are recomputed at each use, so reads after it see the new value. */
static void emit_carry(cuda_em *em, const kstmt *s) {
  IR_ASSERT(!s->index);
  operand v = use(em, s->value);
  indent(em);
  ir_str_printf(em->out, "a%d = %s;\n", s->acc, v.s);
}

/* A line sorted by the prelude's kiln_sort_row (one thread per line), with
 * the key of a stored element as a lambda. */
static void emit_sort(cuda_em *em, const kstmt *s) {
  kiln_dtype dt = em->k->params[s->sort.in].dtype;
  operand in = use(em, s->sort.in_off), out = use(em, s->sort.out_off);
  char vals[96], idx[96];
  snprintf(vals, sizeof vals, "(%s *)0", stype(dt));
  snprintf(idx, sizeof idx, "(long long *)0");
  if (s->sort.vals >= 0) snprintf(vals, sizeof vals, "p%d + %s", s->sort.vals, out.s);
  if (s->sort.idx >= 0) snprintf(idx, sizeof idx, "p%d + %s", s->sort.idx, out.s);
  ir_str w = {0};
  emit_widen(&w, "v", dt);
  indent(em);
  ir_str_printf(em->out, "kiln_sort_row(p%d + %s, %" PRId64 "LL, %" PRId64 "LL, %s, %" PRId64 "LL, %s, %s, %" PRId64
                "LL, [](%s v) { return kiln_%ckey((%s)(%s)); });\n",
                s->sort.in, in.s, s->sort.in_stride, s->sort.n, s->sort.descending ? "true" : "false", s->sort.k,
                vals, idx, s->sort.out_stride, stype(dt), ir_is_float(dt) ? 'f' : 'i',
                ir_is_float(dt) ? "double" : "long long", text_into(em->out, &w));
  ir_str_free(&w);
}

/* The fused attention of one block of query rows (attention.cuh's
 * kiln_attention, which every thread of the block calls): the (batch,
 * head)'s operands at their offsets, the strides, sizes and head dims as
 * constants (the head dims size its registers), no mask as a null pointer. */
static void emit_attn(cuda_em *em, const kstmt *s) {
  const kernel *k = em->k;
  kiln_dtype dt = k->params[s->attn.q].dtype, mdt = s->attn.mask >= 0 ? k->params[s->attn.mask].dtype : dt;
  int mask = s->attn.mask < 0 ? 0 : mdt == KILN_BOOL ? 1 : 2;
  operand q = use(em, s->attn.q_off), kk = use(em, s->attn.k_off), v = use(em, s->attn.v_off),
          o = use(em, s->attn.o_off), row0 = use(em, s->attn.row0);
  char mp[96], scale[64];
  if (mask) {
    operand m = use(em, s->attn.m_off);
    snprintf(mp, sizeof mp, "p%d + %s", s->attn.mask, m.s);
  } else {
    snprintf(mp, sizeof mp, "(const %s *)0", stype(mdt));
  }
  float_literal(scale, sizeof scale, dt, s->attn.scale);
  indent(em);
  ir_str_printf(em->out, "const long long kst[10] = {");
  for (int i = 0; i < 10; i++) ir_str_printf(em->out, "%s%" PRId64 "LL", i ? ", " : "", s->attn.st[i]);
  ir_str_printf(em->out, "};\n");
  indent(em);
  ir_str_printf(em->out,
                "kiln_attention<%s, %s, %d, %" PRId64 ", %" PRId64 ">(p%d + %s, p%d + %s, p%d + %s, %s, p%d + %s, %s, "
                "%" PRId64 "LL, %" PRId64 "LL, %" PRId64 "LL, kst, %s, %s);\n",
                stype(dt), stype(mdt), mask, s->attn.e, s->attn.ev, s->attn.q, q.s, s->attn.k, kk.s, s->attn.v, v.s,
                mp, s->attn.out, o.s, row0.s, s->attn.rows, s->attn.l, s->attn.s, scale,
                s->attn.causal ? "true" : "false");
}

/* acc = op(acc, value), through the op table. */
static void emit_fold(cuda_em *em, const kstmt *s) {
  char acc[16];
  snprintf(acc, sizeof acc, "a%d", s->acc);
  operand v = use(em, s->value);
  indent(em);
  ir_str_printf(em->out, "%s = ", acc);
  expand(em->out, op_template(s->op, s->type), s->type, acc, v.s, "");
  ir_str_printf(em->out, ";\n");
}

/* arg-reduction: value beats acc when op says so, or when it is nan and acc
 * is not; ties keep the first index. */
static void emit_argfold(cuda_em *em, const kstmt *s) {
  char acc[16];
  snprintf(acc, sizeof acc, "a%d", s->acc);
  operand v = use(em, s->value), idx = use(em, s->index);
  ir_str cmp = {0};
  expand(&cmp, op_template(s->op, s->type), s->type, v.s, acc, "");
  indent(em);
  const char *better = text_into(em->out, &cmp);
  if (ir_is_float(s->type))
    ir_str_printf(em->out, "if (%s || (%s != %s && %s == %s)) {\n", better, v.s, v.s, acc, acc);
  else ir_str_printf(em->out, "if (%s) {\n", better);
  indent(em);
  ir_str_printf(em->out, "  %s = %s;\n", acc, v.s);
  indent(em);
  ir_str_printf(em->out, "  a%d = %s;\n", s->acc2, idx.s);
  indent(em);
  ir_str_printf(em->out, "}\n");
  ir_str_free(&cmp);
}

/* ---- mapping the work to threads ----------------------------------------- */
static bool contains(const kstmt *s, ks_kind kind) {
  for (; s; s = s->next)
    if (s->kind == kind || (s->kind == KS_LOOP && contains(s->body, kind))) return true;
  return false;
}

/* The loops perfectly nested from s (each body is exactly one loop),
 * outermost first: one flat range of iterations. */
static int loop_chain(const kstmt *s, const kstmt **chain) {
  int n = 0;
  for (; s && s->kind == KS_LOOP && n < MAX_CHAIN; s = s->body && !s->body->next ? s->body : NULL) chain[n++] = s;
  return n;
}

static int64_t chain_extent(const kstmt *const *chain, int n) {
  int64_t e = 1;
  for (int i = 0; i < n; i++) e *= chain[i]->extent;
  return e;
}

static bool uses_var(const kexpr *e, int v) {
  if (!e) return false;
  if (e->kind == KX_VAR) return e->var == v;
  return uses_var(e->a, v) || uses_var(e->b, v) || uses_var(e->c, v);
}

/* How far index e moves per step of loop variable v; false when that is not
 * a constant (e is not affine in v). */
static bool var_step(const kexpr *e, int v, int64_t *step) {
  int64_t a, b;
  if (e->kind == KX_VAR || e->kind == KX_CONST) {
    *step = e->kind == KX_VAR && e->var == v;
    return true;
  }
  if (e->kind == KX_OP && (e->op == IR_ADD || e->op == IR_MUL) && var_step(e->a, v, &a) && var_step(e->b, v, &b)) {
    if (e->op == IR_ADD) *step = a + b;
    else if (e->a->kind == KX_CONST) *step = e->a->i * b;
    else if (e->b->kind == KX_CONST) *step = a * e->b->i;
    else *step = 0;
    return e->op == IR_ADD || e->a->kind == KX_CONST || e->b->kind == KX_CONST || (a == 0 && b == 0);
  }
  *step = 0;
  return !uses_var(e, v);
}

/* What a walk over the loads of some statements looks for: a load one
 * element away per step of loop variable var, or (var < 0) a load of an
 * output (a kernel that accumulates into its output). */
static bool load_matches(cuda_em *em, const kexpr *e, int var) {
  const kparam *p = &em->k->params[e->buf];
  int64_t st;
  if (var < 0) return p->output;
  return var_step(e->a, var, &st) && (st == 1 || st == -1);
}

static bool expr_has_load(cuda_em *em, const kexpr *e, int var) {
  if (!e || em->seen[e->id]) return false;
  em->seen[e->id] = 1;
  if (e->kind == KX_LOAD && load_matches(em, e, var)) return true;
  return expr_has_load(em, e->a, var) || expr_has_load(em, e->b, var) || expr_has_load(em, e->c, var);
}

static bool stmts_have_load(cuda_em *em, const kstmt *s, int var) {
  for (; s; s = s->next) {
    bool hit = s->kind == KS_LOOP ? stmts_have_load(em, s->body, var)
                                  : expr_has_load(em, s->value, var) || expr_has_load(em, s->index, var);
    if (hit) return true;
  }
  return false;
}

/* has_load(em, s, v): whether the statements load contiguously along v
 * (then neighbouring threads taking neighbouring v read neighbouring
 * elements); has_load(em, s, -1): whether they read an output. */
static bool has_load(cuda_em *em, const kstmt *s, int var) {
  memset(em->seen, 0, (size_t)em->k->nexprs + 1);
  return stmts_have_load(em, s, var);
}

static void add_outer(cuda_em *em, const kstmt *s, const kstmt **outer, int *n) {
  for (; s; s = s->next) {
    if (s->kind == KS_ACC) em->acc_stamp[s->acc] = em->stamp;
    else if (s->kind == KS_LOOP) add_outer(em, s->body, outer, n);
    else if (s->kind == KS_UPDATE && em->acc_stamp[s->acc] != em->stamp) {
      int i = 0;
      while (i < *n && outer[i]->acc != s->acc) i++;
      if (i == *n) outer[(*n)++] = s;
    }
  }
}

/* The updates in loop s of accumulators declared before it (one each, into
 * outer, which holds k->naccs): s is their reduction's loop. A reduction
 * nested inside s declares its accumulator inside s too. */
static int outer_updates(cuda_em *em, const kstmt *s, const kstmt **outer) {
  int n = 0;
  em->stamp++;
  add_outer(em, s->body, outer, &n);
  return n;
}

/* At a row's uniform level, whether the block's threads split loop s (and
 * the loops nested in it) among them: a reduction's loop (their partial
 * accumulators are then folded), a loop without reductions, or one whose
 * reductions read contiguously along it (a thread per iteration coalesces).
 * Otherwise every thread runs it and the reductions inside are block-wide. */
static bool split_loop(cuda_em *em, const kstmt *s) {
  const kstmt *chain[MAX_CHAIN];
  int n = loop_chain(s, chain), nouter = outer_updates(em, s, em->outer);
  return nouter > 0 || !contains(s->body, KS_ACC) || has_load(em, chain[n - 1]->body, chain[n - 1]->var);
}

/* Threads a row can use: the most iterations of a loop it splits. */
static int64_t row_width(cuda_em *em, const kstmt *s) {
  int64_t w = 1;
  for (; s; s = s->next) {
    if (s->kind != KS_LOOP) continue;
    const kstmt *chain[MAX_CHAIN];
    int n = loop_chain(s, chain);
    int64_t e = split_loop(em, s) ? chain_extent(chain, n) : row_width(em, s->body);
    if (e > w) w = e;
  }
  return w;
}

/* A warp for a short row, else a power of two covering it; one row alone
 * (a full reduction) may have the whole block. */
static int row_block(int64_t width, int64_t rows) {
  int cap = rows > 1 ? CUDA_ROW_BLOCK : CUDA_ONE_BLOCK, b = 32;
  while (b < cap && b < width) b *= 2;
  return b;
}

/* Blocks for items, per_block of them to a block, 1..CUDA_MAX_GRID. */
static int grid_for(int64_t items, int64_t per_block) {
  int64_t g = (items + per_block - 1) / per_block;
  return g < 1 ? 1 : g > CUDA_MAX_GRID ? CUDA_MAX_GRID : (int)g;
}

/* The name of the chain's flat index: the loop's own variable when the
 * chain is one loop, "it" when it is empty. */
static void flat_name(char *i, size_t size, const kstmt *const *chain, int n) {
  if (n) snprintf(i, size, n == 1 ? "v%d" : "f%d", chain[0]->var);
  else snprintf(i, size, "it");
}

static bool expr_reads(cuda_em *em, const kexpr *e, int var) {
  if (!e || em->seen[e->id] || (e->kind == KX_LOAD && em->vec[e->id])) return false;
  em->seen[e->id] = 1;
  if (e->kind == KX_VAR) return e->var == var;
  return expr_reads(em, e->a, var) || expr_reads(em, e->b, var) || expr_reads(em, e->c, var);
}

/* Whether statements s read loop variable var; in the lanes of a vector
 * group, the vector loads and the stores' indices do not count (they are
 * the group's vectors). Elsewhere every variable of a chain counts. */
static bool reads_var(cuda_em *em, const kstmt *s, int var) {
  if (!em->lanes) return true;
  memset(em->seen, 0, (size_t)em->k->nexprs + 1);
  for (; s; s = s->next)
    if (expr_reads(em, s->value, var)) return true;
  return false;
}

/* The chain's variables recovered from its flat index i (the iterations of
 * its loops flattened, outermost first; those body reads), then body, then
 * the closing brace. */
static void emit_flat_body(cuda_em *em, const kstmt *const *chain, int n, const kstmt *body, const char *i) {
  for (int d = n > 1 ? n - 1 : -1; d >= 0; d--) {
    if (!reads_var(em, body, chain[d]->var)) continue;
    char inner[512], e[48];
    bool one = extent_product(em, chain, d + 1, n, inner, sizeof inner);
    extent_text(em, chain[d], e, sizeof e);
    indent(em);
    ir_str_printf(em->out, "  const long long v%d = ", chain[d]->var);
    if (chain[d]->extent == 1 && !chain[d]->bound) ir_str_printf(em->out, "0;\n");
    else if (d == 0) ir_str_printf(em->out, "%s / %s;\n", i, inner);
    else if (one) ir_str_printf(em->out, "%s %% %s;\n", i, e);
    else ir_str_printf(em->out, "(%s / %s) %% %s;\n", i, inner, e);
  }
  emit_scoped(em, body);
}

/* for (i = first; i < bound; i += step) over the chain's flat index, then
 * body. An empty chain is one range of iterations. */
static void emit_flat_loop(cuda_em *em, const kstmt *const *chain, int n, const kstmt *body, const char *first,
                           const char *bound, const char *step) {
  char i[16];
  flat_name(i, sizeof i, chain, n);
  indent(em);
  ir_str_printf(em->out, "for (long long %s = %s; %s < %s; %s += %s) {\n", i, first, i, bound, i, step);
  emit_flat_body(em, chain, n, body, i);
}

/* [](T x, T y) { return op(x, y); }: how update u combines two values (for
 * an arg-reduction, when x beats y). */
static void fold_lambda(ir_str *o, const kstmt *u) {
  const char *t = ctype(u->type);
  ir_str_printf(o, "[](%s x, %s y) { return ", t, t);
  expand(o, op_template(u->op, u->type), u->type, "x", "y", "");
  ir_str_printf(o, "; })");
}

/* After a split reduction loop: each thread's partial accumulator folded
 * with the same op across the block; every thread gets the result. */
static void emit_block_fold(cuda_em *em, const kstmt *u) {
  indent(em);
  if (u->acc2 < 0) ir_str_printf(em->out, "a%d = kiln_block_fold(a%d, ", u->acc, u->acc);
  else ir_str_printf(em->out, "kiln_block_argfold(a%d, a%d, ", u->acc, u->acc2);
  fold_lambda(em->out, u);
  ir_str_printf(em->out, ";\n");
}

/* A loop the block's threads split: each thread runs its share of the
 * (flattened) iterations from first by step alone, then the reductions it
 * holds are folded across the block. */
static void emit_split(cuda_em *em, const kstmt *s, const char *first, const char *step) {
  const kstmt *chain[MAX_CHAIN], **outer = em->split_outer;
  int n = loop_chain(s, chain), nouter = outer_updates(em, s, outer);
  char bound[512];
  extent_product(em, chain, 0, n, bound, sizeof bound);
  em->block_wide = false;
  emit_flat_loop(em, chain, n, chain[n - 1]->body, first, bound, step);
  em->block_wide = true;
  for (int i = 0; i < nouter; i++) emit_block_fold(em, outer[i]);
}

/* ---- grid-wide reductions (prelude.cuh's kiln_grid_*) ---------------------- */
/* The scratch slots of loop s's reductions: one per accumulator, two for an
 * arg-reduction (value, then index), in outer_updates' order. */
static int grid_slots(cuda_em *em, const kstmt *s) {
  const kstmt **outer = em->outer;
  int nouter = outer_updates(em, s, outer), slots = 0;
  for (int i = 0; i < nouter; i++) slots += outer[i]->acc2 < 0 ? 1 : 2;
  return slots;
}

/* The blocks a kernel that is one row (statements s) can spread over, one
 * per CUDA_ROW_BLOCK * CUDA_GRID_ITEMS elements, when s is accumulators,
 * one reduction loop and then stores (a full reduction and its epilogue):
 * *loop is that loop. 1 for anything else: a second reduction after the
 * first (var, softmax) would need the first's total on every block. */
static int grid_blocks(cuda_em *em, const kstmt *s, const kstmt **loop) {
  while (s && s->kind == KS_ACC) s = s->next;
  if (!s || s->kind != KS_LOOP || grid_slots(em, s) == 0) return 1;
  for (const kstmt *r = s->next; r; r = r->next)
    if (r->kind != KS_STORE) return 1;
  const kstmt *chain[MAX_CHAIN];
  *loop = s;
  return grid_for(chain_extent(chain, loop_chain(s, chain)), CUDA_ROW_BLOCK * CUDA_GRID_ITEMS);
}

/* The start value of accumulator acc (its KS_ACC, before the grid's loop). */
static const kexpr *acc_init(const cuda_em *em, int acc) {
  const kstmt *s = em->grid_body;
  while (s->kind != KS_ACC || s->acc != acc) s = s->next;
  return s->value;
}

/* The accumulators of reductions outer in scratch-slot order (grid_slots
 * counts them): each one's acc, then an arg-reduction's index acc2. */
static int slot_accs(const kstmt *const *outer, int nouter, int *accs) {
  int n = 0;
  for (int i = 0; i < nouter; i++) {
    accs[n++] = outer[i]->acc;
    if (outer[i]->acc2 >= 0) accs[n++] = outer[i]->acc2;
  }
  return n;
}

/* In the last block: each thread folds blocks t, t + blockDim.x, ... of
 * the results in the scratch into its accumulators. */
static void emit_grid_merge(cuda_em *em, const kstmt *const *outer, int nouter) {
  indent(em);
  ir_str_printf(em->out, "for (unsigned kb = threadIdx.x; kb < gridDim.x; kb += blockDim.x) {\n");
  for (int i = 0, slot = 0; i < nouter; i++, slot++) {
    const kstmt *u = outer[i];
    char acc[16], got[96];
    snprintf(acc, sizeof acc, "a%d", u->acc);
    snprintf(got, sizeof got, "kiln_grid_get<%s>(scratch, %d, kb)", ctype(u->type), slot);
    indent(em);
    if (u->acc2 < 0) {
      ir_str_printf(em->out, "  %s = ", acc);
      expand(em->out, op_template(u->op, u->type), u->type, acc, got, "");
    } else {
      ir_str_printf(em->out, "  kiln_argmerge(%s, a%d, %s, kiln_grid_get<long long>(scratch, %d, kb), ", acc, u->acc2,
                    got, ++slot);
      fold_lambda(em->out, u);
    }
    ir_str_printf(em->out, ";\n");
  }
  indent(em);
  ir_str_printf(em->out, "}\n");
}

/* The grid's loop: the grid splits it, each block folds its share and puts
 * it in the scratch; every block but the last returns, and the last one
 * starts over from the start values, folds the blocks' results (then
 * across its threads: the same order whichever block came last) and goes
 * on alone to the epilogue, the statements after the loop. */
static void emit_grid_split(cuda_em *em, const kstmt *s) {
  emit_split(em, s, "(long long)blockIdx.x * blockDim.x + threadIdx.x", "(long long)gridDim.x * blockDim.x");
  const kstmt **outer = em->grid_outer;
  int *accs = em->grid_accs;
  int nouter = outer_updates(em, s, outer), nslots = slot_accs(outer, nouter, accs);
  for (int j = 0; j < nslots; j++) {
    indent(em);
    ir_str_printf(em->out, "kiln_grid_put(scratch, %d, a%d);\n", j, accs[j]);
  }
  indent(em);
  ir_str_printf(em->out, "if (!kiln_grid_last(scratch)) return;\n");
  for (int j = 0; j < nslots; j++) {
    operand v = use(em, acc_init(em, accs[j]));
    indent(em);
    ir_str_printf(em->out, "a%d = %s;\n", accs[j], v.s);
  }
  emit_grid_merge(em, outer, nouter);
  for (int i = 0; i < nouter; i++) emit_block_fold(em, outer[i]);
}

static void emit_block(cuda_em *em, const kstmt *s) {
  for (; s; s = s->next) {
    switch (s->kind) {
    case KS_LOOP:
      if (s == em->grid_loop) emit_grid_split(em, s);
      else if (em->block_wide && split_loop(em, s)) emit_split(em, s, "(long long)threadIdx.x", "(long long)blockDim.x");
      else emit_loop(em, s);
      break;
    case KS_STORE: emit_store(em, s); break;
    case KS_ACC: emit_acc(em, s); break;
    case KS_UPDATE: (s->acc2 < 0 ? emit_fold : emit_argfold)(em, s); break;
    case KS_CARRY: emit_carry(em, s); break;
    case KS_GEMM: IR_ASSERT(!"KS_GEMM reaches the CUDA emitter"); break;
    case KS_CHECK: emit_check(em, s); break;
    case KS_SORT: emit_sort(em, s); break;
    case KS_ATTN: emit_attn(em, s); break;
    }
  }
}

/* ---- 128-bit vectors in elementwise kernels -------------------------------- */
/* Index e as *c + the sum over d of coef[d] * chain[d]'s variable; false
 * when it is not visibly of that form (constants, the chain's variables,
 * sums, products by a constant). Wrapping arithmetic, as the index's. */
static bool affine(const kexpr *e, const kstmt *const *chain, int n, uint64_t *coef, uint64_t *c) {
  uint64_t ca[MAX_CHAIN], cb[MAX_CHAIN], a, b;
  memset(coef, 0, sizeof *coef * (size_t)n);
  *c = e->kind == KX_CONST ? (uint64_t)e->i : 0;
  if (e->kind == KX_CONST) return true;
  if (e->kind == KX_VAR) {
    int d = 0;
    while (d < n && chain[d]->var != e->var) d++;
    if (d < n) coef[d] = 1;
    return d < n;
  }
  if (e->kind != KX_OP || (e->op != IR_ADD && e->op != IR_MUL) || !affine(e->a, chain, n, ca, &a) ||
      !affine(e->b, chain, n, cb, &b))
    return false;
  bool a_const = true, b_const = true;
  for (int d = 0; d < n; d++) {
    a_const = a_const && !ca[d];
    b_const = b_const && !cb[d];
  }
  if (e->op == IR_MUL && !a_const && !b_const) return false;
  for (int d = 0; d < n; d++) coef[d] = e->op == IR_ADD ? ca[d] + cb[d] : a_const ? a * cb[d] : ca[d] * b;
  *c = e->op == IR_ADD ? a + b : a * b;
  return true;
}

/* Whether index e is the chain's flat index plus a constant *off: then
 * neighbouring iterations touch neighbouring elements. Outside a launch
 * argument's loop (a shape-generic kernel's) the stride is no constant: a
 * literal coefficient that matches it at one shape would not at another. */
static bool flat_index(const kexpr *e, const kstmt *const *chain, int n, int64_t *off) {
  uint64_t coef[MAX_CHAIN], c, stride = 1;
  bool dynamic = false;
  if (!affine(e, chain, n, coef, &c)) return false;
  for (int d = n - 1; d >= 0; d--) {
    if (chain[d]->extent > 1 && (dynamic || coef[d] != stride)) return false;
    dynamic |= chain[d]->bound != NULL;
    stride *= (uint64_t)chain[d]->extent;
  }
  *off = (int64_t)c;
  return true;
}

static bool uses_chain(const kexpr *e, const kstmt *const *chain, int n) {
  for (int d = 0; d < n; d++)
    if (uses_var(e, chain[d]->var)) return true;
  return false;
}

/* Whether elements of t have the size *size (set by the first). */
static bool same_size(int *size, kiln_dtype t) {
  if (!*size) *size = (int)ir_dtypes[t].size;
  return *size == (int)ir_dtypes[t].size;
}

/* Whether the loads under e allow the vector path: each one either at a
 * flat index of an input, of the element size *size (then it is marked, to
 * be moved by vectors), or not moving with the iteration at all (a
 * broadcast scalar, a launch argument). */
static bool vector_loads(cuda_em *em, const kexpr *e, const kstmt *const *chain, int n, int *size) {
  if (!e || em->seen[e->id]) return true;
  em->seen[e->id] = 1;
  int64_t off;
  if (e->kind == KX_LOAD) {
    const kparam *p = &em->k->params[e->buf];
    if (p->output) return false;
    if (flat_index(e->a, chain, n, &off)) {
      em->vec[e->id] = true;
      em->vloads[em->nvloads++] = e;
      return same_size(size, p->dtype);
    }
    if (uses_chain(e->a, chain, n)) return false;
  }
  return vector_loads(em, e->a, chain, n, size) && vector_loads(em, e->b, chain, n, size) &&
         vector_loads(em, e->c, chain, n, size);
}

/* Iterations each thread of an elementwise kernel runs as one vector
 * group: VEC_BYTES / element size when the iteration is only stores at
 * flat indices whose loads allow it (vector_loads), with one element size
 * of 2 or 4 bytes for all of them; else 1 (no vector path). */
static int vector_lanes(cuda_em *em, const kstmt *const *chain, int n, const kstmt *iter) {
  int size = 0;
  int64_t off;
  memset(em->seen, 0, (size_t)em->k->nexprs + 1);
  em->nvloads = 0;
  for (const kstmt *s = iter; s; s = s->next)
    if (!n || s->kind != KS_STORE || !flat_index(s->index, chain, n, &off) ||
        !same_size(&size, em->k->params[s->buf].dtype) || !vector_loads(em, s->value, chain, n, &size))
      return 1;
  return size == 2 || size == 4 ? VEC_BYTES / size : 1;
}

/* "p3 + (kg + 5LL)": where the vector of parameter param at flat index
 * `index` (the flat index plus a constant) starts for the group at `at`. */
static void vec_addr(char *buf, size_t size, int param, const kexpr *index, const kstmt *const *chain, int n,
                     const char *at) {
  int64_t off = 0;
  flat_index(index, chain, n, &off);
  snprintf(buf, size, "p%d + (%s + %" PRId64 "LL)", param, at, off);
}

static void vec_type(char *buf, size_t size, kiln_dtype t, int lanes) {
  snprintf(buf, size, "kiln_vec<%s, %d>", stype(t), lanes);
}

/* kaligned: whether every vector access is 16-byte aligned for groups
 * starting at lo (a view's offset may break it); kend: where the groups
 * end (lo when not aligned). */
static void emit_vector_bounds(cuda_em *em, const kstmt *const *chain, int n, const kstmt *iter, int lanes) {
  char addr[96];
  indent(em);
  ir_str_printf(em->out, "const bool kaligned = ");
  for (int v = 0; v < em->nvloads; v++) {
    vec_addr(addr, sizeof addr, em->vloads[v]->buf, em->vloads[v]->a, chain, n, "lo");
    ir_str_printf(em->out, "kiln_aligned16(%s) && ", addr);
  }
  for (const kstmt *s = iter; s; s = s->next) {
    vec_addr(addr, sizeof addr, s->buf, s->index, chain, n, "lo");
    ir_str_printf(em->out, "kiln_aligned16(%s)%s", addr, s->next ? " && " : ";\n");
  }
  indent(em);
  ir_str_printf(em->out, "const long long kend = kaligned ? lo + (hi - lo) / %dLL * %dLL : lo;\n", lanes, lanes);
}

/* The lanes of a group: the iterations kg + ke, their loads from the
 * group's vectors q<id>, their stores into vectors w<store number>. */
static void emit_lanes(cuda_em *em, const kstmt *const *chain, int n, const kstmt *iter, int lanes) {
  char i[16];
  flat_name(i, sizeof i, chain, n);
  indent(em);
  ir_str_printf(em->out, "#pragma unroll\n");
  indent(em);
  ir_str_printf(em->out, "for (int ke = 0; ke < %d; ke++) {\n", lanes);
  em->lanes = true;
  em->nstore = 0;
  bool reads_i = false;
  for (int d = 0; d < n; d++) reads_i = reads_i || reads_var(em, iter, chain[d]->var);
  if (reads_i) {
    indent(em);
    ir_str_printf(em->out, "  const long long %s = kg + ke;\n", i);
  }
  emit_flat_body(em, chain, n, iter, i);
  em->lanes = false;
}

/* The vector path of an elementwise kernel (vector_lanes): groups of lanes
 * iterations from lo while the accesses are aligned; per group each thread
 * loads its inputs by vectors, runs the lanes into vectors of the results
 * and stores those. The scalar loop that follows starts at kend: the tail,
 * or everything when not aligned. */
static void emit_vector_loop(cuda_em *em, const kstmt *const *chain, int n, const kstmt *iter, int lanes) {
  char addr[96], vt[48];
  emit_vector_bounds(em, chain, n, iter, lanes);
  indent(em);
  ir_str_printf(em->out,
                "for (long long kg = lo + ((long long)blockIdx.x * blockDim.x + threadIdx.x) * %dLL; kg < kend; "
                "kg += (long long)gridDim.x * blockDim.x * %dLL) {\n", lanes, lanes);
  em->depth++;
  for (int v = 0; v < em->nvloads; v++) {
    const kexpr *e = em->vloads[v];
    vec_type(vt, sizeof vt, em->k->params[e->buf].dtype, lanes);
    vec_addr(addr, sizeof addr, e->buf, e->a, chain, n, "kg");
    indent(em);
    ir_str_printf(em->out, "const %s q%d = *(const %s *)(%s);\n", vt, e->id, vt, addr);
  }
  int w = 0;
  for (const kstmt *s = iter; s; s = s->next) {
    vec_type(vt, sizeof vt, em->k->params[s->buf].dtype, lanes);
    indent(em);
    ir_str_printf(em->out, "%s w%d;\n", vt, w++);
  }
  emit_lanes(em, chain, n, iter, lanes);
  w = 0;
  for (const kstmt *s = iter; s; s = s->next) {
    vec_type(vt, sizeof vt, em->k->params[s->buf].dtype, lanes);
    vec_addr(addr, sizeof addr, s->buf, s->index, chain, n, "kg");
    indent(em);
    ir_str_printf(em->out, "*(%s *)(%s) = w%d;\n", vt, addr, w++);
  }
  em->depth--;
  indent(em);
  ir_str_printf(em->out, "}\n");
}

/* ---- the kernel function ------------------------------------------------ */
static void emit_signature(cuda_em *em, int block) {
  kernel *k = em->k;
  for (int p = 0; p < k->nparams; p++)
    if (k->params[p].args)
      ir_str_printf(em->out, "struct %s_args { long long v[%" PRId64 "]; };\n", k->name,
                    k->params[p].numel > 0 ? k->params[p].numel : 1);
  ir_str_printf(em->out, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", block, k->name);
  for (int p = 0; p < k->nparams; p++) {
    const kparam *pp = &k->params[p];
    if (pp->args) ir_str_printf(em->out, "const %s_args p%d, ", k->name, p);
    else if (pp->status) ir_str_printf(em->out, "long long *__restrict__ p%d, ", p);
    else ir_str_printf(em->out, "%s%s *__restrict__ p%d, ", pp->output ? "" : "const ", stype(pp->dtype), p);
  }
  ir_str_printf(em->out, "long long lo, long long hi, void *scratch) {\n");
}

/* A row per block, blocks striding over the rows. A kernel that is one row
 * (no parallel loop, or one of extent 1: a reduction kept as [1]) whose
 * reduction is long (grid_blocks) runs it on the whole grid instead, every
 * block taking the one iteration. A shape-generic kernel decides by its
 * structure alone: the grid's code whenever its reduction could take it
 * (one block at a short length runs it as well), and the widest block. */
static void emit_rows(cuda_em *em, const kstmt *const *chain, int n, const kstmt *iter, cuda_launch *launch) {
  const kstmt *loop = NULL;
  bool one = !n || launch->range == 1;
  bool generic = em->k->generic;
  launch->grid = one ? grid_blocks(em, iter, &loop) : grid_for(launch->range, 1);
  em->grid_loop = (launch->grid > 1 || generic) && one ? loop : NULL;
  em->grid_body = iter;
  launch->block = em->grid_loop ? CUDA_ROW_BLOCK : row_block(generic ? INT64_MAX : row_width(em, iter), launch->range);
  launch->scratch = em->grid_loop ? 16 + 8 * (int64_t)grid_slots(em, loop) * CUDA_MAX_GRID : 0;
  emit_signature(em, launch->block);
  em->depth = 1;
  em->block_wide = true;
  if (em->grid_loop) emit_flat_loop(em, chain, n, iter, "lo", "hi", "1");
  else emit_flat_loop(em, chain, n, iter, "lo + (long long)blockIdx.x", "hi", "(long long)gridDim.x");
}

/* A block per iteration of a fused attention (a block of query rows of one
 * (batch, head)), blocks striding over them; kiln_attention gives each
 * thread a row: a warp, or more up to the rows of an iteration. */
static void emit_attention(cuda_em *em, const kstmt *const *chain, int n, const kstmt *iter, cuda_launch *launch) {
  IR_ASSERT(n && iter->kind == KS_ATTN && !iter->next);   /* lowering: the KS_ATTN alone in the parallel loop */
  int64_t rows = iter->attn.rows < iter->attn.l ? iter->attn.rows : iter->attn.l;
  launch->grid = grid_for(launch->range, 1);
  launch->block = row_block(rows, launch->range);
  launch->scratch = 0;
  emit_signature(em, launch->block);
  em->depth = 1;
  em->block_wide = true;
  emit_flat_loop(em, chain, n, iter, "lo + (long long)blockIdx.x", "hi", "(long long)gridDim.x");
}

/* A thread per iteration; with a vector path (vector_lanes), each thread
 * first runs groups of iterations by vectors, then the scalar loop. */
static void emit_threads(cuda_em *em, const kstmt *const *chain, int n, const kstmt *iter, cuda_launch *launch) {
  int lanes = vector_lanes(em, chain, n, iter);
  launch->block = CUDA_BLOCK;
  launch->grid = grid_for(launch->range, (int64_t)CUDA_BLOCK * lanes);
  launch->scratch = 0;
  emit_signature(em, launch->block);
  em->depth = 1;
  em->block_wide = false;
  if (lanes > 1) emit_vector_loop(em, chain, n, iter, lanes);
  emit_flat_loop(em, chain, n, iter, lanes > 1 ? "kend + (long long)blockIdx.x * blockDim.x + threadIdx.x"
                                               : "lo + (long long)blockIdx.x * blockDim.x + threadIdx.x",
                 "hi", "(long long)gridDim.x * blockDim.x");
}

/* The parallel loop (the only top-level statement when there is one) and
 * the loops perfectly nested in it are the kernel's iterations; a body
 * without one is one iteration. An iteration holding a reduction that does
 * not load contiguously along the innermost of those loops is a row: one
 * block per row, block-wide reductions. Otherwise one thread per iteration. */
static void emit_kernel(cuda_em *em, cuda_launch *launch) {
  const kstmt *b = em->k->body, *chain[MAX_CHAIN];
  int n = b && !b->next && b->kind == KS_LOOP && b->loop == KL_PARALLEL ? loop_chain(b, chain) : 0;
  const kstmt *iter = n ? chain[n - 1]->body : b;
  /* a row stores from one thread, so no thread may read back the output;
   * a scan (a carried accumulator) runs in order on one thread per row */
  bool rows = contains(iter, KS_ACC) && !contains(iter, KS_CARRY) &&
              !(n && has_load(em, iter, chain[n - 1]->var)) && !has_load(em, b, -1);
  launch->range = chain_extent(chain, n);
  if (contains(b, KS_ATTN)) emit_attention(em, chain, n, iter, launch);
  else (rows ? emit_rows : emit_threads)(em, chain, n, iter, launch);
  ir_str_printf(em->out, "}\n\n");
}

bool cuda_emit(kernel *k, ir_str *src, cuda_launch *launch, char **err) {
  if (contains(k->body, KS_GEMM)) {
    if (err) *err = ir_strprintf("%s: matrix products are not emitted as CUDA C (cuBLAS)", k->name);
    return false;
  }
  if (!k->name[0]) {
    ir_str key = {0};
    k_key(k, &key);
    src->failed |= key.failed;   /* unnamed: nothing to emit */
    ir_str_free(&key);
  }
  size_t n = (size_t)k->nexprs + 1, na = (size_t)k->naccs + 1;
  cuda_em em = {.k = k, .out = src, .done = ir_calloc(n, sizeof(bool)), .defined = ir_calloc(n, sizeof(int)),
                .reads_acc = ir_malloc(n), .seen = ir_malloc(n), .acc_stamp = ir_calloc(na, sizeof(int)),
                .vec = ir_calloc(n, sizeof(bool)), .vloads = ir_malloc(sizeof(kexpr *) * n),
                .outer = ir_malloc(sizeof(kstmt *) * na), .split_outer = ir_malloc(sizeof(kstmt *) * na),
                .grid_outer = ir_malloc(sizeof(kstmt *) * na), .grid_accs = ir_malloc(sizeof(int) * na)};
  if (em.done && em.defined && em.reads_acc && em.seen && em.acc_stamp && em.vec && em.vloads && em.outer &&
      em.split_outer && em.grid_outer && em.grid_accs) {
    memset(em.reads_acc, -1, n);
    emit_kernel(&em, launch);
  } else {
    src->failed = true;
  }
  free(em.done);
  free(em.defined);
  free(em.reads_acc);
  free(em.seen);
  free(em.acc_stamp);
  free(em.vec);
  free(em.vloads);
  free(em.outer);
  free(em.split_outer);
  free(em.grid_outer);
  free(em.grid_accs);
  return true;
}
