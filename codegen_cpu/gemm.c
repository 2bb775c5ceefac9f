/* gemm.c: the CPU GEMM driver, one LLVM module per (compute dtype, A and B
 * storage dtypes), compiled once per process and called by every KS_GEMM of
 * those dtypes whatever its shape (gemm_call.c emits the call; m, n, k, the
 * strides and the rows to compute are its arguments, so a new shape compiles
 * only its epilogue). BLIS's loop order: column blocks of NC and depth blocks
 * of KC (B packed into NR-wide panels), row blocks of MC (A packed into
 * MR-high panels), and a register-blocked micro-kernel of MR x NR
 * accumulators (llvm.fma on <16 x float> or <8 x double>: 24 of the 32 zmm
 * registers). The partial sums of all depth blocks but the last wait in a
 * scratch C. The finished sums of a row block (in the scratch C, or a
 * row-block buffer when K fits in one depth block) then go to the epilogue,
 * a function of the calling kernel, through a pointer: once per MC x NC
 * block, so the indirect call costs nothing measurable, and the epilogue's
 * loops run over whole rows of the block while it is in L2.
 * KC is deep on purpose: a KC x NR panel of B no longer fits in L1, but the
 * micro-kernel does 24 FMAs per 176 bytes it loads, which L2 feeds easily,
 * and with K <= KC there is no scratch C to write, read back and page in.
 * On Zen 4 (x @ W^T, 4096x1024x1024) this took the product from 47 ms to
 * 42 ms on 2 threads, level with OpenBLAS; KC = 256 had it at 0.87x. f64
 * keeps the A block at the same 384 KiB (KC = 1024): 2048 made a 2048^3
 * product 20% slower. */
#include "codegen_cpu/cpu_impl.h"

#include <stdio.h>

enum {
  MR = 12,     /* micro-tile rows: A elements broadcast per k */
  NV = 2,      /* vectors per micro-tile row: NR = NV * lanes */
  KC_BYTES = 8192, /* depth block KC of 2048 f32 or 1024 f64: products with K <= KC keep each
                      micro-tile's sums in registers over all of K */
  MC = 48,     /* row block (a multiple of MR): MC x KC of A (384 KiB) stays in L2 */
  NC = 1024,   /* column block: KC x NC of B stays in L3 */
  VBYTES = 64, /* one zmm register */
  STACK_BYTES = 64 * 1024, /* buffers up to this (all three) live on the stack */
};

/* The driver's parameters, in order (cpu_impl.h has the C view). */
enum { P_A, P_ASI, P_ASK, P_B, P_BSK, P_BSN, P_I0, P_I1, P_N, P_K, P_EPI, P_CTX, P_WIN, NPARAMS };

typedef struct {
  cpu_cg *g;
  LLVMBuilderRef b;
  LLVMValueRef fn;           /* the driver */
  LLVMTypeRef t, vt;         /* compute type and its 512-bit vector */
  int64_t lanes, nr;         /* vector lanes; NR */
  LLVMValueRef i0, i1, n, kdim;
  LLVMValueRef kc, mc, nc;   /* block sizes, shrunk to the problem (nc, mc: multiples of NR, MR) */
  LLVMValueRef kcur;         /* inside the depth loop: the depth of the current block */
  LLVMValueRef multi;        /* more than one depth block: the sums of all rows wait in sums */
  LLVMValueRef ap, bp, sums; /* packed A block, packed B block, the sums (scratch C or one row block) */
  LLVMValueRef on_stack;     /* the three fit in STACK_BYTES: one alloca holds them */
  LLVMValueRef acc[MR * NV]; /* accumulator vectors: allocas that SROA turns into registers */
} gemm;

/* One operand as packing sees it: element (x, p) is base[x*sx + p*sp] with
 * x the row of A or column of B, p the depth. */
typedef struct {
  LLVMValueRef base;
  kiln_dtype st;             /* storage dtype */
  LLVMValueRef sx, sp;       /* strides */
  int64_t w;                 /* panel width (MR or NR) */
  LLVMValueRef *win;         /* B as a convolution's window: the KW_N values of ir/kernel.h; else NULL */
  LLVMValueRef rows, cols;   /* with win: i64[w] tables of a panel's columns' first input row and column */
} operand;

/* ---- small helpers ------------------------------------------------------ */
static LLVMValueRef c64(gemm *c, int64_t v) { return LLVMConstInt(c->g->i64, (unsigned long long)v, 1); }
static LLVMValueRef add(gemm *c, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAdd(c->b, a, b, ""); }
static LLVMValueRef mul(gemm *c, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildMul(c->b, a, b, ""); }
static LLVMValueRef mulc(gemm *c, LLVMValueRef a, int64_t k) { return mul(c, a, c64(c, k)); }
static LLVMValueRef sub(gemm *c, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildSub(c->b, a, b, ""); }
static LLVMValueRef icmp(gemm *c, LLVMIntPredicate p, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildICmp(c->b, p, a, b, "");
}

static LLVMValueRef imin(gemm *c, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(c->b, icmp(c, LLVMIntSLT, a, b), a, b, "");
}

static LLVMValueRef round_up(gemm *c, LLVMValueRef a, int64_t m) {
  return mulc(c, LLVMBuildSDiv(c->b, add(c, a, c64(c, m - 1)), c64(c, m), ""), m);
}

static LLVMValueRef iabs(gemm *c, LLVMValueRef a) {
  return cpu_intrin(c->g, c->b, "llvm.abs", &c->g->i64, 1, (LLVMValueRef[]){a, LLVMConstInt(c->g->i1, 0, 0)}, 2);
}

/* x in every lane of vt (lanes wide). */
static LLVMValueRef splat(gemm *c, LLVMValueRef x, LLVMTypeRef vt) {
  LLVMValueRef zeros = LLVMConstNull(LLVMVectorType(c->g->i32, (unsigned)c->lanes));
  x = LLVMBuildInsertElement(c->b, LLVMGetUndef(vt), x, LLVMConstInt(c->g->i32, 0, 0), "");
  return LLVMBuildShuffleVector(c->b, x, LLVMGetUndef(vt), zeros, "");
}

static LLVMValueRef gep(gemm *c, LLVMTypeRef t, LLVMValueRef p, LLVMValueRef i) {
  return LLVMBuildInBoundsGEP2(c->b, t, p, &i, 1, "");
}

static LLVMValueRef load_aligned(gemm *c, LLVMTypeRef t, LLVMValueRef p, unsigned align) {
  LLVMValueRef v = LLVMBuildLoad2(c->b, t, p, "");
  LLVMSetAlignment(v, align);
  return v;
}

static void store_aligned(gemm *c, LLVMValueRef v, LLVMValueRef p, unsigned align) {
  LLVMSetAlignment(LLVMBuildStore(c->b, v, p), align);
}

static LLVMBasicBlockRef block(gemm *c, const char *name) {
  return LLVMAppendBasicBlockInContext(c->g->ctx, c->fn, name);
}

/* A process function (the JIT resolves it through the process's symbols). */
static LLVMValueRef libc_call(gemm *c, const char *name, LLVMTypeRef ret, LLVMTypeRef *params, unsigned n,
                              LLVMValueRef *args) {
  LLVMTypeRef ft = LLVMFunctionType(ret, params, n, 0);
  LLVMValueRef fn = LLVMGetNamedFunction(c->g->mod, name);
  if (!fn) fn = LLVMAddFunction(c->g->mod, name, ft);
  return LLVMBuildCall2(c->b, ft, fn, args, n, "");
}

/* Bytes of n elements of the compute type, rounded up to whole vectors (so
 * each buffer stays 64-byte aligned, and aligned_alloc's size is a multiple
 * of the alignment). */
static LLVMValueRef buffer_bytes(gemm *c, LLVMValueRef n) {
  LLVMValueRef bytes = mulc(c, n, (int64_t)(VBYTES / c->lanes));
  return LLVMBuildAnd(c->b, add(c, bytes, c64(c, VBYTES - 1)), c64(c, -VBYTES), "");
}

static LLVMValueRef heap_alloc(gemm *c, LLVMValueRef bytes) {
  return libc_call(c, "aligned_alloc", c->g->ptr, (LLVMTypeRef[]){c->g->i64, c->g->i64}, 2,
                   (LLVMValueRef[]){c64(c, VBYTES), bytes});
}

static LLVMValueRef phi2(gemm *c, LLVMValueRef a, LLVMBasicBlockRef from_a, LLVMValueRef b, LLVMBasicBlockRef from_b) {
  LLVMValueRef p = LLVMBuildPhi(c->b, c->g->ptr, "");
  LLVMAddIncoming(p, (LLVMValueRef[]){a, b}, (LLVMBasicBlockRef[]){from_a, from_b}, 2);
  return p;
}

/* The packed A block, packed B block and sums of n[0], n[1], n[2]
 * elements. A small product's go on the stack in one alloca: three
 * aligned_allocs and frees per call cost more than a 16x16x16 product
 * (malloc consolidating its free lists on each request of a few KiB). */
static void buffers_alloc(gemm *c, LLVMValueRef na, LLVMValueRef nb, LLVMValueRef ns) {
  LLVMValueRef ba = buffer_bytes(c, na), bb = buffer_bytes(c, nb), bs = buffer_bytes(c, ns);
  LLVMValueRef total = add(c, add(c, ba, bb), bs);
  c->on_stack = icmp(c, LLVMIntULE, total, c64(c, STACK_BYTES));
  LLVMBasicBlockRef stack = block(c, "gemm.stack"), heap = block(c, "gemm.heap"), join = block(c, "gemm.bufs");
  LLVMBuildCondBr(c->b, c->on_stack, stack, heap);
  LLVMPositionBuilderAtEnd(c->b, stack);
  LLVMValueRef one = LLVMBuildArrayAlloca(c->b, c->g->i8, total, "");
  LLVMSetAlignment(one, VBYTES);
  LLVMValueRef sa = one, sb = gep(c, c->g->i8, one, ba), ss = gep(c, c->g->i8, one, add(c, ba, bb));
  LLVMBuildBr(c->b, join);
  LLVMPositionBuilderAtEnd(c->b, heap);
  LLVMValueRef ha = heap_alloc(c, ba), hb = heap_alloc(c, bb), hs = heap_alloc(c, bs);
  LLVMBuildBr(c->b, join);
  LLVMPositionBuilderAtEnd(c->b, join);
  c->ap = phi2(c, sa, stack, ha, heap);
  c->bp = phi2(c, sb, stack, hb, heap);
  c->sums = phi2(c, ss, stack, hs, heap);
}

static void buffers_free(gemm *c) {
  LLVMBasicBlockRef heap = block(c, "gemm.free"), done = block(c, "gemm.freed");
  LLVMBuildCondBr(c->b, c->on_stack, done, heap);
  LLVMPositionBuilderAtEnd(c->b, heap);
  LLVMValueRef bufs[] = {c->sums, c->bp, c->ap};
  for (int i = 0; i < 3; i++) libc_call(c, "free", c->g->vd, &c->g->ptr, 1, &bufs[i]);
  LLVMBuildBr(c->b, done);
  LLVMPositionBuilderAtEnd(c->b, done);
}

/* ---- control flow ------------------------------------------------------- */
typedef cpu_loop gloop;

static LLVMValueRef loop_open(gemm *c, gloop *l, LLVMValueRef start, LLVMValueRef end, LLVMValueRef step) {
  return cpu_loop_open(c->g, c->fn, l, start, end, step);
}

static LLVMValueRef loop_close(gemm *c, gloop *l) { return cpu_loop_close(c->g, l); }

/* if (cond) { ...then... } [else { ... }]: open positions at the then
 * block, otherwise at the else block, close after both. */
typedef struct {
  LLVMBasicBlockRef other, done;
} gbranch;

static void branch_open(gemm *c, gbranch *br, LLVMValueRef cond) {
  LLVMBasicBlockRef then = block(c, "gemm.then");
  br->other = block(c, "gemm.else");
  br->done = block(c, "gemm.join");
  LLVMBuildCondBr(c->b, cond, then, br->other);
  LLVMPositionBuilderAtEnd(c->b, then);
}

static void branch_otherwise(gemm *c, gbranch *br) {
  LLVMBuildBr(c->b, br->done);
  LLVMPositionBuilderAtEnd(c->b, br->other);
}

static void branch_close(gemm *c, gbranch *br) {
  LLVMBuildBr(c->b, br->done);
  LLVMPositionBuilderAtEnd(c->b, br->done);
}

/* ---- packing ------------------------------------------------------------ */
/* Element idx of an operand in the compute type: f16 and bf16 widen to f32. */
static LLVMValueRef load_elem(gemm *c, const operand *o, LLVMValueRef idx) {
  cpu_cg *g = c->g;
  LLVMTypeRef mt = o->st == KILN_F16 ? g->f16 : o->st == KILN_BF16 ? g->i16 : c->t;
  LLVMValueRef v = LLVMBuildLoad2(c->b, mt, gep(c, mt, o->base, idx), "");
  if (o->st == KILN_F16) return LLVMBuildFPExt(c->b, v, g->f32, "");
  if (o->st != KILN_BF16) return v;
  v = LLVMBuildShl(c->b, LLVMBuildZExt(c->b, v, g->i32, ""), LLVMConstInt(g->i32, 16, 0), "");
  return LLVMBuildBitCast(c->b, v, g->f32, "");
}

/* dst[p*w + q] = element (x0 + q, p0 + p). */
static void pack_elem(gemm *c, const operand *o, LLVMValueRef dst, LLVMValueRef x0, LLVMValueRef p0,
                      LLVMValueRef p, LLVMValueRef q) {
  LLVMValueRef idx = add(c, mul(c, add(c, x0, q), o->sx), mul(c, add(c, p0, p), o->sp));
  LLVMBuildStore(c->b, load_elem(c, o, idx), gep(c, c->t, dst, add(c, mulc(c, p, o->w), q)));
}

/* One panel with the inner loop along p (p_inner) or along x. Only the
 * inner loop of a unit-stride nest may be vectorized: vectorizing every
 * variant gave gathers and scatters in each unrolled copy, 2.7 s of compile
 * for nests that are rarely run (other strides, the edge panel). With
 * limit (the edge panel) the panel is zeroed first and only its columns
 * q < limit are copied: a select per element made packing the whole cost
 * of a 16x16x16 product. */
static void pack_loops(gemm *c, const operand *o, bool p_inner, bool scalar, LLVMValueRef dst, LLVMValueRef x0,
                       LLVMValueRef p0, LLVMValueRef limit) {
  gloop lo, li;
  LLVMValueRef zero = c64(c, 0), one = c64(c, 1), w = limit ? limit : c64(c, o->w);
  if (limit) {
    LLVMValueRef bytes = mulc(c, c->kcur, o->w * (int64_t)(VBYTES / c->lanes));
    LLVMBuildMemSet(c->b, dst, LLVMConstInt(c->g->i8, 0, 0), bytes, VBYTES);
  }
  LLVMValueRef outer = loop_open(c, &lo, zero, p_inner ? w : c->kcur, one);
  LLVMValueRef inner = loop_open(c, &li, zero, p_inner ? c->kcur : w, one);
  pack_elem(c, o, dst, x0, p0, p_inner ? inner : outer, p_inner ? outer : inner);
  LLVMValueRef br = loop_close(c, &li);
  if (scalar) cpu_loop_scalar(c->g, br);
  cpu_loop_scalar(c->g, loop_close(c, &lo));
}

/* One panel, the inner loop along whichever of x and p is contiguous in
 * memory so the loads stream; full panels test that inner stride for 1,
 * so the common layouts get a loop with unit-stride loads, which
 * vectorizes. */
static void pack_panel(gemm *c, const operand *o, LLVMValueRef dst, LLVMValueRef x0, LLVMValueRef p0,
                       LLVMValueRef limit) {
  gbranch order;
  branch_open(c, &order, icmp(c, LLVMIntSLE, iabs(c, o->sp), iabs(c, o->sx)));
  for (int p_inner = 1; p_inner >= 0; p_inner--) {
    if (limit) {
      pack_loops(c, o, p_inner, true, dst, x0, p0, limit);
    } else {
      operand unit = *o;
      *(p_inner ? &unit.sp : &unit.sx) = c64(c, 1);
      gbranch contiguous;
      branch_open(c, &contiguous, icmp(c, LLVMIntEQ, p_inner ? o->sp : o->sx, c64(c, 1)));
      pack_loops(c, &unit, p_inner, false, dst, x0, p0, NULL);
      branch_otherwise(c, &contiguous);
      pack_loops(c, o, p_inner, true, dst, x0, p0, NULL);
      branch_close(c, &contiguous);
    }
    if (p_inner) branch_otherwise(c, &order);
  }
  branch_close(c, &order);
}

/* The window's tables for the panel of columns x0..x0+w: the first input
 * row and column each output position reads (oh*sh - ph, ow*sw - pw), and
 * for the columns at or past lim a row no tap reaches, so they pack as 0:
 * one division per column and panel, none per element. */
static void window_tables(gemm *c, const operand *o, LLVMValueRef x0, LLVMValueRef lim) {
  LLVMValueRef *v = o->win;
  gloop l;
  LLVMValueRef q = loop_open(c, &l, c64(c, 0), c64(c, o->w), c64(c, 1));
  LLVMValueRef col = add(c, x0, q), oh = LLVMBuildSDiv(c->b, col, v[KW_OW], "");
  LLVMValueRef ow = sub(c, col, mul(c, oh, v[KW_OW]));
  LLVMValueRef row = sub(c, mul(c, oh, v[KW_SH]), v[KW_PH]);
  row = LLVMBuildSelect(c->b, icmp(c, LLVMIntSLT, q, lim), row, c64(c, INT64_MIN / 4), "");
  LLVMBuildStore(c->b, row, gep(c, c->g->i64, o->rows, q));
  LLVMBuildStore(c->b, sub(c, mul(c, ow, v[KW_SW]), v[KW_PW]), gep(c, c->g->i64, o->cols, q));
  loop_close(c, &l);
}

/* Input coordinate at (on the spread input) along one dim: in range when
 * at >= 0, at % u == 0 and at / u < len; unit: u is 1, which the caller
 * tested, so one unsigned compare does. */
static LLVMValueRef window_coord(gemm *c, LLVMValueRef at, LLVMValueRef u, LLVMValueRef len, bool unit,
                                 LLVMValueRef *ok) {
  if (unit) {
    *ok = icmp(c, LLVMIntULT, at, len);
    return at;
  }
  LLVMValueRef pos = LLVMBuildUDiv(c->b, at, u, "");
  LLVMValueRef exact = icmp(c, LLVMIntEQ, LLVMBuildURem(c->b, at, u, ""), c64(c, 0));
  *ok = LLVMBuildAnd(c->b, LLVMBuildAnd(c->b, icmp(c, LLVMIntSGE, at, c64(c, 0)), exact, ""),
                     icmp(c, LLVMIntULT, pos, len), "");
  return pos;
}

/* dst[p*w + q] for depths p0..p0+kcur: per depth its channel and tap, then
 * along the panel the element each column's window reads there, or 0 (the
 * load reads the channel's first element instead, so it stays in bounds). */
static void window_rows(gemm *c, const operand *o, LLVMValueRef dst, LLVMValueRef p0, bool unit) {
  LLVMValueRef *v = o->win;
  gloop lp, lq;
  LLVMValueRef p = loop_open(c, &lp, c64(c, 0), c->kcur, c64(c, 1));
  LLVMValueRef k = add(c, p0, p), ch = LLVMBuildSDiv(c->b, k, v[KW_TAPS], "");
  LLVMValueRef tap = sub(c, k, mul(c, ch, v[KW_TAPS])), ti = LLVMBuildSDiv(c->b, tap, v[KW_KW], "");
  LLVMValueRef tj = sub(c, tap, mul(c, ti, v[KW_KW]));
  LLVMValueRef di = mul(c, ti, v[KW_DH]), dj = mul(c, tj, v[KW_DW]), base = mul(c, ch, v[KW_SC]);
  LLVMValueRef q = loop_open(c, &lq, c64(c, 0), c64(c, o->w), c64(c, 1));
  LLVMValueRef okh, okw;
  LLVMValueRef h = window_coord(c, add(c, LLVMBuildLoad2(c->b, c->g->i64, gep(c, c->g->i64, o->rows, q), ""), di),
                                v[KW_UH], v[KW_IN_H], unit, &okh);
  LLVMValueRef w = window_coord(c, add(c, LLVMBuildLoad2(c->b, c->g->i64, gep(c, c->g->i64, o->cols, q), ""), dj),
                                v[KW_UW], v[KW_IN_W], unit, &okw);
  LLVMValueRef ok = LLVMBuildAnd(c->b, okh, okw, "");
  LLVMValueRef at = add(c, base, add(c, mul(c, h, v[KW_SY]), mul(c, w, v[KW_SX])));
  LLVMValueRef e = load_elem(c, o, LLVMBuildSelect(c->b, ok, at, base, ""));
  e = LLVMBuildSelect(c->b, ok, e, LLVMConstNull(c->t), "");
  LLVMBuildStore(c->b, e, gep(c, c->t, dst, add(c, mulc(c, p, o->w), q)));
  loop_close(c, &lq);
  cpu_loop_scalar(c->g, loop_close(c, &lp));
}

/* One panel of the window (columns x0..x0+lim, the rest 0); the common
 * unit-step input (every convolution but a transposed one) skips the
 * divisions. */
static void pack_window(gemm *c, const operand *o, LLVMValueRef dst, LLVMValueRef x0, LLVMValueRef p0,
                        LLVMValueRef lim) {
  window_tables(c, o, x0, lim);
  gbranch unit;
  LLVMValueRef one = c64(c, 1);
  branch_open(c, &unit, LLVMBuildAnd(c->b, icmp(c, LLVMIntEQ, o->win[KW_UH], one), icmp(c, LLVMIntEQ, o->win[KW_UW], one), ""));
  window_rows(c, o, dst, p0, true);
  branch_otherwise(c, &unit);
  window_rows(c, o, dst, p0, false);
  branch_close(c, &unit);
}

/* Elements (x0 + 0..xext, p0 + 0..kcur) into panels of o->w, panel j at
 * dst + j*w*kc; the full panels first, then (at most) one zero-padded. */
static void pack(gemm *c, const operand *o, LLVMValueRef dst, LLVMValueRef x0, LLVMValueRef xext, LLVMValueRef p0) {
  for (int edge = 0; edge < 2; edge++) {
    LLVMValueRef nfull = LLVMBuildSDiv(c->b, xext, c64(c, o->w), "");
    LLVMValueRef start = edge ? nfull : c64(c, 0);
    LLVMValueRef end = edge ? LLVMBuildSDiv(c->b, add(c, xext, c64(c, o->w - 1)), c64(c, o->w), "") : nfull;
    gloop l;
    LLVMValueRef j = loop_open(c, &l, start, end, c64(c, 1));
    LLVMValueRef x = add(c, x0, mulc(c, j, o->w));
    LLVMValueRef pan = gep(c, c->t, dst, mul(c, mulc(c, j, o->w), c->kc));
    LLVMValueRef lim = edge ? sub(c, xext, mulc(c, j, o->w)) : NULL;
    if (o->win) pack_window(c, o, pan, x, p0, lim ? lim : c64(c, o->w));
    else pack_panel(c, o, pan, x, p0, lim);
    loop_close(c, &l);
  }
}

/* ---- the micro-kernel --------------------------------------------------- */
/* acc[r][v] starts at zero, or (later depth blocks) at the scratch C tile. */
static void micro_init(gemm *c, LLVMValueRef first, LLVMValueRef ctile) {
  gbranch br;
  branch_open(c, &br, first);
  for (int i = 0; i < MR * NV; i++) LLVMBuildStore(c->b, LLVMConstNull(c->vt), c->acc[i]);
  branch_otherwise(c, &br);
  for (int r = 0; r < MR; r++)
    for (int v = 0; v < NV; v++) {
      LLVMValueRef p = gep(c, c->t, ctile, add(c, mulc(c, c->nc, r), c64(c, v * c->lanes)));
      LLVMBuildStore(c->b, load_aligned(c, c->vt, p, VBYTES), c->acc[r * NV + v]);
    }
  branch_close(c, &br);
}

/* acc[r][v] += apan[p*MR + r] * bpan[p*NR + v*lanes ..] for p in 0..kcur. */
static void micro_loop(gemm *c, LLVMValueRef apan, LLVMValueRef bpan) {
  gloop l;
  LLVMValueRef p = loop_open(c, &l, c64(c, 0), c->kcur, c64(c, 1));
  LLVMValueRef bv[NV];
  for (int v = 0; v < NV; v++)
    bv[v] = load_aligned(c, c->vt, gep(c, c->t, bpan, add(c, mulc(c, p, c->nr), c64(c, v * c->lanes))), VBYTES);
  for (int r = 0; r < MR; r++) {
    LLVMValueRef a = splat(c, LLVMBuildLoad2(c->b, c->t, gep(c, c->t, apan, add(c, mulc(c, p, MR), c64(c, r))), ""), c->vt);
    for (int v = 0; v < NV; v++) {
      LLVMValueRef *slot = &c->acc[r * NV + v];
      LLVMValueRef args[3] = {a, bv[v], LLVMBuildLoad2(c->b, c->vt, *slot, "")};
      LLVMBuildStore(c->b, cpu_intrin(c->g, c->b, "llvm.fma", &c->vt, 1, args, 3), *slot);
    }
  }
  loop_close(c, &l);
}

static void micro_save(gemm *c, LLVMValueRef dst) {
  for (int r = 0; r < MR; r++)
    for (int v = 0; v < NV; v++) {
      LLVMValueRef p = gep(c, c->t, dst, add(c, mulc(c, c->nc, r), c64(c, v * c->lanes)));
      store_aligned(c, LLVMBuildLoad2(c->b, c->vt, c->acc[r * NV + v], ""), p, VBYTES);
    }
}

/* Where the sums of the row block starting at row ic live. */
static LLVMValueRef block_sums(gemm *c, LLVMValueRef ic) {
  LLVMValueRef at = LLVMBuildSelect(c->b, c->multi, mul(c, sub(c, ic, c->i0), c->nc), c64(c, 0), "");
  return gep(c, c->t, c->sums, at);
}

/* ---- the blocked loops -------------------------------------------------- */
typedef struct {
  LLVMValueRef pc;           /* the depth block's first depth */
  LLVMValueRef first, last;  /* whether it is the first / the last depth block */
  LLVMValueRef jc, ncur;     /* the column block: first column, columns */
} depth_block;

/* Rows ic..ic+mc of the packed A block times the packed B block, then (in
 * the last depth block) the epilogue on the finished sums. */
static void row_block(gemm *c, const operand *a, const depth_block *d, LLVMValueRef ic) {
  LLVMValueRef mcur = imin(c, c->mc, sub(c, c->i1, ic));
  pack(c, a, c->ap, ic, mcur, d->pc);
  LLVMValueRef sums = block_sums(c, ic);
  gloop lj, li;
  LLVMValueRef jr = loop_open(c, &lj, c64(c, 0), d->ncur, c64(c, c->nr));
  LLVMValueRef ir = loop_open(c, &li, c64(c, 0), mcur, c64(c, MR));
  LLVMValueRef apan = gep(c, c->t, c->ap, mul(c, ir, c->kc));
  LLVMValueRef bpan = gep(c, c->t, c->bp, mul(c, jr, c->kc));
  LLVMValueRef ctile = gep(c, c->t, sums, add(c, mul(c, ir, c->nc), jr));
  micro_init(c, d->first, ctile);
  micro_loop(c, apan, bpan);
  micro_save(c, ctile);
  loop_close(c, &li);
  loop_close(c, &lj);
  gbranch fin;
  branch_open(c, &fin, d->last);
  LLVMTypeRef et = cpu_gemm_epilogue_type(c->g);
  LLVMValueRef args[] = {LLVMGetParam(c->fn, P_CTX), sums, c->nc, ic, d->jc, mcur, d->ncur};
  LLVMBuildCall2(c->b, et, LLVMGetParam(c->fn, P_EPI), args, 7, "");
  branch_otherwise(c, &fin);
  branch_close(c, &fin);
}

static void blocked(gemm *c, const operand *a, const operand *b) {
  gloop lj, lp, li;
  depth_block d;
  d.jc = loop_open(c, &lj, c64(c, 0), c->n, c->nc);
  d.ncur = imin(c, c->nc, sub(c, c->n, d.jc));
  /* K = 0 still needs one (empty) depth block to run the epilogue. */
  LLVMValueRef kend = LLVMBuildSelect(c->b, icmp(c, LLVMIntSGT, c->kdim, c64(c, 0)), c->kdim, c64(c, 1), "");
  d.pc = loop_open(c, &lp, c64(c, 0), kend, c->kc);
  c->kcur = imin(c, c->kc, sub(c, c->kdim, d.pc));
  d.first = icmp(c, LLVMIntEQ, d.pc, c64(c, 0));
  d.last = icmp(c, LLVMIntSGE, add(c, d.pc, c->kc), c->kdim);
  pack(c, b, c->bp, d.jc, d.ncur, d.pc);
  LLVMValueRef ic = loop_open(c, &li, c->i0, c->i1, c->mc);
  row_block(c, a, &d, ic);
  loop_close(c, &li);
  loop_close(c, &lp);
  loop_close(c, &lj);
}

/* ---- small products ------------------------------------------------------ *
 * With B row-major and small (n <= SMALL_NV vectors, K x N within
 * SMALL_B_BYTES, so B stays in L1 across the rows), the sums come straight
 * from A and B: SR rows at a time (SR independent FMA chains hide the FMA
 * latency) times one vector of columns, the last one masked, no packing and
 * no zero-padded panels. For 16x16x16 f32 the packed path ran two 12x32
 * micro-tiles (3x the FMAs) after packing both operands, and it was the
 * bulk of a replayed product's time. */
enum {
  SR = 8,               /* rows of a small tile */
  SMALL_ROWS = 32,      /* rows per call of the epilogue (a multiple of SR) */
  SMALL_NV = 4,         /* the widest B, in vectors */
  SMALL_B_BYTES = 16384,
};

/* The lanes of the columns j.. that exist: lane l is on when l < left. */
static LLVMValueRef lanes_left(gemm *c, LLVMValueRef left) {
  LLVMValueRef iota[64];
  for (int64_t l = 0; l < c->lanes; l++) iota[l] = c64(c, l);
  LLVMTypeRef vi = LLVMVectorType(c->g->i64, (unsigned)c->lanes);
  return icmp(c, LLVMIntSLT, LLVMConstVector(iota, (unsigned)c->lanes), splat(c, left, vi));
}

/* sums[r*ld + j..] = rows row..row+nrows of A times B, for every vector j of
 * B's n columns. */
static void small_tile(gemm *c, const operand *a, LLVMValueRef b, LLVMValueRef row, int nrows, LLVMValueRef sums,
                       LLVMValueRef ld) {
  gloop lj, lp;
  LLVMValueRef j = loop_open(c, &lj, c64(c, 0), c->n, c64(c, c->lanes));
  LLVMValueRef mask = lanes_left(c, sub(c, c->n, j));
  for (int r = 0; r < nrows; r++) LLVMBuildStore(c->b, LLVMConstNull(c->vt), c->acc[r]);
  LLVMValueRef p = loop_open(c, &lp, c64(c, 0), c->kdim, c64(c, 1));
  LLVMValueRef at = gep(c, c->t, b, add(c, mul(c, p, LLVMGetParam(c->fn, P_BSK)), j));
  LLVMTypeRef over[] = {c->vt, c->g->ptr};
  LLVMValueRef bv = cpu_intrin(c->g, c->b, "llvm.masked.load", over, 2,
                               (LLVMValueRef[]){at, LLVMConstInt(c->g->i32, (unsigned)(VBYTES / c->lanes), 0),
                                                mask, LLVMConstNull(c->vt)}, 4);
  for (int r = 0; r < nrows; r++) {
    LLVMValueRef x = load_elem(c, a, add(c, mul(c, add(c, row, c64(c, r)), a->sx), mul(c, p, a->sp)));
    LLVMValueRef args[3] = {splat(c, x, c->vt), bv, LLVMBuildLoad2(c->b, c->vt, c->acc[r], "")};
    LLVMBuildStore(c->b, cpu_intrin(c->g, c->b, "llvm.fma", &c->vt, 1, args, 3), c->acc[r]);
  }
  loop_close(c, &lp);
  for (int r = 0; r < nrows; r++)
    store_aligned(c, LLVMBuildLoad2(c->b, c->vt, c->acc[r], ""), gep(c, c->t, sums, add(c, mulc(c, ld, r), j)), VBYTES);
  loop_close(c, &lj);
}

/* Rows i0..i1 in blocks of SMALL_ROWS: whole SR-row tiles, the rest a row
 * at a time, then the epilogue on the block's sums (ld: n rounded up to
 * whole vectors). */
static void small_product(gemm *c, const operand *a, LLVMValueRef sums) {
  LLVMValueRef b = LLVMGetParam(c->fn, P_B), ld = round_up(c, c->n, c->lanes);
  gloop li, lt, lr;
  LLVMValueRef ic = loop_open(c, &li, c->i0, c->i1, c64(c, SMALL_ROWS));
  LLVMValueRef mcur = imin(c, c64(c, SMALL_ROWS), sub(c, c->i1, ic)), full = mulc(c, LLVMBuildSDiv(c->b, mcur, c64(c, SR), ""), SR);
  LLVMValueRef r = loop_open(c, &lt, c64(c, 0), full, c64(c, SR));
  small_tile(c, a, b, add(c, ic, r), SR, gep(c, c->t, sums, mul(c, r, ld)), ld);
  loop_close(c, &lt);
  r = loop_open(c, &lr, full, mcur, c64(c, 1));
  small_tile(c, a, b, add(c, ic, r), 1, gep(c, c->t, sums, mul(c, r, ld)), ld);
  cpu_loop_scalar(c->g, loop_close(c, &lr));
  LLVMValueRef args[] = {LLVMGetParam(c->fn, P_CTX), sums, ld, ic, c64(c, 0), mcur, c->n};
  LLVMBuildCall2(c->b, cpu_gemm_epilogue_type(c->g), LLVMGetParam(c->fn, P_EPI), args, 7, "");
  loop_close(c, &li);
}

/* Whether this call takes the small path (B unit-stride along n and small). */
static LLVMValueRef small_case(gemm *c) {
  LLVMValueRef unit = icmp(c, LLVMIntEQ, LLVMGetParam(c->fn, P_BSN), c64(c, 1));
  LLVMValueRef narrow = icmp(c, LLVMIntSLE, c->n, c64(c, SMALL_NV * c->lanes));
  LLVMValueRef bytes = mulc(c, mul(c, c->n, c->kdim), VBYTES / c->lanes);
  return LLVMBuildAnd(c->b, LLVMBuildAnd(c->b, unit, narrow, ""), icmp(c, LLVMIntSLE, bytes, c64(c, SMALL_B_BYTES)), "");
}

/* ---- the driver function ------------------------------------------------ */
/* Block sizes shrunk to the problem, so small products use small buffers;
 * the accumulators' allocas come first in the entry block. */
static void setup(gemm *c, kiln_dtype t) {
  c->t = cpu_type(c->g, t);
  c->lanes = VBYTES / (int64_t)ir_dtypes[t].size;
  c->vt = LLVMVectorType(c->t, (unsigned)c->lanes);
  c->nr = NV * c->lanes;
  for (int i = 0; i < MR * NV; i++) {
    c->acc[i] = LLVMBuildAlloca(c->b, c->vt, "");
    LLVMSetAlignment(c->acc[i], VBYTES);
  }
  c->i0 = LLVMGetParam(c->fn, P_I0);
  c->i1 = LLVMGetParam(c->fn, P_I1);
  c->n = LLVMGetParam(c->fn, P_N);
  c->kdim = LLVMGetParam(c->fn, P_K);
  LLVMValueRef kmax = c64(c, KC_BYTES / (int64_t)ir_dtypes[t].size);
  c->kc = LLVMBuildSelect(c->b, icmp(c, LLVMIntSGT, c->kdim, c64(c, 0)), imin(c, kmax, c->kdim), c64(c, 1), "");
  c->mc = imin(c, c64(c, MC), round_up(c, sub(c, c->i1, c->i0), MR));
  c->nc = imin(c, c64(c, NC), round_up(c, c->n, c->nr));  /* NC is a multiple of NR */
  c->multi = icmp(c, LLVMIntSGT, c->kdim, c->kc);
}

/* The buffers (the sums of all rows of this call, in whole micro-tiles,
 * when K spans several depth blocks), the blocked product, the buffers
 * freed. */
static void packed(gemm *c, const operand *a, const operand *b) {
  LLVMValueRef rows = LLVMBuildSelect(c->b, c->multi, round_up(c, sub(c, c->i1, c->i0), MR), c->mc, "");
  buffers_alloc(c, mul(c, c->mc, c->kc), mul(c, c->nc, c->kc), mul(c, rows, c->nc));
  blocked(c, a, b);
  buffers_free(c);
}

/* Nothing to do for an empty row range or no columns; else a small product
 * straight from the operands, or the packed, blocked one. */
static void driver_body(gemm *c, const cpu_gemm_driver *d) {
  LLVMValueRef fn = c->fn;
  operand a = {LLVMGetParam(fn, P_A), d->a, LLVMGetParam(fn, P_ASI), LLVMGetParam(fn, P_ASK), MR, NULL, NULL, NULL};
  operand b = {LLVMGetParam(fn, P_B), d->b, LLVMGetParam(fn, P_BSN), LLVMGetParam(fn, P_BSK), c->nr, NULL, NULL, NULL};
  LLVMValueRef win[KW_N];
  if (d->win) {   /* the tables are allocas of the entry block, where this runs */
    for (int i = 0; i < KW_N; i++)
      win[i] = LLVMBuildLoad2(c->b, c->g->i64, gep(c, c->g->i64, LLVMGetParam(fn, P_WIN), c64(c, i)), "");
    b.win = win;
    b.rows = LLVMBuildArrayAlloca(c->b, c->g->i64, c64(c, c->nr), "");
    b.cols = LLVMBuildArrayAlloca(c->b, c->g->i64, c64(c, c->nr), "");
  }
  /* in the entry block: a fixed-size stack slot */
  LLVMValueRef small_sums = LLVMBuildArrayAlloca(c->b, c->t, c64(c, SMALL_ROWS * SMALL_NV * c->lanes), "");
  LLVMSetAlignment(small_sums, VBYTES);
  LLVMBasicBlockRef work = block(c, "gemm.work"), done = block(c, "gemm.ret");
  LLVMValueRef empty = LLVMBuildOr(c->b, icmp(c, LLVMIntSGE, c->i0, c->i1), icmp(c, LLVMIntSLE, c->n, c64(c, 0)), "");
  LLVMBuildCondBr(c->b, empty, done, work);
  LLVMPositionBuilderAtEnd(c->b, work);
  if (d->b == d->t && !d->win) {   /* the small path loads B as vectors of the compute type */
    gbranch small;
    branch_open(c, &small, small_case(c));
    small_product(c, &a, small_sums);
    branch_otherwise(c, &small);
    packed(c, &a, &b);
    branch_close(c, &small);
  } else {
    packed(c, &a, &b);
  }
  LLVMBuildBr(c->b, done);
  LLVMPositionBuilderAtEnd(c->b, done);
  LLVMBuildRetVoid(c->b);
}

LLVMTypeRef cpu_gemm_epilogue_type(cpu_cg *g) {
  LLVMTypeRef p[] = {g->ptr, g->ptr, g->i64, g->i64, g->i64, g->i64, g->i64};
  return LLVMFunctionType(g->vd, p, 7, 0);
}

LLVMTypeRef cpu_gemm_driver_type(cpu_cg *g) {
  LLVMTypeRef p[NPARAMS];
  for (int i = 0; i < NPARAMS; i++) p[i] = i == P_A || i == P_B || i == P_EPI || i == P_CTX || i == P_WIN ? g->ptr : g->i64;
  return LLVMFunctionType(g->vd, p, NPARAMS, 0);
}

cpu_gemm_driver cpu_gemm_driver_for(kiln_dtype t, kiln_dtype a, kiln_dtype b, bool win) {
  cpu_gemm_driver d = {.t = t, .a = a, .b = b, .win = win};
  IR_ASSERT((d.t == KILN_F32 || d.t == KILN_F64) && ir_compute_dtype(d.a) == d.t && ir_compute_dtype(d.b) == d.t);
  snprintf(d.name, sizeof d.name, "kiln.gemm.%s.%s.%s%s", ir_dtypes[d.t].short_name, ir_dtypes[d.a].short_name,
           ir_dtypes[d.b].short_name, d.win ? ".win" : "");
  return d;
}

cpu_gemm_driver cpu_gemm_driver_of(const kernel *k, const kstmt *s) {
  if (s->kind == KS_ATTN)
    return cpu_attn_driver(k->params[s->attn.q].dtype, s->attn.mask >= 0 ? (int)k->params[s->attn.mask].dtype : -1);
  return cpu_gemm_driver_for(s->type, k->params[s->gemm.a_buf].dtype, k->params[s->gemm.b_buf].dtype,
                             s->gemm.win != NULL);
}

static bool each_driver(const kernel *k, const kstmt *s, cpu_gemm_visit fn, void *ctx) {
  for (; s; s = s->next) {
    if (s->kind == KS_GEMM || s->kind == KS_ATTN) {
      cpu_gemm_driver d = cpu_gemm_driver_of(k, s);
      if (!fn(ctx, &d)) return false;
    }
    if ((s->kind == KS_LOOP || s->kind == KS_GEMM) && !each_driver(k, s->body, fn, ctx)) return false;
  }
  return true;
}

bool cpu_gemm_each_driver(const kernel *k, cpu_gemm_visit fn, void *ctx) { return each_driver(k, k->body, fn, ctx); }

LLVMModuleRef cpu_gemm_driver_module(LLVMContextRef ctx, const cpu_gemm_driver *d, const char *triple,
                                     const char *datalayout, const char *cpu, const char *features) {
  if (d->attn) return cpu_attn_block_module(ctx, d, triple, datalayout, cpu, features);
  cpu_cg g;
  cpu_cg_init(&g, ctx, d->name, triple, datalayout, cpu, features);
  gemm c = {.g = &g, .b = g.b};
  c.fn = LLVMAddFunction(g.mod, d->name, cpu_gemm_driver_type(&g));
  cpu_fn_attrs(&g, c.fn, false);
  cpu_param_attr(&g, c.fn, P_A + 1, "noalias");  /* read only, like B: the epilogue writes elsewhere */
  cpu_param_attr(&g, c.fn, P_B + 1, "noalias");
  LLVMPositionBuilderAtEnd(g.b, block(&c, "entry"));
  setup(&c, d->t);
  driver_body(&c, d);
  LLVMDisposeBuilder(g.b);
  return g.mod;
}
