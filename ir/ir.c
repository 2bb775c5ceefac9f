/* ir.c: dtype facts and PyTorch's promotion, the op table expanded, and the
 * small utilities every layer uses (arena, growable string, hash, assert). */
#include "ir.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Noreturn void ir_die(const char *file, int line, const char *what) {
  fprintf(stderr, "kiln internal error at %s:%d: %s\n", file, line, what);
  abort();
}

const ir_dtype_info ir_dtypes[KILN_NUM_DTYPES] = {
  [KILN_BOOL] = {"bool", "bool", 1, DK_BOOL, false},
  [KILN_U8] = {"uint8", "u8", 1, DK_INT, false},
  [KILN_I8] = {"int8", "i8", 1, DK_INT, true},
  [KILN_I16] = {"int16", "i16", 2, DK_INT, true},
  [KILN_I32] = {"int32", "i32", 4, DK_INT, true},
  [KILN_I64] = {"int64", "i64", 8, DK_INT, true},
  [KILN_F16] = {"float16", "f16", 2, DK_FLOAT, true},
  [KILN_BF16] = {"bfloat16", "bf16", 2, DK_FLOAT, true},
  [KILN_F32] = {"float32", "f32", 4, DK_FLOAT, true},
  [KILN_F64] = {"float64", "f64", 8, DK_FLOAT, true},
};

const ir_op_info ir_ops[IR_NUM_OPS] = {
#define X(e, name, arity, flags, typing) {name, arity, flags, typing},
#include "ops.def"
#undef X
};

bool ir_dtype_valid(kiln_dtype d) { return (unsigned)d < KILN_NUM_DTYPES; }
bool ir_is_float(kiln_dtype d) { return ir_dtypes[d].kind == DK_FLOAT; }
kiln_dtype ir_compute_dtype(kiln_dtype d) {
  return d == KILN_F16 || d == KILN_BF16 ? KILN_F32 : d;
}

static double f16_bits_to_double(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m | 0x400, e - 25);
  return h & 0x8000 ? -v : v;
}

double ir_load_f64(const void *p, kiln_dtype d) {
  uint16_t h;
  float f;
  double x;
  switch (d) {
  case KILN_F16: memcpy(&h, p, 2); return f16_bits_to_double(h);
  case KILN_BF16: {
    memcpy(&h, p, 2);
    uint32_t u = (uint32_t)h << 16;
    memcpy(&f, &u, 4);
    return f;
  }
  case KILN_F32: memcpy(&f, p, 4); return f;
  case KILN_F64: memcpy(&x, p, 8); return x;
  default: return (double)ir_load_i64(p, d);
  }
}

int64_t ir_load_i64(const void *p, kiln_dtype d) {
  int16_t i16;
  int32_t i32;
  int64_t i64;
  switch (d) {
  case KILN_BOOL: return *(const uint8_t *)p != 0;
  case KILN_U8: return *(const uint8_t *)p;
  case KILN_I8: return *(const int8_t *)p;
  case KILN_I16: memcpy(&i16, p, 2); return i16;
  case KILN_I32: memcpy(&i32, p, 4); return i32;
  case KILN_I64: memcpy(&i64, p, 8); return i64;
  default: return (int64_t)ir_load_f64(p, d);
  }
}

/* PyTorch's promotion: the higher category wins; within a category the wider
 * type, except u8 with a signed int (i16 or wider) and f16 with bf16 (f32). */
kiln_dtype ir_promote(kiln_dtype a, kiln_dtype b) {
  if (a == b) return a;
  const ir_dtype_info *x = &ir_dtypes[a], *y = &ir_dtypes[b];
  if (x->kind != y->kind) return x->kind > y->kind ? a : b;
  if (x->kind == DK_FLOAT) {
    if ((a == KILN_F16 && b == KILN_BF16) || (a == KILN_BF16 && b == KILN_F16)) return KILN_F32;
    return x->size > y->size ? a : b;
  }
  if (a == KILN_U8 || b == KILN_U8) {  /* u8 with a signed int */
    kiln_dtype s = a == KILN_U8 ? b : a;
    return s == KILN_I8 ? KILN_I16 : s;
  }
  return x->size > y->size ? a : b;
}

/* ---- arena -------------------------------------------------------------- */
typedef struct arena_block { struct arena_block *next; size_t used, cap; } arena_block;
struct ir_arena { arena_block *head; };

ir_arena *ir_arena_new(void) { return ir_calloc(1, sizeof(ir_arena)); }

void *ir_arena_alloc(ir_arena *a, size_t bytes) {
  bytes = (bytes + 15) & ~(size_t)15;
  arena_block *b = a->head;
  if (!b || b->used + bytes > b->cap) {
    size_t cap = bytes > 65536 ? bytes : 65536;
    b = ir_malloc(sizeof(arena_block) + 16 + cap);
    if (!b) return NULL;
    b->next = a->head;
    b->used = 0;
    b->cap = cap;
    a->head = b;
  }
  char *base = (char *)(((uintptr_t)(b + 1) + 15) & ~(uintptr_t)15);
  void *p = base + b->used;
  b->used += bytes;
  memset(p, 0, bytes);
  return p;
}

void ir_arena_free(ir_arena *a) {
  if (!a) return;
  for (arena_block *b = a->head, *n; b; b = n) {
    n = b->next;
    free(b);
  }
  free(a);
}

/* ---- strings ------------------------------------------------------------ */
/* False (and b->failed set: the text is incomplete) when memory runs out. */
static bool str_reserve(ir_str *b, size_t extra) {
  if (b->failed) return false;
  if (b->len + extra + 1 <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) cap *= 2;
  char *s = ir_realloc(b->s, cap);
  if (!s) return !(b->failed = true);
  b->s = s;
  b->cap = cap;
  return true;
}

void ir_str_vprintf(ir_str *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  IR_ASSERT(n >= 0);
  if (!str_reserve(b, (size_t)n)) return;
  vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
  b->len += (size_t)n;
}

void ir_str_append(ir_str *b, const void *p, size_t n) {
  if (!str_reserve(b, n)) return;
  if (n) memcpy(b->s + b->len, p, n);
  b->len += n;
  b->s[b->len] = '\0';
}

void ir_str_cat(ir_str *b, const ir_str *src) {
  if (src->failed) b->failed = true;
  else ir_str_append(b, src->s, src->len);
}

void ir_str_printf(ir_str *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ir_str_vprintf(b, fmt, ap);
  va_end(ap);
}

void ir_str_free(ir_str *b) {
  free(b->s);
  b->s = NULL;
  b->len = b->cap = 0;
  b->failed = false;
}

char *ir_vstrprintf(const char *fmt, va_list ap) {
  ir_str b = {0};
  ir_str_vprintf(&b, fmt, ap);
  if (b.failed) ir_str_free(&b);
  return b.s;
}

char *ir_strprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = ir_vstrprintf(fmt, ap);
  va_end(ap);
  return s;
}

void ir_str_shape(ir_str *b, int ndim, const int64_t *shape) {
  ir_str_printf(b, "(");
  for (int i = 0; i < ndim; i++) ir_str_printf(b, i ? ",%lld" : "%lld", (long long)shape[i]);
  ir_str_printf(b, ndim == 1 ? ",)" : ")");
}

/* 64-bit hash for cache keys and kernel names (not security): eight bytes
 * per step with a multiply-xorshift mix, then FNV-1a over the tail. */
uint64_t ir_hash_bytes(const void *p, size_t n, uint64_t seed) {
  const unsigned char *s = p;
  uint64_t h = seed ^ 0xcbf29ce484222325ull ^ (n * 0x9e3779b97f4a7c15ull);
  for (; n >= 8; n -= 8, s += 8) {
    uint64_t w;
    memcpy(&w, s, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  for (; n; n--, s++) h = (h ^ *s) * 0x100000001b3ull;
  h ^= h >> 29;
  return h * 0xc4ceb9fe1a85ec53ull;
}

/* ---- last error: a fixed thread-local buffer, so nothing leaks at exit --- */
static _Thread_local char last_error[2048];

void ir_error_set(const char *msg) { snprintf(last_error, sizeof last_error, "%s", msg ? msg : ""); }
void ir_error_setf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
}
const char *ir_error_get(void) { return last_error; }

/* ---- pointer map ---------------------------------------------------------- */
static size_t ptrmap_slot(const ir_ptrmap *m, const void *k) {
  size_t h = (size_t)(((uintptr_t)k >> 4) * 0x9E3779B97F4A7C15ull);
  size_t i = h & (m->cap - 1);
  while (m->keys[i] && m->keys[i] != k) i = (i + 1) & (m->cap - 1);
  return i;
}

/* False, with m as it was, when memory runs out. */
static bool ptrmap_grow(ir_ptrmap *m) {
  ir_ptrmap old = *m;
  m->cap = old.cap ? 2 * old.cap : 64;
  m->n = 0;
  m->keys = ir_calloc(m->cap, sizeof *m->keys);
  m->vals = ir_calloc(m->cap, sizeof *m->vals);
  if (!m->keys || !m->vals) {
    free(m->keys);
    free(m->vals);
    *m = old;
    return false;
  }
  m->borrowed = false;
  for (size_t i = 0; i < old.cap; i++)
    if (old.keys[i]) ir_ptrmap_put(m, old.keys[i], old.vals[i]);
  if (!old.borrowed) {
    free(old.keys);
    free(old.vals);
  }
  return true;
}

bool ir_ptrmap_put(ir_ptrmap *m, const void *k, int v) {
  if (2 * (m->n + 1) > m->cap && !ptrmap_grow(m)) return false;
  size_t i = ptrmap_slot(m, k);
  if (!m->keys[i]) m->n++;
  m->keys[i] = k;
  m->vals[i] = v;
  return true;
}

int ir_ptrmap_get(const ir_ptrmap *m, const void *k) {
  if (!m->cap) return -1;
  size_t i = ptrmap_slot(m, k);
  return m->keys[i] ? m->vals[i] : -1;
}

void ir_ptrmap_free(ir_ptrmap *m) {
  if (!m->borrowed) {
    free(m->keys);
    free(m->vals);
  }
  *m = (ir_ptrmap){0};
}
