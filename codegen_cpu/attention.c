/* attention.c: the fused attention that CPU kernels call (KS_ATTN, resolved
 * by the JIT like libm): one block of query rows of one (batch, head) against
 * blocks of keys with an online softmax (the FlashAttention recurrence), so
 * the L x S scores never exist: memory is O((rows + keys) * head dim). */
#include "codegen_cpu/cpu_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { KEYS = 64 };   /* keys per block: a packed K^T and V block stay in L1/L2 */

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
static double elem(const char *p, int64_t i, int32_t dt) {
  if (dt == KILN_F32) return ((const float *)p)[i];
  return ((const double *)p)[i];
}

static void put(char *p, int64_t i, int32_t dt, double x) {
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

/* The scratch of one block: scaled q rows, the running max, sum and output
 * row of each, one block of scores, and the packed K^T and V blocks. */
typedef struct {
  double *q, *m, *sum, *acc, *sc, *kt, *vb;
} scratch;

static double *carve(double **p, int64_t n) {
  double *r = *p;
  *p += n;
  return r;
}

static bool scratch_alloc(scratch *w, int64_t rows, int64_t e, int64_t ev) {
  double *p = malloc(sizeof *p * (size_t)(rows * (e + ev + 2 + KEYS) + KEYS * (e + ev)));
  if (!p) return false;
  w->q = carve(&p, rows * e);
  w->m = carve(&p, rows);
  w->sum = carve(&p, rows);
  w->acc = carve(&p, rows * ev);
  w->sc = carve(&p, rows * KEYS);
  w->kt = carve(&p, KEYS * e);
  w->vb = carve(&p, KEYS * ev);
  return true;
}

/* Keys j0 .. j0+nb packed: kt[x*KEYS + j] = k[j0 + j, x], vb[j*ev + c] = v[j0 + j, c]. */
static void pack_keys(const attn *a, const scratch *w, int64_t j0, int64_t nb) {
  for (int64_t j = 0; j < nb; j++) {
    for (int64_t x = 0; x < a->e; x++) w->kt[x * KEYS + j] = elem(a->k, (j0 + j) * a->st[2] + x * a->st[3], a->dt);
    for (int64_t c = 0; c < a->ev; c++) w->vb[j * a->ev + c] = elem(a->v, (j0 + j) * a->st[4] + c * a->st[5], a->dt);
  }
}

/* One step of the recurrence for row r against the packed keys j0 .. j0+nb:
 * scores (as axpys over the keys, which vectorize), the new running max m',
 * the old sum and output rescaled by exp(m - m'), then p = exp(s - m') added
 * in. While every score so far is -inf nothing is added. */
static void row_step(const attn *a, const scratch *w, int64_t r, int64_t j0, int64_t nb) {
  double *sc = w->sc + r * KEYS, *acc = w->acc + r * a->ev, *q = w->q + r * a->e, mx = -INFINITY;
  for (int64_t j = 0; j < nb; j++) sc[j] = 0;
  for (int64_t x = 0; x < a->e; x++)
    for (int64_t j = 0; j < nb; j++) sc[j] += q[x] * w->kt[x * KEYS + j];
  for (int64_t j = 0; j < nb; j++) {
    sc[j] = masked(a, a->row0 + r, j0 + j, sc[j]);
    if (sc[j] > mx) mx = sc[j];
  }
  double m = w->m[r] > mx ? w->m[r] : mx;
  if (m == -INFINITY) return;
  double alpha = exp(w->m[r] - m);
  if (alpha != 1) {
    w->sum[r] *= alpha;
    for (int64_t c = 0; c < a->ev; c++) acc[c] *= alpha;
  }
  w->m[r] = m;
  for (int64_t j = 0; j < nb; j++) {
    double p = exp(sc[j] - m);
    w->sum[r] += p;
    for (int64_t c = 0; c < a->ev; c++) acc[c] += p * w->vb[j * a->ev + c];
  }
}

static void block(const attn *a, const scratch *w, int64_t rows) {
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t x = 0; x < a->e; x++) w->q[r * a->e + x] = elem(a->q, (a->row0 + r) * a->st[0] + x * a->st[1], a->dt) * a->scale;
    w->m[r] = -INFINITY;
    w->sum[r] = 0;
    memset(w->acc + r * a->ev, 0, sizeof *w->acc * (size_t)a->ev);
  }
  int64_t last = keys_of(a, a->row0 + rows - 1);
  for (int64_t j0 = 0; j0 < last; j0 += KEYS) {
    int64_t nb = last - j0 < KEYS ? last - j0 : KEYS;
    pack_keys(a, w, j0, nb);
    for (int64_t r = 0; r < rows; r++) {
      int64_t seen = keys_of(a, a->row0 + r) - j0;
      if (seen > 0) row_step(a, w, r, j0, seen < nb ? seen : nb);
    }
  }
  for (int64_t r = 0; r < rows; r++)   /* a row that saw no key: 0 / 0, nan */
    for (int64_t c = 0; c < a->ev; c++)
      put(a->out, (a->row0 + r) * a->st[8] + c * a->st[9], a->dt, w->acc[r * a->ev + c] / w->sum[r]);
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
                   const int64_t *desc, double scale) {
  attn a = {q, k, v, mask, out, row0, desc[CPU_ATTN_ROWS], desc[CPU_ATTN_L], desc[CPU_ATTN_S], desc[CPU_ATTN_E],
            desc[CPU_ATTN_EV], desc + CPU_ATTN_STRIDES, (int32_t)desc[CPU_ATTN_DTYPE],
            (int32_t)desc[CPU_ATTN_MASK_DTYPE], desc[CPU_ATTN_CAUSAL] != 0, scale};
  int64_t rows = a.l - row0 < a.rows ? a.l - row0 : a.rows;
  scratch w;
  if (rows <= 0) return;
  if (!scratch_alloc(&w, rows, a.e, a.ev)) {
    rows_direct(&a, rows);
    return;
  }
  block(&a, &w, rows);
  free(w.q);
}
