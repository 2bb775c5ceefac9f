/* common.c: the clock, medians and JSON values of kiln_bench (common.h). */
#include "common.h"

#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

double bench_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

double bench_median(double *ms, int n) {
  qsort(ms, (size_t)n, sizeof *ms, cmp_double);
  return n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
}

void bench_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++)
    if (*s != '"' && *s != '\\' && (unsigned char)*s >= 0x20) fputc(*s, f);
  fputc('"', f);
}

void bench_json_number(FILE *f, double v) {
  if (!isfinite(v)) fputs("null", f);
  else fprintf(f, "%.6g", v);
}

void *bench_alloc(size_t bytes) {
  size_t huge = (size_t)2 << 20, align = bytes < huge ? 64 : huge;
  bytes = (bytes + align - 1) / align * align;
  void *p = aligned_alloc(align, bytes);
  if (p && align == huge) (void)madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}
