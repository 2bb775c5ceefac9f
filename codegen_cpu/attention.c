/* attention.c: the fused attention that CPU kernels call (KS_ATTN, resolved
 * by the JIT like libm): one block of query rows of one (batch, head) against
 * blocks of keys with an online softmax (the FlashAttention recurrence), so
 * the L x S scores never exist: memory is O(rows * (keys + head dim)). Its
 * two products per key block, q k^T and p v, run on the JIT's GEMM driver
 * (gemm.c: packing, register-blocked FMA micro-kernel) handed in by the
 * kernel; the softmax step between them is plain C. */
#include "codegen_cpu/cpu_impl.h"
#include "ir/alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { KEYS = 64,      /* keys per block: each product's packed blocks fit gemm.c's stack buffers */
       LANES = 8,      /* independent chains of a max or sum over a block's keys */
       STACK_SCRATCH = 32 * 1024 };   /* the scratch of a block up to this lives on the stack */

/* The statement's fields (cpu_impl.h's CPU_ATTN_* words) and pointers. */
typedef struct {
  const char *q, *k, *v, *mask;
  char *out;
  int64_t row0, rows, l, s, e, ev;
  const int64_t *st;
  int32_t dt, mask_dt;
  bool causal;
  double scale;
} attn;

/* Element i (in elements) of p: the kernel's dtypes are f32 and f64. */
static double elem(const void *p, int64_t i, int32_t dt) {
  if (dt == KILN_F32) return ((const float *)p)[i];
  return ((const double *)p)[i];
}

static void put(void *p, int64_t i, int32_t dt, double x) {
  if (dt == KILN_F32) ((float *)p)[i] = (float)x;
  else ((double *)p)[i] = x;
}

/* Score of query row i and key j through the mask: s, -inf, or s + mask. */
static double masked(const attn *a, int64_t i, int64_t j, double s) {
  if (!a->mask) return s;
  int64_t at = i * a->st[6] + j * a->st[7];
  if (a->mask_dt == KILN_BOOL) return a->mask[at] ? s : -INFINITY;
  return s + elem(a->mask, at, a->mask_dt);
}

/* Keys a query row sees: all, or (causal) those up to its own position. */
static int64_t keys_of(const attn *a, int64_t i) { return a->causal ? (i + 1 < a->s ? i + 1 : a->s) : a->s; }

/* The scratch of one block: in f64 the running max and sum of each query
 * row, and in q's dtype a block of scores (then of their exps, the left
 * operand of p v) and the output rows. */
typedef struct {
  const attn *a;
  double *m, *sum;
  void *sc, *acc;
  int64_t rows, j0;          /* the key block being added */
} scratch;

static size_t scratch_bytes(const attn *a, int64_t rows) {
  size_t es = a->dt == KILN_F32 ? sizeof(float) : sizeof(double);
  return sizeof(double) * (size_t)(2 * rows) + es * (size_t)(rows * (KEYS + a->ev));
}

/* The scratch in p (scratch_bytes of it, aligned for doubles). */
static void scratch_at(scratch *w, const attn *a, int64_t rows, double *p) {
  size_t es = a->dt == KILN_F32 ? sizeof(float) : sizeof(double);
  *w = (scratch){a, p, p + rows, p + 2 * rows, (char *)(p + 2 * rows) + es * (size_t)(rows * KEYS), rows, 0};
}

/* e^x for x <= 0 or nan in f32, vectorizable (no call, no branch): x = n
 * ln2 + r with |r| <= ln2/2, e^r by its degree-6 Taylor polynomial (error
 * under 2 ulp), times 2^n built in the exponent bits; x < -87 gives 0. */
static inline float exp_f32(float x) {
  const float shift = 12582912.0f;   /* 1.5 * 2^23: adding it rounds to an integer (SSE2 has no roundps) */
  float n = ((x < -87.0f ? -87.0f : x) * 1.44269504f + shift) - shift;
  float r = x - n * 0.693145752f - n * 1.42860677e-6f;
  float p = 1 + r * (1 + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  int32_t bits = ((int32_t)n + 127) << 23;
  float two;
  memcpy(&two, &bits, sizeof two);
  return x != x ? x : x < -87.0f ? 0 : p * two;
}

/* The typed parts, once per compute type T with its exp: the GEMM's
 * epilogues (q k^T's sums become the score block, p v's are added to the
 * output rows) and the softmax step of row r against keys j0 .. j0+nb: the
 * scores scaled and masked, the new running max m', the old sum and output
 * rescaled by exp(m - m'), and the scores replaced by p = exp(s - m') (0
 * for a dropped key), which the p v product then adds in. While every
 * score so far is -inf the row adds nothing. */
#define ATTN_TYPED(T, SUF, EXP)                                                                                       \
  /* max and sum in LANES independent chains, which gcc turns into vector ops */                                    \
  static T max_##SUF(const T *x, int64_t n) {                                                                        \
    T part[LANES], mx = -INFINITY;                                                                                   \
    int64_t j = 0;                                                                                                   \
    for (int l = 0; l < LANES; l++) part[l] = -INFINITY;                                                             \
    for (; j + LANES <= n; j += LANES)                                                                               \
      for (int l = 0; l < LANES; l++) part[l] = x[j + l] > part[l] ? x[j + l] : part[l];                             \
    for (; j < n; j++) mx = x[j] > mx ? x[j] : mx;                                                                   \
    for (int l = 0; l < LANES; l++) mx = part[l] > mx ? part[l] : mx;                                                \
    return mx;                                                                                                       \
  }                                                                                                                  \
  static T sum_##SUF(const T *x, int64_t n) {                                                                        \
    T part[LANES] = {0}, sum = 0;                                                                                    \
    int64_t j = 0;                                                                                                   \
    for (; j + LANES <= n; j += LANES)                                                                               \
      for (int l = 0; l < LANES; l++) part[l] += x[j + l];                                                           \
    for (; j < n; j++) sum += x[j];                                                                                  \
    for (int l = 0; l < LANES; l++) sum += part[l];                                                                  \
    return sum;                                                                                                      \
  }                                                                                                                  \
  static void scores_##SUF(void *ctx, const void *sums, int64_t ld, int64_t i, int64_t j, int64_t rows,            \
                           int64_t cols) {                                                                           \
    const scratch *w = ctx;                                                                                          \
    for (int64_t r = 0; r < rows; r++)                                                                               \
      memcpy((T *)w->sc + (i + r) * KEYS + j, (const T *)sums + r * ld, sizeof(T) * (size_t)cols);                \
  }                                                                                                                  \
  static void output_##SUF(void *ctx, const void *sums, int64_t ld, int64_t i, int64_t j, int64_t rows,            \
                           int64_t cols) {                                                                           \
    const scratch *w = ctx;                                                                                          \
    for (int64_t r = 0; r < rows; r++) {                                                                             \
      T *acc = (T *)w->acc + (i + r) * w->a->ev + j;                                                                 \
      const T *add = (const T *)sums + r * ld;                                                                       \
      for (int64_t c = 0; c < cols; c++) acc[c] += add[c];                                                           \
    }                                                                                                                \
  }                                                                                                                  \
  static void step_##SUF(const scratch *w, int64_t r, int64_t nb) {                                                \
    const attn *a = w->a;                                                                                            \
    int64_t i = a->row0 + r, seen = keys_of(a, i) - w->j0;                                                           \
    T *sc = (T *)w->sc + r * KEYS, *acc = (T *)w->acc + r * a->ev, mx = -INFINITY, scale = (T)a->scale;              \
    seen = seen < 0 ? 0 : seen > nb ? nb : seen;   /* a causal row before j0 sees none of the block */             \
    for (int64_t j = 0; j < seen; j++) sc[j] *= scale;                                                               \
    for (int64_t j = 0; a->mask && j < seen; j++) sc[j] = (T)masked(a, i, w->j0 + j, sc[j]);                          \
    for (int64_t j = seen; j < nb; j++) sc[j] = -INFINITY;                                                           \
    mx = max_##SUF(sc, nb);                                                                                          \
    double m = w->m[r] > mx ? w->m[r] : mx, alpha = exp(w->m[r] - m);                                               \
    if (m == -INFINITY) {                                                                                            \
      memset(sc, 0, sizeof *sc * (size_t)nb);                                                                        \
      return;                                                                                                        \
    }                                                                                                                \
    if (alpha != 1) {                                                                                                \
      w->sum[r] *= alpha;                                                                                            \
      for (int64_t c = 0; c < a->ev; c++) acc[c] *= (T)alpha;                                                        \
    }                                                                                                                \
    w->m[r] = m;                                                                                                     \
    T tm = (T)m;                                                                                                     \
    for (int64_t j = 0; j < nb; j++) sc[j] = EXP(sc[j] - tm);                                                        \
    w->sum[r] += sum_##SUF(sc, nb);                                                                                  \
  }
ATTN_TYPED(float, f32, exp_f32)
ATTN_TYPED(double, f64, exp)

typedef struct {
  cpu_gemm_epilogue *scores, *output;
  void (*step)(const scratch *w, int64_t r, int64_t nb);
} typed;

/* The rows' key blocks: q k^T for the block (the GEMM reads q and k in
 * place through their strides), the softmax step, then p v added. */
static void block(const attn *a, scratch *w, cpu_gemm_fn *gemm) {
  bool f32 = a->dt == KILN_F32;
  size_t es = f32 ? sizeof(float) : sizeof(double);
  typed t = f32 ? (typed){scores_f32, output_f32, step_f32} : (typed){scores_f64, output_f64, step_f64};
  const char *q = a->q + (size_t)(a->row0 * a->st[0]) * es;
  for (int64_t r = 0; r < w->rows; r++) w->m[r] = -INFINITY, w->sum[r] = 0;
  memset(w->acc, 0, es * (size_t)(w->rows * a->ev));
  int64_t last = keys_of(a, a->row0 + w->rows - 1);
  for (w->j0 = 0; w->j0 < last; w->j0 += KEYS) {
    int64_t nb = last - w->j0 < KEYS ? last - w->j0 : KEYS;
    gemm(q, a->st[0], a->st[1], a->k + (size_t)(w->j0 * a->st[2]) * es, a->st[3], a->st[2], 0, w->rows, nb, a->e,
         t.scores, w);
    for (int64_t r = 0; r < w->rows; r++) t.step(w, r, nb);
    gemm(w->sc, KEYS, 1, a->v + (size_t)(w->j0 * a->st[4]) * es, a->st[4], a->st[5], 0, w->rows, a->ev, nb,
         t.output, w);
  }
  for (int64_t r = 0; r < w->rows; r++)   /* a row that saw no key: 0 / 0, nan */
    for (int64_t c = 0; c < a->ev; c++)
      put(a->out, (a->row0 + r) * a->st[8] + c * a->st[9], a->dt, elem(w->acc, r * a->ev + c, a->dt) / w->sum[r]);
}

/* Without memory for the scratch: each row on its own, the output row its
 * accumulator, every score computed from q and k in place (slow, exact). */
static void rows_direct(const attn *a, int64_t rows) {
  for (int64_t i = a->row0; i < a->row0 + rows; i++) {
    double m = -INFINITY, sum = 0;
    int64_t o = i * a->st[8];
    for (int64_t c = 0; c < a->ev; c++) put(a->out, o + c * a->st[9], a->dt, 0);
    for (int64_t j = 0; j < keys_of(a, i); j++) {
      double s = 0;
      for (int64_t x = 0; x < a->e; x++)
        s += elem(a->q, i * a->st[0] + x * a->st[1], a->dt) * a->scale * elem(a->k, j * a->st[2] + x * a->st[3], a->dt);
      s = masked(a, i, j, s);
      if (s == -INFINITY) continue;
      double nm = s > m ? s : m, alpha = exp(m - nm), p = exp(s - nm);
      sum = sum * alpha + p;
      for (int64_t c = 0; c < a->ev; c++) {
        double y = elem(a->out, o + c * a->st[9], a->dt) * alpha + p * elem(a->v, j * a->st[4] + c * a->st[5], a->dt);
        put(a->out, o + c * a->st[9], a->dt, y);
      }
      m = nm;
    }
    for (int64_t c = 0; c < a->ev; c++) put(a->out, o + c * a->st[9], a->dt, elem(a->out, o + c * a->st[9], a->dt) / sum);
  }
}

void cpu_attention(const void *q, const void *k, const void *v, const void *mask, void *out, int64_t row0,
                   const int64_t *desc, double scale, cpu_gemm_fn *gemm) {
  attn a = {q, k, v, mask, out, row0, desc[CPU_ATTN_ROWS], desc[CPU_ATTN_L], desc[CPU_ATTN_S], desc[CPU_ATTN_E],
            desc[CPU_ATTN_EV], desc + CPU_ATTN_STRIDES, (int32_t)desc[CPU_ATTN_DTYPE],
            (int32_t)desc[CPU_ATTN_MASK_DTYPE], desc[CPU_ATTN_CAUSAL] != 0, scale};
  int64_t rows = a.l - row0 < a.rows ? a.l - row0 : a.rows;
  double stack[STACK_SCRATCH / sizeof(double)];
  if (rows <= 0) return;
  size_t bytes = scratch_bytes(&a, rows);
  double *p = bytes <= sizeof stack ? stack : ir_malloc(bytes);
  if (!p) {
    rows_direct(&a, rows);
    return;
  }
  scratch w;
  scratch_at(&w, &a, rows, p);
  block(&a, &w, gemm);
  if (p != stack) free(p);
}
