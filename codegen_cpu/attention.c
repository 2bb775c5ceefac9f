/* attention.c: the fused attention that CPU kernels call (KS_ATTN, resolved
 * by the JIT like libm): one block of query rows of one (batch, head), run
 * as blocks of cpu_attn_rows rows by the block kernel the kernel hands in
 * (attn_block.c: the FlashAttention recurrence over blocks of keys, so the
 * L x S scores never exist: memory is O(rows * (keys + head dim))). This
 * file gives it its scratch, and computes the rows directly without it. */
#include "codegen_cpu/cpu_impl.h"
#include "ir/alloc.h"

#include <math.h>
#include <stdlib.h>
#include <stdint.h>

enum { STACK_SCRATCH = 48 * 1024,   /* the scratch of a block up to this lives on the stack */
       ALIGN = 64 };                 /* the block kernel's vector loads of the scratch */

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
                   const int64_t *desc, double scale, cpu_attn_block_fn *block) {
  attn a = {q, k, v, mask, out, row0, desc[CPU_ATTN_ROWS], desc[CPU_ATTN_L], desc[CPU_ATTN_S], desc[CPU_ATTN_E],
            desc[CPU_ATTN_EV], desc + CPU_ATTN_STRIDES, (int32_t)desc[CPU_ATTN_DTYPE],
            (int32_t)desc[CPU_ATTN_MASK_DTYPE], desc[CPU_ATTN_CAUSAL] != 0, scale};
  int64_t rows = a.l - row0 < a.rows ? a.l - row0 : a.rows, qb = cpu_attn_rows(a.dt);
  _Alignas(ALIGN) char stack[STACK_SCRATCH];
  if (rows <= 0) return;
  size_t bytes = (size_t)cpu_attn_scratch(a.dt, a.e, a.ev) * (a.dt == KILN_F32 ? sizeof(float) : sizeof(double));
  void *p = bytes <= sizeof stack ? stack : ir_malloc(bytes + ALIGN);
  if (!p) {
    rows_direct(&a, rows);
    return;
  }
  void *scratch = p == stack ? p : (void *)(((uintptr_t)p + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
  for (int64_t r = 0; r < rows; r += qb)
    block(q, k, v, mask, out, row0 + r, rows - r < qb ? rows - r : qb, desc, scale, scratch);
  if (p != stack) free(p);
}
