/* attn_block.c: the fused attention's block kernel, one LLVM module per
 * (dtype, mask dtype) compiled once per process like a GEMM driver: one block
 * of QB query rows against all the keys it sees, the FlashAttention
 * recurrence with the queries along the vector lanes. q k^T is computed
 * transposed, a tile of MR keys x QB queries in registers (the keys
 * broadcast from k in place, the queries from q^T packed once per block and
 * pre-scaled), so the online softmax's max, sum and rescaling are lane-wise
 * vector ops, and p v likewise as o^T (MR value columns x QB queries, the
 * values broadcast from v in place): nothing but q is ever packed. */
#include "codegen_cpu/cpu_impl.h"

#include <math.h>
#include <stdio.h>

enum {
  QV = CPU_ATTN_QVECS,  /* vectors of queries per block: QB = QV * lanes */
  MR = 8,               /* keys (q k^T) or value columns (p v) per register tile: MR * QV = 24 zmm */
  KB = CPU_ATTN_KEYS,   /* keys per block of the recurrence (a multiple of MR) */
  VBYTES = 64,          /* one zmm register */
  STATS = 5,            /* scratch rows of one value per query: m, l, tmax, mu, alpha */
};

/* The kernel's parameters, in order (cpu_impl.h has the C view). */
enum { P_Q, P_K, P_V, P_MASK, P_OUT, P_ROW0, P_NQ, P_DESC, P_SCALE, P_SCRATCH, NPARAMS };

typedef struct {
  cpu_cg *g;
  LLVMBuilderRef b;
  LLVMValueRef fn;
  LLVMTypeRef t, vt;            /* compute type and its 512-bit vector */
  int64_t lanes, qb;            /* lanes; queries per block */
  int mask_dt;                  /* the mask's dtype, -1: none */
  LLVMValueRef p[NPARAMS];
  LLVMValueRef causal, s, e, ev, st[10], nkeys, scale;
  LLVMValueRef qt, ot, pt, m, l, tmax, mu, alpha;   /* the scratch's arrays (cpu_attn_scratch) */
  LLVMValueRef evr;             /* ev rounded up to MR: o^T's rows */
  LLVMValueRef j0, kb;          /* the key block being added: first key, keys */
  LLVMValueRef acc[MR * QV];    /* accumulator vectors: allocas that SROA turns into registers */
  LLVMValueRef tm[QV];          /* the block's running max of the scores, per query */
} ab;

/* ---- small helpers ------------------------------------------------------ */
static LLVMValueRef i64c(ab *a, int64_t v) { return LLVMConstInt(a->g->i64, (unsigned long long)v, 1); }
static LLVMValueRef iadd(ab *a, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildAdd(a->b, x, y, ""); }
static LLVMValueRef imul(ab *a, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildMul(a->b, x, y, ""); }

static LLVMValueRef imin(ab *a, LLVMValueRef x, LLVMValueRef y) {
  return LLVMBuildSelect(a->b, LLVMBuildICmp(a->b, LLVMIntSLT, x, y, ""), x, y, "");
}

/* Element i of p, an array of type t. */
static LLVMValueRef at(ab *a, LLVMTypeRef t, LLVMValueRef p, LLVMValueRef i) {
  return LLVMBuildInBoundsGEP2(a->b, t, p, &i, 1, "");
}

static LLVMValueRef load(ab *a, LLVMValueRef p, LLVMValueRef i) { return LLVMBuildLoad2(a->b, a->t, at(a, a->t, p, i), ""); }
static void store(ab *a, LLVMValueRef x, LLVMValueRef p, LLVMValueRef i) { LLVMBuildStore(a->b, x, at(a, a->t, p, i)); }

/* Vector v of row r of a scratch array of rows of QB (64-byte aligned). */
static LLVMValueRef vslot(ab *a, LLVMValueRef p, LLVMValueRef r, int v) {
  return at(a, a->t, p, iadd(a, imul(a, r, i64c(a, a->qb)), i64c(a, v * a->lanes)));
}

static LLVMValueRef vload(ab *a, LLVMValueRef p, LLVMValueRef r, int v) {
  LLVMValueRef x = LLVMBuildLoad2(a->b, a->vt, vslot(a, p, r, v), "");
  LLVMSetAlignment(x, VBYTES);
  return x;
}

static void vstore(ab *a, LLVMValueRef x, LLVMValueRef p, LLVMValueRef r, int v) {
  LLVMSetAlignment(LLVMBuildStore(a->b, x, vslot(a, p, r, v)), VBYTES);
}

static LLVMValueRef splat(ab *a, LLVMValueRef x) {
  LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(x), (unsigned)a->lanes);
  LLVMValueRef zeros = LLVMConstNull(LLVMVectorType(a->g->i32, (unsigned)a->lanes));
  x = LLVMBuildInsertElement(a->b, LLVMGetUndef(vt), x, LLVMConstInt(a->g->i32, 0, 0), "");
  return LLVMBuildShuffleVector(a->b, x, LLVMGetUndef(vt), zeros, "");
}

static LLVMValueRef fma_(ab *a, LLVMValueRef x, LLVMValueRef y, LLVMValueRef z) {
  return cpu_intrin(a->g, a->b, "llvm.fma", &a->vt, 1, (LLVMValueRef[]){x, y, z}, 3);
}

static LLVMValueRef fmax_(ab *a, LLVMValueRef x, LLVMValueRef y) {
  LLVMTypeRef t = LLVMTypeOf(x);
  return cpu_intrin(a->g, a->b, "llvm.maxnum", &t, 1, (LLVMValueRef[]){x, y}, 2);
}

static LLVMValueRef ninf(LLVMTypeRef t) { return LLVMConstReal(t, -INFINITY); }

/* for (iv = 0; iv < end; iv += step) */
static LLVMValueRef loop_open(ab *a, cpu_loop *l, LLVMValueRef end, int64_t step) {
  return cpu_loop_open(a->g, a->fn, l, i64c(a, 0), end, i64c(a, step));
}

/* ---- the parts of a block ----------------------------------------------- */
/* q^T scaled: qt[x*QB + i] = q[row0 + i, x] * scale, 0 for the rows past nq. */
static void pack_q(ab *a) {
  cpu_loop lx, li;
  LLVMValueRef x = loop_open(a, &lx, a->e, 1);
  LLVMValueRef i = loop_open(a, &li, i64c(a, a->qb), 1);
  LLVMValueRef in = LLVMBuildICmp(a->b, LLVMIntSLT, i, a->p[P_NQ], "");
  LLVMValueRef row = iadd(a, a->p[P_ROW0], LLVMBuildSelect(a->b, in, i, i64c(a, 0), ""));
  LLVMValueRef y = load(a, a->p[P_Q], iadd(a, imul(a, row, a->st[0]), imul(a, x, a->st[1])));
  y = LLVMBuildSelect(a->b, in, LLVMBuildFMul(a->b, y, a->scale, ""), LLVMConstNull(a->t), "");
  store(a, y, a->qt, iadd(a, imul(a, x, i64c(a, a->qb)), i));
  cpu_loop_close(a->g, &li);
  cpu_loop_close(a->g, &lx);
}

/* n elements of p set to x. */
static void fill(ab *a, LLVMValueRef p, LLVMValueRef n, LLVMValueRef x) {
  cpu_loop l;
  LLVMValueRef i = loop_open(a, &l, n, 1);
  store(a, x, p, i);
  cpu_loop_close(a->g, &l);
}

/* The mask's element (query row, key j) applied to score x (lanes vector):
 * a bool mask drops the key (-inf), any other is added. The rows past nq
 * read row nq-1 (their lanes are never stored). */
static LLVMValueRef apply_mask(ab *a, LLVMValueRef x, int v, LLVMValueRef j) {
  LLVMTypeRef mt = a->mask_dt == KILN_BOOL ? a->g->i8 : a->t;
  LLVMValueRef m = LLVMGetUndef(LLVMVectorType(mt, (unsigned)a->lanes)), last = iadd(a, a->p[P_NQ], i64c(a, -1));
  for (int q = 0; q < a->lanes; q++) {
    LLVMValueRef row = iadd(a, a->p[P_ROW0], imin(a, i64c(a, v * a->lanes + q), last));
    LLVMValueRef e = LLVMBuildLoad2(a->b, mt, at(a, mt, a->p[P_MASK], iadd(a, imul(a, row, a->st[6]), imul(a, j, a->st[7]))), "");
    m = LLVMBuildInsertElement(a->b, m, e, LLVMConstInt(a->g->i32, (unsigned long long)q, 0), "");
  }
  if (a->mask_dt != KILN_BOOL) return LLVMBuildFAdd(a->b, x, m, "");
  LLVMValueRef keep = LLVMBuildICmp(a->b, LLVMIntNE, m, LLVMConstNull(LLVMTypeOf(m)), "");
  return LLVMBuildSelect(a->b, keep, x, splat(a, ninf(a->t)), "");
}

/* The register tile's products, both of them: for p < n, acc[r][v] +=
 * row[r][p * stride] (broadcast from memory in place) * panel row p's
 * vector v (QB lanes of queries in scratch). */
static void tile_fma(ab *a, LLVMValueRef n, LLVMValueRef panel, LLVMValueRef const *row, LLVMValueRef stride) {
  cpu_loop l;
  LLVMValueRef p = loop_open(a, &l, n, 1);
  LLVMValueRef pv[QV];
  for (int v = 0; v < QV; v++) pv[v] = vload(a, panel, p, v);
  for (int r = 0; r < MR; r++) {
    LLVMValueRef x = splat(a, load(a, row[r], imul(a, p, stride)));
    for (int v = 0; v < QV; v++)
      LLVMBuildStore(a->b, fma_(a, x, pv[v], LLVMBuildLoad2(a->b, a->vt, a->acc[r * QV + v], "")), a->acc[r * QV + v]);
  }
  cpu_loop_close(a->g, &l);
}

/* Score tile keys j0+t0 .. +MR: acc[r][v] = k[key r] . qt[:, lanes of v]
 * (keys past the block read the last key seen), the mask, then -inf
 * where the key is not seen (past nkeys, or causal past the query; after
 * the mask, so that an unseen key's +inf mask is no nan), into pt rows t0..
 * and the running max. */
static void score_tile(ab *a, LLVMValueRef t0) {
  LLVMValueRef krow[MR], key[MR];
  for (int r = 0; r < MR; r++) {
    key[r] = iadd(a, iadd(a, a->j0, t0), i64c(a, r));
    LLVMValueRef j = imin(a, key[r], iadd(a, a->nkeys, i64c(a, -1)));
    krow[r] = at(a, a->t, a->p[P_K], imul(a, j, a->st[2]));
  }
  for (int i = 0; i < MR * QV; i++) LLVMBuildStore(a->b, LLVMConstNull(a->vt), a->acc[i]);
  tile_fma(a, a->e, a->qt, krow, a->st[3]);
  LLVMValueRef lane[64];
  for (int q = 0; q < a->lanes; q++) lane[q] = i64c(a, q);
  LLVMValueRef lanes = LLVMConstVector(lane, (unsigned)a->lanes), minus = splat(a, ninf(a->t));
  for (int r = 0; r < MR; r++) {
    LLVMValueRef in = splat(a, LLVMBuildICmp(a->b, LLVMIntSLT, key[r], a->nkeys, ""));
    LLVMValueRef anti = splat(a, LLVMBuildNot(a->b, a->causal, ""));
    for (int v = 0; v < QV; v++) {
      LLVMValueRef qpos = LLVMBuildAdd(a->b, splat(a, iadd(a, a->p[P_ROW0], i64c(a, v * a->lanes))), lanes, "");
      LLVMValueRef seen = LLVMBuildICmp(a->b, LLVMIntSLE, splat(a, key[r]), qpos, "");
      LLVMValueRef keep = LLVMBuildAnd(a->b, in, LLVMBuildOr(a->b, anti, seen, ""), "");
      LLVMValueRef y = LLVMBuildLoad2(a->b, a->vt, a->acc[r * QV + v], "");
      if (a->mask_dt >= 0) y = apply_mask(a, y, v, imin(a, key[r], iadd(a, a->nkeys, i64c(a, -1))));
      y = LLVMBuildSelect(a->b, keep, y, minus, "");
      vstore(a, y, a->pt, iadd(a, t0, i64c(a, r)), v);
      LLVMBuildStore(a->b, fmax_(a, LLVMBuildLoad2(a->b, a->vt, a->tm[v], ""), y), a->tm[v]);
    }
  }
}

/* Per query (a loop LLVM vectorizes, exp inlined): the new running max m',
 * mu = m' (0 while every score is -inf, so exp(s - mu) stays 0 and not
 * nan), alpha = exp(m - mu) and the sum rescaled by it. */
static void block_stats(ab *a) {
  for (int v = 0; v < QV; v++) vstore(a, LLVMBuildLoad2(a->b, a->vt, a->tm[v], ""), a->tmax, i64c(a, 0), v);
  cpu_loop l;
  LLVMValueRef i = loop_open(a, &l, i64c(a, a->qb), 1);
  LLVMValueRef m = load(a, a->m, i), mn = fmax_(a, m, load(a, a->tmax, i));
  LLVMValueRef dead = LLVMBuildFCmp(a->b, LLVMRealOEQ, mn, ninf(a->t), "");
  LLVMValueRef mu = LLVMBuildSelect(a->b, dead, LLVMConstNull(a->t), mn, "");
  LLVMValueRef alpha = cpu_math_unary(a->g, IR_EXP, LLVMBuildFSub(a->b, m, mu, ""));
  store(a, mn, a->m, i);
  store(a, mu, a->mu, i);
  store(a, alpha, a->alpha, i);
  store(a, LLVMBuildFMul(a->b, load(a, a->l, i), alpha, ""), a->l, i);
  cpu_loop_close(a->g, &l);
}

/* p = exp(s - mu) in place over the block's kb rows, added to the sums. */
static void block_exp(ab *a) {
  cpu_loop lj, li;
  LLVMValueRef j = loop_open(a, &lj, a->kb, 1);
  LLVMValueRef i = loop_open(a, &li, i64c(a, a->qb), 1);
  LLVMValueRef x = iadd(a, imul(a, j, i64c(a, a->qb)), i);
  LLVMValueRef p = cpu_math_unary(a->g, IR_EXP, LLVMBuildFSub(a->b, load(a, a->pt, x), load(a, a->mu, i), ""));
  store(a, p, a->pt, x);
  store(a, LLVMBuildFAdd(a->b, load(a, a->l, i), p, ""), a->l, i);
  cpu_loop_close(a->g, &li);
  cpu_loop_close(a->g, &lj);
}

/* o^T rows c0 .. +MR: o = o * alpha + sum over the block's keys j of
 * v[j0 + j, c] * p[j] (value columns past ev read column ev-1 into o^T's
 * padding rows). */
static void value_tile(ab *a, LLVMValueRef c0) {
  LLVMValueRef vcol[MR], alpha[QV];
  for (int v = 0; v < QV; v++) alpha[v] = vload(a, a->alpha, i64c(a, 0), v);
  for (int r = 0; r < MR; r++) {
    LLVMValueRef c = imin(a, iadd(a, c0, i64c(a, r)), iadd(a, a->ev, i64c(a, -1)));
    vcol[r] = at(a, a->t, a->p[P_V], iadd(a, imul(a, c, a->st[5]), imul(a, a->j0, a->st[4])));
    for (int v = 0; v < QV; v++)
      LLVMBuildStore(a->b, LLVMBuildFMul(a->b, vload(a, a->ot, iadd(a, c0, i64c(a, r)), v), alpha[v], ""),
                     a->acc[r * QV + v]);
  }
  tile_fma(a, a->kb, a->pt, vcol, a->st[4]);
  for (int r = 0; r < MR; r++)
    for (int v = 0; v < QV; v++)
      vstore(a, LLVMBuildLoad2(a->b, a->vt, a->acc[r * QV + v], ""), a->ot, iadd(a, c0, i64c(a, r)), v);
}

/* One key block: the score tiles, the statistics, p, then o^T's tiles. */
static void key_block(ab *a) {
  for (int v = 0; v < QV; v++) LLVMBuildStore(a->b, splat(a, ninf(a->t)), a->tm[v]);
  cpu_loop lt, lc;
  score_tile(a, loop_open(a, &lt, a->kb, MR));
  cpu_loop_close(a->g, &lt);
  block_stats(a);
  block_exp(a);
  value_tile(a, loop_open(a, &lc, a->ev, MR));
  cpu_loop_close(a->g, &lc);
}

/* out[row0 + i, c] = o^T[c, i] / l[i] for the block's rows: a row that saw
 * no key is 0 / 0, nan. */
static void store_out(ab *a) {
  cpu_loop li, lc;
  LLVMValueRef i = loop_open(a, &li, a->p[P_NQ], 1);
  LLVMValueRef c = loop_open(a, &lc, a->ev, 1);
  LLVMValueRef y = LLVMBuildFDiv(a->b, load(a, a->ot, iadd(a, imul(a, c, i64c(a, a->qb)), i)), load(a, a->l, i), "");
  LLVMValueRef row = iadd(a, a->p[P_ROW0], i);
  store(a, y, a->p[P_OUT], iadd(a, imul(a, row, a->st[8]), imul(a, c, a->st[9])));
  cpu_loop_close(a->g, &lc);
  cpu_loop_close(a->g, &li);
}

/* The statement's fields from desc, the keys the block sees (causal: up to
 * its last row) and the scratch's arrays, in cpu_attn_scratch's order. */
static void setup(ab *a) {
  LLVMValueRef desc = a->p[P_DESC];
  LLVMValueRef word[CPU_ATTN_WORDS];
  for (int i = 0; i < CPU_ATTN_WORDS; i++) word[i] = LLVMBuildLoad2(a->b, a->g->i64, at(a, a->g->i64, desc, i64c(a, i)), "");
  a->causal = LLVMBuildICmp(a->b, LLVMIntNE, word[CPU_ATTN_CAUSAL], i64c(a, 0), "");
  a->s = word[CPU_ATTN_S], a->e = word[CPU_ATTN_E], a->ev = word[CPU_ATTN_EV];
  for (int i = 0; i < 10; i++) a->st[i] = word[CPU_ATTN_STRIDES + i];
  LLVMValueRef last = imin(a, iadd(a, a->p[P_ROW0], a->p[P_NQ]), a->s);
  a->nkeys = LLVMBuildSelect(a->b, a->causal, last, a->s, "");
  a->scale = a->t == a->g->f64 ? a->p[P_SCALE] : LLVMBuildFPTrunc(a->b, a->p[P_SCALE], a->t, "");
  LLVMValueRef qb = i64c(a, a->qb);
  a->evr = imul(a, LLVMBuildSDiv(a->b, iadd(a, a->ev, i64c(a, MR - 1)), i64c(a, MR), ""), i64c(a, MR));
  LLVMValueRef *arr[] = {&a->qt, &a->ot, &a->pt, &a->m, &a->l, &a->tmax, &a->mu, &a->alpha};
  LLVMValueRef rows[3] = {a->e, a->evr, i64c(a, KB)}, p = a->p[P_SCRATCH];
  for (int i = 0; i < 3 + STATS; i++) {
    *arr[i] = p;
    p = at(a, a->t, p, i < 3 ? imul(a, rows[i], qb) : qb);
  }
  for (int i = 0; i < MR * QV; i++) LLVMSetAlignment(a->acc[i] = LLVMBuildAlloca(a->b, a->vt, ""), VBYTES);
  for (int v = 0; v < QV; v++) LLVMSetAlignment(a->tm[v] = LLVMBuildAlloca(a->b, a->vt, ""), VBYTES);
}

static void body(ab *a) {
  setup(a);
  pack_q(a);
  fill(a, a->ot, imul(a, a->evr, i64c(a, a->qb)), LLVMConstNull(a->t));
  fill(a, a->m, i64c(a, a->qb), ninf(a->t));
  fill(a, a->l, i64c(a, a->qb), LLVMConstNull(a->t));
  cpu_loop lb;
  a->j0 = loop_open(a, &lb, a->nkeys, KB);
  a->kb = imin(a, i64c(a, KB), LLVMBuildSub(a->b, a->nkeys, a->j0, ""));
  key_block(a);
  cpu_loop_close(a->g, &lb);
  store_out(a);
  LLVMBuildRetVoid(a->b);
}

/* ---- the module --------------------------------------------------------- */
int64_t cpu_attn_rows(kiln_dtype t) { return QV * VBYTES / (int64_t)ir_dtypes[t].size; }

int64_t cpu_attn_scratch(kiln_dtype t, int64_t e, int64_t ev) {
  return cpu_attn_rows(t) * (e + (ev + MR - 1) / MR * MR + KB + STATS);
}

cpu_gemm_driver cpu_attn_driver(kiln_dtype t, int mask_dt) {
  cpu_gemm_driver d = {.t = t, .a = t, .b = mask_dt >= 0 ? (kiln_dtype)mask_dt : t, .attn = true, .masked = mask_dt >= 0};
  IR_ASSERT(t == KILN_F32 || t == KILN_F64);
  snprintf(d.name, sizeof d.name, "kiln.attn.%s%s%s", ir_dtypes[t].short_name, d.masked ? ".mask." : "",
           d.masked ? ir_dtypes[d.b].short_name : "");
  return d;
}

LLVMTypeRef cpu_attn_block_type(cpu_cg *g) {
  LLVMTypeRef p[NPARAMS] = {g->ptr, g->ptr, g->ptr, g->ptr, g->ptr, g->i64, g->i64, g->ptr, g->f64, g->ptr};
  return LLVMFunctionType(g->vd, p, NPARAMS, 0);
}

LLVMModuleRef cpu_attn_block_module(LLVMContextRef ctx, const cpu_gemm_driver *d, const char *triple,
                                    const char *datalayout, const char *cpu, const char *features) {
  cpu_cg g;
  cpu_cg_init(&g, ctx, d->name, triple, datalayout, cpu, features);
  ab a = {.g = &g, .b = g.b, .mask_dt = d->masked ? (int)d->b : -1};
  a.fn = LLVMAddFunction(g.mod, d->name, cpu_attn_block_type(&g));
  cpu_fn_attrs(&g, a.fn, false);
  for (int i = 0; i < NPARAMS; i++) a.p[i] = LLVMGetParam(a.fn, (unsigned)i);
  cpu_param_attr(&g, a.fn, P_SCRATCH + 1, "noalias");
  a.t = cpu_type(&g, d->t);
  a.lanes = VBYTES / (int64_t)ir_dtypes[d->t].size;
  a.vt = LLVMVectorType(a.t, (unsigned)a.lanes);
  a.qb = QV * a.lanes;
  LLVMPositionBuilderAtEnd(g.b, LLVMAppendBasicBlockInContext(ctx, a.fn, "entry"));
  body(&a);
  LLVMDisposeBuilder(g.b);
  return g.mod;
}
