/* sort.c: the row sort and top-k that CPU kernels call (KS_SORT, resolved
 * by the JIT like libm). Every dtype sorts through one order-preserving
 * 64-bit key (nan the largest, -0 equal to +0, as PyTorch), with the
 * position breaking ties: the order is stable. Short rows take insertion
 * sort, long ones an LSD radix sort, top-k a bounded heap of k entries. */
#include "codegen_cpu/cpu_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  uint64_t key;
  int64_t at;           /* position in the row */
} item;

enum { INSERTION_MAX = 32, HEAP_K_MAX = 1024, RADIX_BITS = 8 };

static uint64_t key_of(const char *p, kiln_dtype dt, bool descending) {
  uint64_t k;
  if (ir_is_float(dt)) {
    double x = ir_load_f64(p, dt);
    if (x == 0) x = 0;   /* -0 sorts as +0 */
    memcpy(&k, &x, sizeof k);
    k = isnan(x) ? UINT64_MAX : k >> 63 ? ~k : k | 1ull << 63;
  } else {
    k = (uint64_t)ir_load_i64(p, dt) ^ 1ull << 63;
  }
  return descending ? ~k : k;
}

static bool before(item a, item b) { return a.key < b.key || (a.key == b.key && a.at < b.at); }

static void insertion(item *v, int64_t n) {
  for (int64_t i = 1; i < n; i++) {
    item x = v[i];
    int64_t j = i;
    for (; j > 0 && before(x, v[j - 1]); j--) v[j] = v[j - 1];
    v[j] = x;
  }
}

/* Stable LSD radix sort of v by key, 8 bits a pass; a pass whose digit is
 * the same in every key moves nothing and is skipped. tmp: n items. */
static void radix(item *v, item *tmp, int64_t n) {
  enum { PASSES = 64 / RADIX_BITS, BUCKETS = 1 << RADIX_BITS };
  int64_t count[PASSES][BUCKETS] = {{0}};
  for (int64_t i = 0; i < n; i++)
    for (int p = 0; p < PASSES; p++) count[p][v[i].key >> (p * RADIX_BITS) & (BUCKETS - 1)]++;
  item *from = v, *to = tmp;
  for (int p = 0; p < PASSES; p++) {
    int64_t *c = count[p];
    if (c[from[0].key >> (p * RADIX_BITS) & (BUCKETS - 1)] == n) continue;
    for (int64_t b = 0, sum = 0; b < BUCKETS; b++) {
      int64_t t = c[b];
      c[b] = sum;
      sum += t;
    }
    for (int64_t i = 0; i < n; i++) to[c[from[i].key >> (p * RADIX_BITS) & (BUCKETS - 1)]++] = from[i];
    item *t = from;
    from = to;
    to = t;
  }
  if (from != v) memcpy(v, from, sizeof *v * (size_t)n);
}

static item item_at(const char *in, int64_t stride, kiln_dtype dt, bool desc, int64_t j) {
  return (item){key_of(in + (size_t)(j * stride) * ir_dtypes[dt].size, dt, desc), j};
}

/* Max-heap (by `before`) of the k first items seen: the root is the one to drop. */
static void sift_down(item *h, int64_t n, int64_t i) {
  for (;;) {
    int64_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && before(h[m], h[l])) m = l;
    if (r < n && before(h[m], h[r])) m = r;
    if (m == i) return;
    item t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
}

static void heap_sort(item *h, int64_t n) {
  for (int64_t i = n / 2; i-- > 0;) sift_down(h, n, i);
  for (int64_t e = n - 1; e > 0; e--) {
    item t = h[0];
    h[0] = h[e];
    h[e] = t;
    sift_down(h, e, 0);
  }
}

/* The k first items of the row into h (k entries), in order. */
static void top_k(const char *in, int64_t stride, int64_t n, kiln_dtype dt, bool desc, item *h, int64_t k) {
  for (int64_t j = 0; j < k; j++) h[j] = item_at(in, stride, dt, desc, j);
  for (int64_t i = k / 2; i-- > 0;) sift_down(h, k, i);
  for (int64_t j = k; j < n; j++) {
    item x = item_at(in, stride, dt, desc, j);
    if (!before(x, h[0])) continue;
    h[0] = x;
    sift_down(h, k, 0);
  }
  heap_sort(h, k);
}

static void put(const char *in, int64_t in_stride, size_t es, item x, void *vals, int64_t *idx, int64_t at) {
  if (vals) memcpy((char *)vals + (size_t)at * es, in + (size_t)(x.at * in_stride) * es, es);
  if (idx) idx[at] = x.at;
}

/* Without memory for the row: each of the k results is the first item after
 * the one before it, by a scan of the row (slow, but exact and stable). */
static void select_scan(const char *in, int64_t in_stride, int64_t n, kiln_dtype dt, bool desc, int64_t k,
                        void *vals, int64_t *idx, int64_t out_stride) {
  item prev = {0, -1};
  for (int64_t j = 0; j < k; j++) {
    item best = {0, -1};
    for (int64_t i = 0; i < n; i++) {
      item x = item_at(in, in_stride, dt, desc, i);
      if ((prev.at < 0 || before(prev, x)) && (best.at < 0 || before(x, best))) best = x;
    }
    put(in, in_stride, ir_dtypes[dt].size, best, vals, idx, j * out_stride);
    prev = best;
  }
}

void cpu_sort_row(const void *in, int64_t in_stride, int64_t n, int32_t dtype, int32_t descending, int64_t k,
                  void *vals, int64_t *idx, int64_t out_stride) {
  kiln_dtype dt = (kiln_dtype)dtype;
  const char *src = in;
  bool heap = k <= HEAP_K_MAX && k * 8 <= n;
  int64_t m = heap ? k : n;
  if (k <= 0) return;
  item small[INSERTION_MAX], *v = m <= INSERTION_MAX ? small : malloc(sizeof *v * (size_t)m * (heap ? 1 : 2));
  if (!v) {
    select_scan(src, in_stride, n, dt, descending, k, vals, idx, out_stride);
    return;
  }
  if (heap) {
    top_k(src, in_stride, n, dt, descending, v, m);
  } else {
    for (int64_t j = 0; j < n; j++) v[j] = item_at(src, in_stride, dt, descending, j);
    if (n <= INSERTION_MAX) insertion(v, n);
    else radix(v, v + n, n);
  }
  for (int64_t j = 0; j < k; j++) put(src, in_stride, ir_dtypes[dt].size, v[j], vals, idx, j * out_stride);
  if (v != small) free(v);
}
