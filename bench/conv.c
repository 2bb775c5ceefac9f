/* conv.c: W14, conv2d 3x3 64->64 channels on an 8x64x56x56 f32 batch,
 * padding 1, + bias + relu: kiln's implicit GEMM (one kernel) against
 * im2col + OpenBLAS sgemm + a C epilogue, with and without the im2col. */
#include "conv.h"

#include "common.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

enum { N = 8, C = 64, O = 64, H = 56, W = 56, K = 3, DEPTH = C * K * K, COLS = H * W };

typedef struct {
  float *x, *w, *b, *col, *cols, *out, *want;   /* cols: every image's im2col, built once */
  kiln_tensor *tx, *tw, *tb;
} w14_state;

static float *floats(size_t n, uint64_t seed, float scale) {
  float *p = bench_alloc(n * sizeof(float));
  for (size_t i = 0; p && i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = scale * ((float)(seed >> 40) / (float)(1 << 24) * 2 - 1);
  }
  return p;
}

/* col[(c*9 + i*3 + j) * COLS + r*W + q] = x[c, r + i - 1, q + j - 1] or 0. */
static void im2col(const float *x, float *col) {
  for (int c = 0; c < C; c++)
    for (int i = 0; i < K; i++)
      for (int j = 0; j < K; j++) {
        float *dst = col + (size_t)((c * K + i) * K + j) * COLS;
        for (int r = 0; r < H; r++) {
          int h = r + i - 1;
          for (int q = 0; q < W; q++) {
            int v = q + j - 1;
            dst[r * W + q] = h < 0 || h >= H || v < 0 || v >= W ? 0 : x[(c * H + h) * W + v];
          }
        }
      }
}

/* out[o, :] = relu(w[o, :] @ col + b[o]) for one image. */
static void product(const w14_state *s, const float *col, float *out) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, O, COLS, DEPTH, 1.0f, s->w, DEPTH, col, COLS, 0.0f, out, COLS);
  for (int o = 0; o < O; o++)
    for (int k = 0; k < COLS; k++) {
      float v = out[o * COLS + k] + s->b[o];
      out[o * COLS + k] = v > 0 ? v : 0;
    }
}

void w14_im2col_sgemm(void *p, int threads) {
  w14_state *s = p;
  openblas_set_num_threads(threads);
  for (int n = 0; n < N; n++) {
    im2col(s->x + (size_t)n * C * H * W, s->col);
    product(s, s->col, s->out + (size_t)n * O * COLS);
  }
}

void w14_sgemm_only(void *p, int threads) {
  w14_state *s = p;
  openblas_set_num_threads(threads);
  for (int n = 0; n < N; n++) product(s, s->cols + (size_t)n * DEPTH * COLS, s->out + (size_t)n * O * COLS);
}

void w14_teardown(void *p) {
  w14_state *s = p;
  kiln_release(s->tx);
  kiln_release(s->tw);
  kiln_release(s->tb);
  float *bufs[] = {s->x, s->w, s->b, s->col, s->cols, s->out, s->want};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
  free(s);
}

void *w14_setup_with(kiln_tensor *(*place)(kiln_tensor *)) {
  w14_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->x = floats((size_t)N * C * H * W, 1, 1.0f);
  s->w = floats((size_t)O * DEPTH, 2, 0.05f);
  s->b = floats(O, 3, 0.1f);
  s->col = floats((size_t)DEPTH * COLS, 4, 1.0f);
  s->cols = floats((size_t)N * DEPTH * COLS, 5, 1.0f);
  s->out = floats((size_t)N * O * COLS, 6, 1.0f);
  s->want = floats((size_t)N * O * COLS, 7, 1.0f);
  if (!s->x || !s->w || !s->b || !s->col || !s->cols || !s->out || !s->want) {
    w14_teardown(s);
    return NULL;
  }
  for (int n = 0; n < N; n++) im2col(s->x + (size_t)n * C * H * W, s->cols + (size_t)n * DEPTH * COLS);
  w14_im2col_sgemm(s, 1);
  memcpy(s->want, s->out, sizeof(float) * (size_t)N * O * COLS);
  s->tx = place(kiln_from_buffer(s->x, KILN_F32, KILN_SHAPE(N, C, H, W)));
  s->tw = place(kiln_from_buffer(s->w, KILN_F32, KILN_SHAPE(O, C, K, K)));
  s->tb = place(kiln_from_buffer(s->b, KILN_F32, KILN_SHAPE(O)));
  return s;
}

kiln_tensor *w14_build(void *p) {
  w14_state *s = p;
  return kiln_relu(kiln_conv2d(s->tx, s->tw, s->tb, 1, (int64_t[]){1}, 1, (int64_t[]){1}, 0, NULL, 1));
}

const float *w14_expected(void *p, int64_t *n) {
  *n = (int64_t)N * O * COLS;
  return ((w14_state *)p)->want;
}
