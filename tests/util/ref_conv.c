/* ref_conv.c: the test oracle's convolutions as direct loops written from
 * torch's definitions (F.conv2d and F.conv_transpose2d), on doubles, with
 * nothing shared with kiln's implicit GEMM formulation. */
#include "util/ref.h"

#include <string.h>

void ref_conv_out(const ref_conv *q, bool transposed, int64_t out[2]) {
  int64_t in[2] = {q->h, q->w}, k[2] = {q->kh, q->kw};
  for (int i = 0; i < 2; i++)
    out[i] = transposed ? (in[i] - 1) * q->s[i] - 2 * q->p[i] + q->d[i] * (k[i] - 1) + q->op[i] + 1
                        : (in[i] + 2 * q->p[i] - q->d[i] * (k[i] - 1) - 1) / q->s[i] + 1;
}

/* y[n, o, r, c] = b[o] + sum over the group's channels and the taps of
 * x[n, ci, r*s - p + i*d, c*s - p + j*d] * w[o, ci - group start, i, j]. */
void ref_conv2d(const ref_conv *q, const double *x, const double *w, const double *b, double *y) {
  int64_t out[2], cg = q->c / q->g, og = q->o / q->g;
  ref_conv_out(q, false, out);
  for (int64_t n = 0; n < q->n; n++)
    for (int64_t o = 0; o < q->o; o++)
      for (int64_t r = 0; r < out[0]; r++)
        for (int64_t c = 0; c < out[1]; c++) {
          double acc = b ? b[o] : 0;
          for (int64_t ci = 0; ci < cg; ci++)
            for (int64_t i = 0; i < q->kh; i++)
              for (int64_t j = 0; j < q->kw; j++) {
                int64_t h = r * q->s[0] - q->p[0] + i * q->d[0], v = c * q->s[1] - q->p[1] + j * q->d[1];
                if (h < 0 || h >= q->h || v < 0 || v >= q->w) continue;
                acc += x[((n * q->c + o / og * cg + ci) * q->h + h) * q->w + v] * w[((o * cg + ci) * q->kh + i) * q->kw + j];
              }
          y[((n * q->o + o) * out[0] + r) * out[1] + c] = acc;
        }
}

/* The scatter form: every input element adds x * w[ci, o - group start, i,
 * j] to y[n, o, h*s - p + i*d, v*s - p + j*d] where that is inside. */
void ref_conv_transpose2d(const ref_conv *q, const double *x, const double *w, const double *b, double *y) {
  int64_t out[2], cg = q->c / q->g, og = q->o / q->g;
  ref_conv_out(q, true, out);
  for (int64_t n = 0; n < q->n; n++)
    for (int64_t o = 0; o < q->o; o++)
      for (int64_t k = 0; k < out[0] * out[1]; k++) y[(n * q->o + o) * out[0] * out[1] + k] = b ? b[o] : 0;
  for (int64_t n = 0; n < q->n; n++)
    for (int64_t ci = 0; ci < q->c; ci++)
      for (int64_t h = 0; h < q->h; h++)
        for (int64_t v = 0; v < q->w; v++)
          for (int64_t oo = 0; oo < og; oo++)
            for (int64_t i = 0; i < q->kh; i++)
              for (int64_t j = 0; j < q->kw; j++) {
                int64_t r = h * q->s[0] - q->p[0] + i * q->d[0], c = v * q->s[1] - q->p[1] + j * q->d[1];
                if (r < 0 || r >= out[0] || c < 0 || c >= out[1]) continue;
                int64_t o = ci / cg * og + oo;
                y[((n * q->o + o) * out[0] + r) * out[1] + c] +=
                    x[((n * q->c + ci) * q->h + h) * q->w + v] * w[((ci * og + oo) * q->kh + i) * q->kw + j];
              }
}
