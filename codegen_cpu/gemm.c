/* gemm.c: KS_GEMM (ir/kernel.h) -> a cache-blocked matrix product in BLIS's
 * loop order: column blocks of NC and depth blocks of KC (B packed into
 * NR-wide panels), row blocks of MC (A packed into MR-high panels), and a
 * register-blocked micro-kernel of MR x NR accumulators (llvm.fma on <16 x
 * float> or <8 x double>: 24 of the 32 zmm registers). The partial sums of
 * all depth blocks but the last wait in a scratch C. The finished sums of a
 * row block (in the scratch C, or a row-block buffer when K fits in one
 * depth block) then go through the KS_GEMM body (the epilogue) row by row,
 * in loops long enough to vectorize well; per 12 x 32 micro-tile, gelu's
 * epilogue cost twice what a separate gelu kernel does.
 * KC is deep on purpose: a KC x NR panel of B no longer fits in L1, but the
 * micro-kernel does 24 FMAs per 176 bytes it loads, which L2 feeds easily,
 * and with K <= KC there is no scratch C to write, read back and page in.
 * On Zen 4 (x @ W^T, 4096x1024x1024) this took the product from 47 ms to
 * 42 ms on 2 threads, level with OpenBLAS; KC = 256 had it at 0.87x. f64
 * keeps the A block at the same 384 KiB (KC = 1024): 2048 made a 2048^3
 * product 20% slower. */
#include "codegen_cpu/cpu_impl.h"

#include <stdlib.h>

enum {
  MR = 12,     /* micro-tile rows: A elements broadcast per k */
  NV = 2,      /* vectors per micro-tile row: NR = NV * lanes */
  KC_BYTES = 8192, /* depth block KC of 2048 f32 or 1024 f64: products with K <= KC keep each
                      micro-tile's sums in registers over all of K */
  MC = 48,     /* row block (a multiple of MR): MC x KC of A (384 KiB) stays in L2 */
  NC = 1024,   /* column block: KC x NC of B stays in L3 */
  VBYTES = 64, /* one zmm register */
};

typedef struct {
  emitter *em;
  const kstmt *s;
  cpu_cg *g;
  LLVMBuilderRef b;
  LLVMTypeRef t, vt;         /* compute type and its 512-bit vector */
  int64_t lanes, nr;         /* vector lanes; NR */
  int64_t kc, mc, nc;        /* block sizes, shrunk to the problem (nc, mc: multiples of NR, MR) */
  LLVMValueRef i0, i1;       /* the rows this call computes */
  LLVMValueRef ap, bp, cs;   /* packed A block, packed B block, scratch C (rows x nc; NULL if one depth block) */
  LLVMValueRef rb;           /* finished sums of one row block (mc x nc) when there is no scratch C */
  LLVMValueRef acc[MR * NV]; /* accumulator vectors: allocas that SROA turns into registers */
} gemm;

/* One operand as packing sees it: element (x, p) is
 * buf[off + x*sx + p*sp] with x the row of A or column of B, p the depth. */
typedef struct {
  int buf;
  LLVMValueRef off;
  int64_t sx, sp, w;         /* strides; panel width (MR or NR) */
} operand;

/* ---- small helpers ------------------------------------------------------ */
static LLVMValueRef c64(gemm *c, int64_t v) { return LLVMConstInt(c->g->i64, (unsigned long long)v, 1); }
static LLVMValueRef add(gemm *c, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAdd(c->b, a, b, ""); }
static LLVMValueRef mul(gemm *c, LLVMValueRef a, int64_t k) { return LLVMBuildMul(c->b, a, c64(c, k), ""); }
static LLVMValueRef sub(gemm *c, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildSub(c->b, a, b, ""); }
static int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static LLVMValueRef imin(gemm *c, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, a, b, ""), a, b, "");
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

/* An alloca in the entry block, where LLVM expects static ones. */
static LLVMValueRef entry_alloca(gemm *c, LLVMTypeRef t) {
  LLVMBuilderRef eb = LLVMCreateBuilderInContext(c->g->ctx);
  LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(c->em->fn);
  LLVMValueRef first = LLVMGetFirstInstruction(entry);
  if (first) LLVMPositionBuilderBefore(eb, first);
  else LLVMPositionBuilderAtEnd(eb, entry);
  LLVMValueRef a = LLVMBuildAlloca(eb, t, "");
  LLVMSetAlignment(a, VBYTES);
  LLVMDisposeBuilder(eb);
  return a;
}

/* A process function (the JIT resolves it through the process's symbols). */
static LLVMValueRef libc_call(gemm *c, const char *name, LLVMTypeRef ret, LLVMTypeRef *params, unsigned n,
                              LLVMValueRef *args) {
  LLVMTypeRef ft = LLVMFunctionType(ret, params, n, 0);
  LLVMValueRef fn = LLVMGetNamedFunction(c->g->mod, name);
  if (!fn) fn = LLVMAddFunction(c->g->mod, name, ft);
  return LLVMBuildCall2(c->b, ft, fn, args, n, "");
}

/* n elements of the compute type, 64-byte aligned (n rounded up so
 * aligned_alloc's size is a multiple of the alignment). */
static LLVMValueRef buffer_alloc(gemm *c, LLVMValueRef n) {
  LLVMValueRef bytes = mul(c, n, (int64_t)(VBYTES / c->lanes));
  bytes = LLVMBuildAnd(c->b, add(c, bytes, c64(c, VBYTES - 1)), c64(c, -VBYTES), "");
  return libc_call(c, "aligned_alloc", c->g->ptr, (LLVMTypeRef[]){c->g->i64, c->g->i64}, 2,
                   (LLVMValueRef[]){c64(c, VBYTES), bytes});
}

static void buffer_free(gemm *c, LLVMValueRef p) {
  if (p) libc_call(c, "free", c->g->vd, &c->g->ptr, 1, &p);
}

/* ---- loops -------------------------------------------------------------- */
typedef struct {
  LLVMValueRef iv, end;
  int64_t step;
  LLVMBasicBlockRef body, exit;
} gloop;

/* for iv = start; iv < end; iv += step (guarded: it may run zero times). */
static LLVMValueRef loop_open(gemm *c, gloop *l, LLVMValueRef start, LLVMValueRef end, int64_t step) {
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(c->b);
  l->end = end;
  l->step = step;
  l->body = LLVMAppendBasicBlockInContext(c->g->ctx, c->em->fn, "gemm.loop");
  l->exit = LLVMAppendBasicBlockInContext(c->g->ctx, c->em->fn, "gemm.end");
  LLVMBuildCondBr(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, start, end, ""), l->body, l->exit);
  LLVMPositionBuilderAtEnd(c->b, l->body);
  l->iv = LLVMBuildPhi(c->b, c->g->i64, "");
  LLVMAddIncoming(l->iv, &start, &pre, 1);
  return l->iv;
}

/* Returns the latch branch (for loop metadata). */
static LLVMValueRef loop_close(gemm *c, gloop *l) {
  LLVMValueRef next = LLVMBuildNSWAdd(c->b, l->iv, c64(c, l->step), "");
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(c->b);
  LLVMValueRef br = LLVMBuildCondBr(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, next, l->end, ""), l->body, l->exit);
  LLVMAddIncoming(l->iv, &next, &latch, 1);
  LLVMPositionBuilderAtEnd(c->b, l->exit);
  return br;
}

/* ---- packing ------------------------------------------------------------ */
/* Element idx of parameter buf in the compute type: f16 and bf16 widen to f32. */
static LLVMValueRef load_elem(gemm *c, int buf, LLVMValueRef idx) {
  cpu_cg *g = c->g;
  kiln_dtype st = c->em->k->params[buf].dtype;
  IR_ASSERT(ir_compute_dtype(st) == c->s->type);
  LLVMTypeRef mt = st == KILN_F16 ? g->f16 : st == KILN_BF16 ? g->i16 : c->t;
  LLVMValueRef v = LLVMBuildLoad2(c->b, mt, gep(c, mt, c->em->bufs[buf], idx), "");
  if (st == KILN_F16) return LLVMBuildFPExt(c->b, v, g->f32, "");
  if (st != KILN_BF16) return v;
  v = LLVMBuildShl(c->b, LLVMBuildZExt(c->b, v, g->i32, ""), LLVMConstInt(g->i32, 16, 0), "");
  return LLVMBuildBitCast(c->b, v, g->f32, "");
}

/* dst[p*w + q] = element (x0 + q, p0 + p); with limit, columns q >= limit
 * are zero (the edge panel) and their loads are clamped to x0. */
static void pack_elem(gemm *c, const operand *o, LLVMValueRef dst, LLVMValueRef x0, LLVMValueRef p0,
                      LLVMValueRef p, LLVMValueRef q, LLVMValueRef limit) {
  LLVMValueRef valid = limit ? LLVMBuildICmp(c->b, LLVMIntSLT, q, limit, "") : NULL;
  LLVMValueRef x = add(c, x0, valid ? LLVMBuildSelect(c->b, valid, q, c64(c, 0), "") : q);
  LLVMValueRef idx = add(c, o->off, add(c, mul(c, x, o->sx), mul(c, add(c, p0, p), o->sp)));
  LLVMValueRef v = load_elem(c, o->buf, idx);
  if (valid) v = LLVMBuildSelect(c->b, valid, v, LLVMConstNull(c->t), "");
  LLVMBuildStore(c->b, v, gep(c, c->t, dst, add(c, mul(c, p, o->w), q)));
}

/* One panel, the inner loop along whichever of x and p is contiguous in
 * memory so the loads stream (and vectorize). */
static void pack_panel(gemm *c, const operand *o, LLVMValueRef dst, LLVMValueRef x0, LLVMValueRef p0,
                       LLVMValueRef kc, LLVMValueRef limit) {
  gloop lp, lq;
  LLVMValueRef zero = c64(c, 0);
  if (llabs(o->sp) <= llabs(o->sx)) {
    LLVMValueRef q = loop_open(c, &lq, zero, c64(c, o->w), 1);
    LLVMValueRef p = loop_open(c, &lp, zero, kc, 1);
    pack_elem(c, o, dst, x0, p0, p, q, limit);
    loop_close(c, &lp);
    loop_close(c, &lq);
  } else {
    LLVMValueRef p = loop_open(c, &lp, zero, kc, 1);
    LLVMValueRef q = loop_open(c, &lq, zero, c64(c, o->w), 1);
    pack_elem(c, o, dst, x0, p0, p, q, limit);
    loop_close(c, &lq);
    loop_close(c, &lp);
  }
}

/* Elements (x0 + 0..xext, p0 + 0..kc) into panels of o->w, panel j at
 * dst + j*w*c->kc; the full panels first, then (at most) one zero-padded. */
static void pack(gemm *c, const operand *o, LLVMValueRef dst, LLVMValueRef x0, LLVMValueRef xext, LLVMValueRef p0,
                 LLVMValueRef kc) {
  for (int edge = 0; edge < 2; edge++) {
    LLVMValueRef nfull = LLVMBuildSDiv(c->b, xext, c64(c, o->w), "");
    LLVMValueRef start = edge ? nfull : c64(c, 0);
    LLVMValueRef end = edge ? LLVMBuildSDiv(c->b, add(c, xext, c64(c, o->w - 1)), c64(c, o->w), "") : nfull;
    gloop l;
    LLVMValueRef j = loop_open(c, &l, start, end, 1);
    LLVMValueRef x = add(c, x0, mul(c, j, o->w));
    LLVMValueRef pan = gep(c, c->t, dst, mul(c, j, o->w * c->kc));
    pack_panel(c, o, pan, x, p0, kc, edge ? sub(c, xext, mul(c, j, o->w)) : NULL);
    loop_close(c, &l);
  }
}

/* ---- the micro-kernel and the epilogue ---------------------------------- */
/* acc[r][v] starts at zero, or (later depth blocks) at the scratch C tile. */
static void micro_init(gemm *c, LLVMValueRef first, LLVMValueRef ctile) {
  LLVMBasicBlockRef zero = LLVMAppendBasicBlockInContext(c->g->ctx, c->em->fn, "gemm.zero");
  LLVMBasicBlockRef load = LLVMAppendBasicBlockInContext(c->g->ctx, c->em->fn, "gemm.resume");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->g->ctx, c->em->fn, "gemm.init");
  LLVMBuildCondBr(c->b, first, zero, load);
  LLVMPositionBuilderAtEnd(c->b, zero);
  for (int i = 0; i < MR * NV; i++) LLVMBuildStore(c->b, LLVMConstNull(c->vt), c->acc[i]);
  LLVMBuildBr(c->b, done);
  LLVMPositionBuilderAtEnd(c->b, load);
  for (int r = 0; r < MR; r++)
    for (int v = 0; v < NV; v++) {
      LLVMValueRef p = gep(c, c->t, ctile, c64(c, r * c->nc + v * c->lanes));
      LLVMBuildStore(c->b, load_aligned(c, c->vt, p, VBYTES), c->acc[r * NV + v]);
    }
  LLVMBuildBr(c->b, done);
  LLVMPositionBuilderAtEnd(c->b, done);
}

/* acc[r][v] += apan[p*MR + r] * bpan[p*NR + v*lanes ..] for p in 0..kc. */
static void micro_loop(gemm *c, LLVMValueRef apan, LLVMValueRef bpan, LLVMValueRef kc) {
  gloop l;
  LLVMValueRef p = loop_open(c, &l, c64(c, 0), kc, 1);
  LLVMValueRef bv[NV];
  for (int v = 0; v < NV; v++)
    bv[v] = load_aligned(c, c->vt, gep(c, c->t, bpan, add(c, mul(c, p, c->nr), c64(c, v * c->lanes))), VBYTES);
  LLVMValueRef zeros = LLVMConstNull(LLVMVectorType(c->g->i32, (unsigned)c->lanes));
  for (int r = 0; r < MR; r++) {
    LLVMValueRef a = LLVMBuildLoad2(c->b, c->t, gep(c, c->t, apan, add(c, mul(c, p, MR), c64(c, r))), "");
    a = LLVMBuildInsertElement(c->b, LLVMGetUndef(c->vt), a, LLVMConstInt(c->g->i32, 0, 0), "");
    a = LLVMBuildShuffleVector(c->b, a, LLVMGetUndef(c->vt), zeros, "");
    for (int v = 0; v < NV; v++) {
      LLVMValueRef *slot = &c->acc[r * NV + v];
      LLVMValueRef args[3] = {a, bv[v], LLVMBuildLoad2(c->b, c->vt, *slot, "")};
      LLVMBuildStore(c->b, cpu_intrin(c->g, c->b, "llvm.fma", &c->vt, 1, args, 3), *slot);
    }
  }
  loop_close(c, &l);
}

static void micro_save(gemm *c, LLVMValueRef dst, int64_t row_stride) {
  for (int r = 0; r < MR; r++)
    for (int v = 0; v < NV; v++) {
      LLVMValueRef p = gep(c, c->t, dst, c64(c, r * row_stride + v * c->lanes));
      store_aligned(c, LLVMBuildLoad2(c->b, c->vt, c->acc[r * NV + v], ""), p, VBYTES);
    }
}

/* The KS_GEMM body for each element (ic + r, jc + q) of a finished row
 * block whose sums wait in `sums` (row stride nc): one loop over whole rows
 * of the block, long enough to vectorize well, while the block is in L2.
 * The body is emitted once. */
static void epilogue(gemm *c, LLVMValueRef sums, LLVMValueRef ic, LLVMValueRef jc, LLVMValueRef mcur,
                     LLVMValueRef ncur) {
  const kstmt *s = c->s;
  emitter *em = c->em;
  int mark = cpu_emit_mark(em), wide = em->wide_math_calls;
  gloop lr, lq;
  LLVMValueRef r = loop_open(c, &lr, c64(c, 0), mcur, 1);
  LLVMValueRef q = loop_open(c, &lq, c64(c, 0), ncur, 1);
  em->vars[s->var] = add(c, ic, r);
  em->vars[s->gemm.var_j] = add(c, jc, q);
  LLVMValueRef v = LLVMBuildLoad2(c->b, c->t, gep(c, c->t, sums, add(c, mul(c, r, c->nc), q)), "");
  LLVMBuildStore(c->b, v, cpu_acc_slot(em, s->acc, s->type));
  cpu_emit_block(em, s->body);
  cpu_latency_hint(em, loop_close(c, &lq), wide);
  loop_close(c, &lr);
  cpu_emit_forget(em, mark);
}

/* Where the sums of the row block starting at row ic live. */
static LLVMValueRef block_sums(gemm *c, LLVMValueRef ic) {
  return c->cs ? gep(c, c->t, c->cs, mul(c, sub(c, ic, c->i0), c->nc)) : c->rb;
}

/* One micro-tile at rows row0.., columns col0.. (absolute; ic and jc are
 * the row and column block's first row and column): resume from the
 * scratch C (if any), multiply, and save the sums there, or to the row
 * block's buffer. */
static void micro_tile(gemm *c, LLVMValueRef apan, LLVMValueRef bpan, LLVMValueRef kc, LLVMValueRef first,
                       LLVMValueRef row0, LLVMValueRef col0, LLVMValueRef ic, LLVMValueRef jc) {
  LLVMValueRef at = add(c, mul(c, sub(c, row0, ic), c->nc), sub(c, col0, jc));
  LLVMValueRef ctile = gep(c, c->t, block_sums(c, ic), at);
  if (c->cs) {
    micro_init(c, first, ctile);
  } else {
    for (int i = 0; i < MR * NV; i++) LLVMBuildStore(c->b, LLVMConstNull(c->vt), c->acc[i]);
  }
  micro_loop(c, apan, bpan, kc);
  micro_save(c, ctile, c->nc);
}

/* ---- the blocked loops -------------------------------------------------- */
/* Rows ic..ic+mc of the packed A block times the packed B block. */
static void row_block(gemm *c, const operand *a, LLVMValueRef ic, LLVMValueRef pc, LLVMValueRef kc,
                      LLVMValueRef first, LLVMValueRef last, LLVMValueRef jc, LLVMValueRef ncur) {
  LLVMValueRef mcur = imin(c, c64(c, c->mc), sub(c, c->i1, ic));
  pack(c, a, c->ap, ic, mcur, pc, kc);
  gloop lj, li;
  LLVMValueRef jr = loop_open(c, &lj, c64(c, 0), ncur, c->nr);
  LLVMValueRef ir = loop_open(c, &li, c64(c, 0), mcur, MR);
  LLVMValueRef apan = gep(c, c->t, c->ap, mul(c, ir, c->kc));
  LLVMValueRef bpan = gep(c, c->t, c->bp, mul(c, jr, c->kc));
  micro_tile(c, apan, bpan, kc, first, add(c, ic, ir), add(c, jc, jr), ic, jc);
  loop_close(c, &li);
  loop_close(c, &lj);
  LLVMBasicBlockRef fin = LLVMAppendBasicBlockInContext(c->g->ctx, c->em->fn, "gemm.epilogue");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->g->ctx, c->em->fn, "gemm.done");
  LLVMBuildCondBr(c->b, last, fin, done);
  LLVMPositionBuilderAtEnd(c->b, fin);
  epilogue(c, block_sums(c, ic), ic, jc, mcur, ncur);
  LLVMBuildBr(c->b, done);
  LLVMPositionBuilderAtEnd(c->b, done);
}

static void blocked(gemm *c, const operand *a, const operand *b) {
  const kstmt *s = c->s;
  int64_t kdim = s->gemm.kdim;
  gloop lj, lp, li;
  LLVMValueRef jc = loop_open(c, &lj, c64(c, 0), c64(c, s->gemm.n), c->nc);
  LLVMValueRef ncur = imin(c, c64(c, c->nc), sub(c, c64(c, s->gemm.n), jc));
  /* K = 0 still needs one (empty) depth block to run the epilogue. */
  LLVMValueRef pc = loop_open(c, &lp, c64(c, 0), c64(c, kdim > 0 ? kdim : 1), c->kc);
  LLVMValueRef kc = imin(c, c64(c, c->kc), sub(c, c64(c, kdim), pc));
  LLVMValueRef first = LLVMBuildICmp(c->b, LLVMIntEQ, pc, c64(c, 0), "");
  LLVMValueRef last = LLVMBuildICmp(c->b, LLVMIntSGE, add(c, pc, c64(c, c->kc)), c64(c, kdim), "");
  pack(c, b, c->bp, jc, ncur, pc, kc);
  LLVMValueRef ic = loop_open(c, &li, c->i0, c->i1, c->mc);
  row_block(c, a, ic, pc, kc, first, last, jc, ncur);
  loop_close(c, &li);
  loop_close(c, &lp);
  loop_close(c, &lj);
}

/* Block sizes shrunk to the problem, so small products use small buffers. */
static void setup(gemm *c, emitter *em, const kstmt *s) {
  *c = (gemm){.em = em, .s = s, .g = &em->g, .b = em->g.b};
  IR_ASSERT(s->type == KILN_F32 || s->type == KILN_F64);
  c->t = cpu_type(c->g, s->type);
  c->lanes = VBYTES / (int64_t)ir_dtypes[s->type].size;
  c->vt = LLVMVectorType(c->t, (unsigned)c->lanes);
  c->nr = NV * c->lanes;
  c->kc = s->gemm.kdim > 0 ? min64(KC_BYTES / (int64_t)ir_dtypes[s->type].size, s->gemm.kdim) : 1;
  c->mc = min64(MC, round_up(s->extent, MR));
  c->nc = min64(round_up(NC, c->nr), round_up(s->gemm.n, c->nr));
  bool top = em->k->body == s;
  c->i0 = top ? em->lo : c64(c, 0);
  c->i1 = top ? em->hi : c64(c, s->extent);
  for (int i = 0; i < MR * NV; i++) c->acc[i] = entry_alloca(c, c->vt);
}

void cpu_emit_gemm(emitter *em, const kstmt *s) {
  if (s->extent <= 0 || s->gemm.n <= 0) return;
  gemm c;
  setup(&c, em, s);
  operand a = {s->gemm.a_buf, cpu_emit_expr(em, s->gemm.a_off), s->gemm.a_si, s->gemm.a_sk, MR};
  operand b = {s->gemm.b_buf, cpu_emit_expr(em, s->gemm.b_off), s->gemm.b_sn, s->gemm.b_sk, c.nr};
  c.ap = buffer_alloc(&c, c64(&c, c.mc * c.kc));
  c.bp = buffer_alloc(&c, c64(&c, c.nc * c.kc));
  if (s->gemm.kdim > c.kc) {  /* rows of this call, rounded up to whole micro-tiles */
    LLVMValueRef rows = add(&c, sub(&c, c.i1, c.i0), c64(&c, MR - 1));
    rows = mul(&c, LLVMBuildSDiv(c.b, rows, c64(&c, MR), ""), MR);
    c.cs = buffer_alloc(&c, mul(&c, rows, c.nc));
  } else {
    c.rb = buffer_alloc(&c, c64(&c, c.mc * c.nc));
  }
  blocked(&c, &a, &b);
  buffer_free(&c, c.cs);
  buffer_free(&c, c.rb);
  buffer_free(&c, c.bp);
  buffer_free(&c, c.ap);
}
