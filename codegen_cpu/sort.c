/* sort.c: the row sort and top-k that CPU kernels call (KS_SORT, resolved
 * by the JIT like libm). Every dtype sorts through one order-preserving
 * 64-bit key (nan the largest, -0 equal to +0, as PyTorch), with the
 * position breaking ties: the order is stable. Short rows take insertion
 * sort, long ones an LSD radix sort, top-k a bounded heap of k entries
 * (a contiguous f32 row offers it only the blocks that can beat its root). */
#include "codegen_cpu/cpu_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  uint64_t key;
  int64_t at;           /* position in the row */
} item;

enum { INSERTION_MAX = 32, HEAP_K_MAX = 1024, RADIX_BITS = 8 };

/* The key of one stored element; ascending keys are the order. */
typedef uint64_t (*key_fn)(const char *p);

static uint64_t float_key(double x) {
  uint64_t k;
  if (x == 0) x = 0;   /* -0 sorts as +0 */
  memcpy(&k, &x, sizeof k);
  return isnan(x) ? UINT64_MAX : k >> 63 ? ~k : k | 1ull << 63;
}

/* f32, the common case, without a detour through double: the same order. */
static uint64_t key_f32(const char *p) {
  float f;
  uint32_t b;
  memcpy(&f, p, sizeof f);
  if (f == 0) f = 0;
  memcpy(&b, &f, sizeof b);
  uint32_t k = isnan(f) ? UINT32_MAX : b >> 31 ? ~b : b | 1u << 31;
  return (uint64_t)k << 32;
}
static uint64_t key_f64(const char *p) { return float_key(ir_load_f64(p, KILN_F64)); }
static uint64_t key_f16(const char *p) { return float_key(ir_load_f64(p, KILN_F16)); }
static uint64_t key_bf16(const char *p) { return float_key(ir_load_f64(p, KILN_BF16)); }
static uint64_t key_i64(const char *p) {
  int64_t v;
  memcpy(&v, p, sizeof v);
  return (uint64_t)v ^ 1ull << 63;
}
static uint64_t key_i32(const char *p) {
  int32_t v;
  memcpy(&v, p, sizeof v);
  return (uint64_t)(int64_t)v ^ 1ull << 63;
}
static uint64_t key_i16(const char *p) {
  int16_t v;
  memcpy(&v, p, sizeof v);
  return (uint64_t)(int64_t)v ^ 1ull << 63;
}
static uint64_t key_i8(const char *p) { return (uint64_t)(int64_t)(int8_t)*p ^ 1ull << 63; }
static uint64_t key_u8(const char *p) { return (unsigned char)*p; }   /* bool too */

static key_fn key_for(kiln_dtype dt) {
  switch (dt) {
  case KILN_F32: return key_f32;
  case KILN_F64: return key_f64;
  case KILN_F16: return key_f16;
  case KILN_BF16: return key_bf16;
  case KILN_I64: return key_i64;
  case KILN_I32: return key_i32;
  case KILN_I16: return key_i16;
  case KILN_I8: return key_i8;
  default: return key_u8;
  }
}

/* A line: its elements, their size and stride (negative for a flipped
 * view), its key and direction. */
typedef struct {
  const char *in;
  int64_t stride;
  int64_t es;
  key_fn key;
  bool desc;
} line;

static const char *elem(const line *l, int64_t j) { return l->in + j * l->stride * l->es; }

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

static item item_at(const line *l, int64_t j) {
  uint64_t k = l->key(elem(l, j));
  return (item){l->desc ? ~k : k, j};
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

/* Element j (key x) replaces the root when it comes first. */
static void heap_offer(item *h, int64_t k, uint64_t x, int64_t j) {
  if (x >= h[0].key) return;   /* equal keys: the earlier position stays */
  h[0] = (item){x, j};
  sift_down(h, k, 0);
}

/* The first k elements as a heap, and the elements from..to offered to it. */
static inline void heap_start(key_fn key, const line *l, item *h, int64_t k, uint64_t flip) {
  for (int64_t j = 0; j < k; j++) h[j] = (item){key(elem(l, j)) ^ flip, j};
  for (int64_t i = k / 2; i-- > 0;) sift_down(h, k, i);
}

static inline void heap_scan(key_fn key, const line *l, int64_t from, int64_t to, item *h, int64_t k,
                             uint64_t flip) {
  for (int64_t j = from; j < to; j++) heap_offer(h, k, key(elem(l, j)) ^ flip, j);
}

/* The k first items of the line into h (k entries), in order. Inlined per
 * key function (top_k's switch), so the scan of the line, which rejects
 * almost every element by its key alone, makes no call. */
static inline void top_k_with(key_fn key, const line *l, int64_t n, item *h, int64_t k) {
  uint64_t flip = l->desc ? UINT64_MAX : 0;
  heap_start(key, l, h, k, flip);
  heap_scan(key, l, k, n, h, k, flip);
  heap_sort(h, k);
}

/* A contiguous f32 row block by block: whether any element of a block can
 * beat the heap's root, whose value is t, is tested on the floats, over a
 * fixed count so that it vectorizes (gcc's cheap model at -O2 takes it).
 * The test may pass an element that does not beat t (a nan t; a nan
 * element when ascending), never miss one: descending, x beats t only if
 * x > t or x is nan, ascending only if x < t. Almost every block has none;
 * in those that pass, only the elements that pass enter the heap, by key. */
enum { F32_BLOCK = 32 };

static inline bool f32_may_beat(float x, float t, bool desc) { return desc ? !(x <= t) : !(x >= t); }

static bool f32_block_beats(const float *x, bool desc, float t) {
  int any = 0;
  if (desc)
    for (int i = 0; i < F32_BLOCK; i++) any |= f32_may_beat(x[i], t, true);
  else
    for (int i = 0; i < F32_BLOCK; i++) any |= f32_may_beat(x[i], t, false);
  return any;
}

static void top_k_f32_contiguous(const line *l, int64_t n, item *h, int64_t k) {
  const float *x = (const float *)(const void *)l->in;   /* the row's own f32 elements */
  uint64_t flip = l->desc ? UINT64_MAX : 0;
  heap_start(key_f32, l, h, k, flip);
  float t = x[h[0].at];
  for (int64_t j = k; j < n; j += F32_BLOCK) {
    int64_t end = n - j < F32_BLOCK ? n : j + F32_BLOCK;
    if (end - j == F32_BLOCK && !f32_block_beats(x + j, l->desc, t)) continue;
    for (int64_t i = j; i < end; i++) {
      if (!f32_may_beat(x[i], t, l->desc)) continue;
      heap_offer(h, k, key_f32(elem(l, i)) ^ flip, i);
      t = x[h[0].at];
    }
  }
  heap_sort(h, k);
}

static void top_k(const line *l, int64_t n, item *h, int64_t k) {
  if (l->key == key_f32 && l->stride == 1) top_k_f32_contiguous(l, n, h, k);
  else if (l->key == key_f32) top_k_with(key_f32, l, n, h, k);
  else if (l->key == key_i64) top_k_with(key_i64, l, n, h, k);
  else top_k_with(l->key, l, n, h, k);
}

static void put(const line *l, item x, void *vals, int64_t *idx, int64_t at) {
  if (vals) memcpy((char *)vals + at * l->es, elem(l, x.at), (size_t)l->es);
  if (idx) idx[at] = x.at;
}

/* Without memory for the row: each of the k results is the first item after
 * the one before it, by a scan of the row (slow, but exact and stable). */
static void select_scan(const line *l, int64_t n, int64_t k, void *vals, int64_t *idx, int64_t out_stride) {
  item prev = {0, -1};
  for (int64_t j = 0; j < k; j++) {
    item best = {0, -1};
    for (int64_t i = 0; i < n; i++) {
      item x = item_at(l, i);
      if ((prev.at < 0 || before(prev, x)) && (best.at < 0 || before(x, best))) best = x;
    }
    put(l, best, vals, idx, j * out_stride);
    prev = best;
  }
}

void cpu_sort_row(const void *in, int64_t in_stride, int64_t n, int32_t dtype, int32_t descending, int64_t k,
                  void *vals, int64_t *idx, int64_t out_stride) {
  kiln_dtype dt = (kiln_dtype)dtype;
  line l = {in, in_stride, (int64_t)ir_dtypes[dt].size, key_for(dt), descending != 0};
  bool heap = k <= HEAP_K_MAX && k * 8 <= n;
  int64_t m = heap ? k : n;
  if (k <= 0) return;
  item small[INSERTION_MAX], *v = m <= INSERTION_MAX ? small : ir_malloc(sizeof *v * (size_t)m * (heap ? 1 : 2));
  if (!v) {
    select_scan(&l, n, k, vals, idx, out_stride);
    return;
  }
  if (heap) {
    top_k(&l, n, v, m);
  } else {
    for (int64_t j = 0; j < n; j++) v[j] = item_at(&l, j);
    if (n <= INSERTION_MAX) insertion(v, n);
    else radix(v, v + n, n);
  }
  for (int64_t j = 0; j < k; j++) put(&l, v[j], vals, idx, j * out_stride);
  if (v != small) free(v);
}
