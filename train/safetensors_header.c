/* safetensors_header.c: the safetensors header (an 8-byte little-endian
 * length, then a JSON object of tensors and __metadata__), read strictly and
 * written. Self-contained (no runtime, no tensors) so the fuzzer can drive
 * the parser on raw bytes; safetensors.c does the files and tensors. */
#include "train/train.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The format's names for kiln's dtypes. It has others (U16, U32, U64, F8_*,
 * C64, ...) that kiln lacks: a file holding one is refused. */
static const char *const dtype_names[KILN_NUM_DTYPES] = {
    [KILN_BOOL] = "BOOL", [KILN_U8] = "U8",     [KILN_I8] = "I8",   [KILN_I16] = "I16", [KILN_I32] = "I32",
    [KILN_I64] = "I64",   [KILN_F16] = "F16",   [KILN_BF16] = "BF16", [KILN_F32] = "F32", [KILN_F64] = "F64",
};

/* ---- UTF-8 --------------------------------------------------------------- */
/* The length of the well-formed UTF-8 sequence at p (a byte >= 0x80 first),
 * 0 for an ill-formed one: overlong forms, surrogates and code points past
 * U+10FFFF are refused, as JSON's decoders refuse them. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end) {
  unsigned b = p[0], lo = 0x80, hi = 0xbf;
  size_t n;
  if (b >= 0xc2 && b <= 0xdf) n = 2;
  else if (b >= 0xe0 && b <= 0xef) n = 3, lo = b == 0xe0 ? 0xa0 : lo, hi = b == 0xed ? 0x9f : hi;
  else if (b >= 0xf0 && b <= 0xf4) n = 4, lo = b == 0xf0 ? 0x90 : lo, hi = b == 0xf4 ? 0x8f : hi;
  else return 0;
  if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if ((p[i] & 0xc0) != 0x80) return 0;
  return n;
}

bool tr_utf8_valid(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s, *end = p + n;
  while (p < end) {
    size_t k = *p < 0x80 ? 1 : utf8_len(p, end);
    if (!k) return false;
    p += k;
  }
  return true;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

bool tr_find_duplicate(const char *const *strs, size_t n, size_t step, const char **dup) {
  *dup = NULL;
  if (n < 2) return true;
  const char **s = ir_malloc(n * sizeof *s);   /* sorted, so that n names cost n log n */
  if (!s) return false;
  for (size_t i = 0; i < n; i++) s[i] = strs[i * step];
  qsort(s, n, sizeof *s, cmp_str);
  for (size_t i = 1; i < n && !*dup; i++)
    if (!strcmp(s[i - 1], s[i])) *dup = s[i];
  free(s);
  return true;
}

/* ---- a cursor over the header text, with the first error ----------------- */
typedef struct {
  const unsigned char *p, *end;
  char *out;            /* decoded strings (the header's strings block) */
  size_t used;
  char *why;
  size_t why_len;
  kiln_status st;       /* KILN_OK until the first failure */
} cursor;

static bool fail(cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(cursor *c, const char *fmt, ...) {
  if (c->st == KILN_OK) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, c->why_len, fmt, ap);
    va_end(ap);
    c->st = KILN_ERR_IO;
  }
  return false;
}

static bool out_of_memory(cursor *c) {
  if (c->st == KILN_OK) {
    snprintf(c->why, c->why_len, "out of memory reading the header");
    c->st = KILN_ERR_MEMORY;
  }
  return false;
}

static void skip_ws(cursor *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

/* Skips whitespace, then takes ch if it comes next. */
static bool take(cursor *c, char ch) {
  skip_ws(c);
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return true;
  }
  return false;
}

/* ch, or an error naming the tensor whose entry lacks it. */
static bool expect_in(cursor *c, char ch, const char *name) {
  return take(c, ch) || fail(c, "header: expected '%c' in the entry of tensor '%.200s'", ch, name);
}

/* ---- strings ------------------------------------------------------------- */
static int hex_digit(unsigned char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  ch |= 0x20;   /* lower case */
  return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

/* The value of 4 hex digits, -1 when one is not. */
static int hex4(const unsigned char *p) {
  int v = 0;
  for (int i = 0; i < 4; i++) {
    int d = hex_digit(p[i]);
    if (d < 0) return -1;
    v = v << 4 | d;
  }
  return v;
}

static void put_utf8(cursor *c, uint32_t cp) {
  unsigned char *o = (unsigned char *)c->out + c->used;
  int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  static const unsigned char lead[5] = {0, 0, 0xc0, 0xe0, 0xf0};
  for (int i = n - 1; i > 0; i--, cp >>= 6) o[i] = (unsigned char)(0x80 | (cp & 0x3f));
  o[0] = (unsigned char)(lead[n] | cp);
  c->used += (size_t)n;
}

/* The code point of \uXXXX (after the "\u"), a surrogate pair taken whole. */
static bool parse_u_escape(cursor *c, uint32_t *cp) {
  int hi = c->end - c->p >= 4 ? hex4(c->p) : -1, lo = -1;
  if (hi < 0) return fail(c, "header: \\u must be followed by 4 hex digits");
  c->p += 4;
  if (hi < 0xd800 || hi > 0xdfff) {
    *cp = (uint32_t)hi;
    return true;
  }
  if (hi <= 0xdbff && c->end - c->p >= 6 && c->p[0] == '\\' && c->p[1] == 'u') lo = hex4(c->p + 2);
  if (lo < 0xdc00 || lo > 0xdfff) return fail(c, "header: unpaired surrogate \\u%04x in a string", hi);
  c->p += 6;
  *cp = 0x10000 + ((uint32_t)(hi - 0xd800) << 10) + (uint32_t)(lo - 0xdc00);
  return true;
}

/* JSON's short escapes: the letter after the backslash, and the character. */
static const char esc_letter[8] = "\"\\/bfnrt", esc_char[8] = "\"\\/\b\f\n\r\t";

/* The escape after a backslash, decoded into the output. */
static bool parse_escape(cursor *c) {
  if (c->p == c->end) return fail(c, "header: unterminated string");
  unsigned char e = *c->p++;
  const char *k = memchr(esc_letter, e, sizeof esc_letter);
  if (k) {
    c->out[c->used++] = esc_char[k - esc_letter];
    return true;
  }
  if (e != 'u') return fail(c, "header: invalid escape in a string (a backslash before byte 0x%02x)", e);
  uint32_t cp = 0;
  if (!parse_u_escape(c, &cp)) return false;
  if (!cp) return fail(c, "header: a string holds \\u0000, which a C string cannot");
  put_utf8(c, cp);
  return true;
}

/* A JSON string decoded into the strings block: NUL-terminated, at most as
 * long as its text with the quotes, so the block (the header's length)
 * always has room. NULL after an error. */
static const char *parse_string(cursor *c) {
  skip_ws(c);
  if (c->p == c->end || *c->p != '"') return fail(c, "header: expected a string"), NULL;
  c->p++;
  const char *s = c->out + c->used;
  for (;;) {
    if (c->p == c->end) return fail(c, "header: unterminated string"), NULL;
    unsigned char b = *c->p;
    if (b == '"') break;
    if (b < 0x20) return fail(c, "header: control character 0x%02x in a string (JSON escapes it)", b), NULL;
    if (b == '\\') {
      c->p++;
      if (!parse_escape(c)) return NULL;
      continue;
    }
    size_t n = b < 0x80 ? 1 : utf8_len(c->p, c->end);
    if (!n) return fail(c, "header: invalid UTF-8 in a string"), NULL;
    memcpy(c->out + c->used, c->p, n);
    c->used += n;
    c->p += n;
  }
  c->p++;
  c->out[c->used++] = '\0';
  return s;
}

/* ---- a tensor's entry ---------------------------------------------------- */
/* A non-negative JSON integer (no sign, fraction, exponent or leading zero)
 * of at most max, in the entry of tensor name's key what. */
static bool parse_uint(cursor *c, uint64_t max, uint64_t *v, const char *name, const char *what) {
  skip_ws(c);
  const unsigned char *s = c->p;
  for (*v = 0; c->p < c->end && *c->p >= '0' && *c->p <= '9'; c->p++) {
    unsigned d = *c->p - '0';
    if (*v > (max - d) / 10)
      return fail(c, "tensor '%.200s': %s holds a number larger than %llu", name, what, (unsigned long long)max);
    *v = *v * 10 + d;
  }
  bool more = c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E');
  if (c->p == s || more || (c->p - s > 1 && *s == '0'))
    return fail(c, "tensor '%.200s': %s must hold non-negative integers", name, what);
  return true;
}

static bool parse_dtype(cursor *c, tr_st_entry *e) {
  size_t mark = c->used;   /* the string is only looked up */
  const char *s = parse_string(c);
  if (!s) return false;
  int d = 0;
  while (d < KILN_NUM_DTYPES && strcmp(s, dtype_names[d])) d++;
  if (d == KILN_NUM_DTYPES)
    return fail(c, "tensor '%.200s': unsupported dtype '%.20s' (kiln reads BOOL U8 I8 I16 I32 I64 F16 BF16 F32 F64)",
                e->name, s);
  e->dtype = (kiln_dtype)d;
  c->used = mark;
  return true;
}

static bool parse_shape(cursor *c, tr_st_entry *e) {
  if (!expect_in(c, '[', e->name)) return false;
  if (take(c, ']')) return true;
  do {
    uint64_t v;
    if (e->ndim == KILN_MAX_DIMS)
      return fail(c, "tensor '%.200s': shape has more than KILN_MAX_DIMS (%d) dims", e->name, KILN_MAX_DIMS);
    if (!parse_uint(c, INT64_MAX, &v, e->name, "shape")) return false;
    e->shape[e->ndim++] = (int64_t)v;
  } while (take(c, ','));
  return expect_in(c, ']', e->name);
}

static bool parse_offsets(cursor *c, tr_st_entry *e) {
  return expect_in(c, '[', e->name) && parse_uint(c, UINT64_MAX, &e->begin, e->name, "data_offsets") &&
         expect_in(c, ',', e->name) && parse_uint(c, UINT64_MAX, &e->end, e->name, "data_offsets") &&
         expect_in(c, ']', e->name);
}

/* "[2, 3]", as the header writes it. */
static void shape_text(const tr_st_entry *e, char *out, size_t len) {
  int n = snprintf(out, len, "[");
  for (int d = 0; d < e->ndim; d++)
    n += snprintf(out + n, len - (size_t)n, "%s%lld", d ? ", " : "", (long long)e->shape[d]);
  snprintf(out + n, len - (size_t)n, "]");
}

/* The entry's bytes: false when its element count does not fit int64 (as
 * kiln counts) or its bytes do not fit 64 bits. */
static bool entry_bytes(const tr_st_entry *e, uint64_t *bytes) {
  int64_t numel = 1;
  for (int d = 0; d < e->ndim; d++)
    if (!e->shape[d]) numel = 0;   /* empty whatever the other sizes are */
  for (int d = 0; d < e->ndim && numel; d++)
    if (__builtin_mul_overflow(numel, e->shape[d], &numel)) return false;
  return !__builtin_mul_overflow((uint64_t)numel, (uint64_t)kiln_dtype_size(e->dtype), bytes);
}

/* The offsets against the shape and the data's size. */
static bool check_entry(cursor *c, const tr_st_entry *e, uint64_t data_len) {
  char shape[8 * 22 + 3];
  uint64_t bytes;
  unsigned long long b = e->begin, x = e->end;
  shape_text(e, shape, sizeof shape);
  if (x < b) return fail(c, "tensor '%.200s': data_offsets [%llu, %llu) end before they begin", e->name, b, x);
  if (!entry_bytes(e, &bytes))
    return fail(c, "tensor '%.200s': shape %s overflows: its size does not fit in 64 bits", e->name, shape);
  if (x - b != bytes)
    return fail(c, "tensor '%.200s': data_offsets [%llu, %llu) hold %llu bytes, its %s shape %s needs %llu", e->name, b,
                x, x - b, dtype_names[e->dtype], shape, (unsigned long long)bytes);
  if (x > data_len)
    return fail(c, "tensor '%.200s': data_offsets [%llu, %llu) run past the end of the data (%llu bytes)", e->name, b,
                x, (unsigned long long)data_len);
  return true;
}

/* {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}: each key
 * once, in any order, nothing else. */
static bool parse_entry(cursor *c, tr_st_entry *e, uint64_t data_len) {
  static const char *const keys[3] = {"dtype", "shape", "data_offsets"};
  bool seen[3] = {false, false, false};
  if (!take(c, '{'))
    return fail(c, "header: tensor '%.200s' must be an object of dtype, shape and data_offsets", e->name);
  if (!take(c, '}')) {
    do {
      size_t mark = c->used;   /* keys are only compared */
      const char *key = parse_string(c);
      if (!key || !expect_in(c, ':', e->name)) return false;
      int k = 0;
      while (k < 3 && strcmp(key, keys[k])) k++;
      if (k == 3) return fail(c, "tensor '%.200s': unexpected key '%.40s'", e->name, key);
      if (seen[k]) return fail(c, "tensor '%.200s': key '%s' appears twice", e->name, keys[k]);
      c->used = mark;
      seen[k] = true;
      if (!(k == 0 ? parse_dtype(c, e) : k == 1 ? parse_shape(c, e) : parse_offsets(c, e))) return false;
    } while (take(c, ','));
    if (!expect_in(c, '}', e->name)) return false;
  }
  for (int k = 0; k < 3; k++)
    if (!seen[k]) return fail(c, "tensor '%.200s': key '%s' is missing", e->name, keys[k]);
  return check_entry(c, e, data_len);
}

/* ---- the header ---------------------------------------------------------- */
/* {"key": "value", ...}; the pairs are appended to h->meta. */
static bool parse_metadata(cursor *c, tr_st_header *h, size_t *cap) {
  if (!take(c, '{')) return fail(c, "header: __metadata__ must be an object of strings");
  if (take(c, '}')) return true;
  do {
    if (!ir_grow((void **)&h->meta, cap, 2 * h->nmeta, 2 * h->nmeta + 2, sizeof *h->meta, NULL))
      return out_of_memory(c);
    const char *k = parse_string(c), *v;
    if (!k) return false;
    if (!take(c, ':')) return fail(c, "header: expected ':' after __metadata__ key '%.200s'", k);
    skip_ws(c);
    if (c->p == c->end || *c->p != '"') return fail(c, "header: __metadata__ value of '%.200s' must be a string", k);
    if (!(v = parse_string(c))) return false;
    h->meta[2 * h->nmeta] = k;
    h->meta[2 * h->nmeta + 1] = v;
    h->nmeta++;
  } while (take(c, ','));
  return take(c, '}') || fail(c, "header: expected ',' or '}' in __metadata__");
}

/* The object: tensors by name, and at most one __metadata__. */
static bool parse_members(cursor *c, tr_st_header *h, uint64_t data_len) {
  size_t cap = 0, meta_cap = 0;
  bool seen_meta = false;
  if (c->p == c->end || *c->p++ != '{') return fail(c, "header: it must start with '{' (a JSON object)");
  if (take(c, '}')) return true;
  const char *key;
  do {
    if (!(key = parse_string(c))) return false;
    if (!take(c, ':')) return fail(c, "header: expected ':' after '%.200s'", key);
    if (!strcmp(key, "__metadata__")) {
      if (seen_meta) return fail(c, "header: __metadata__ appears twice");
      seen_meta = true;
      if (!parse_metadata(c, h, &meta_cap)) return false;
      continue;
    }
    if (!ir_grow((void **)&h->tensors, &cap, h->n, h->n + 1, sizeof *h->tensors, NULL)) return out_of_memory(c);
    tr_st_entry *e = &h->tensors[h->n++];
    *e = (tr_st_entry){.name = key};
    if (!parse_entry(c, e, data_len)) return false;
  } while (take(c, ','));
  if (!take(c, '}')) return fail(c, "header: expected ',' or '}' after '%.200s'", key);
  skip_ws(c);   /* writers pad the header with spaces */
  return c->p == c->end || fail(c, "header: unexpected text after the JSON object");
}

static int by_name(const void *a, const void *b) {
  return strcmp((*(const tr_st_entry *const *)a)->name, (*(const tr_st_entry *const *)b)->name);
}

/* By offsets, then in the header's order (the entries' own), so that a
 * message names the same pair whatever qsort does with ties. */
static int by_offsets(const void *a, const void *b) {
  const tr_st_entry *x = *(const tr_st_entry *const *)a, *y = *(const tr_st_entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return (x > y) - (x < y);
}

/* Names and metadata keys once each; the tensors, in the order of their
 * offsets, tile the data: the format has no gaps, overlaps or spare bytes. */
static bool check_layout(cursor *c, const tr_st_header *h, uint64_t data_len) {
  const char *dup;
  if (!tr_find_duplicate(h->meta, h->nmeta, 2, &dup)) return out_of_memory(c);
  if (dup) return fail(c, "header: __metadata__ key '%.200s' appears twice", dup);
  const tr_st_entry **by = ir_malloc((h->n ? h->n : 1) * sizeof *by);
  if (!by) return out_of_memory(c);
  for (size_t i = 0; i < h->n; i++) by[i] = &h->tensors[i];
  qsort(by, h->n, sizeof *by, by_name);
  for (size_t i = 1; i < h->n && c->st == KILN_OK; i++)
    if (!strcmp(by[i - 1]->name, by[i]->name)) fail(c, "header: tensor '%.200s' appears twice", by[i]->name);
  qsort(by, h->n, sizeof *by, by_offsets);
  unsigned long long pos = 0;
  for (size_t i = 0; i < h->n && c->st == KILN_OK; i++) {
    const tr_st_entry *e = by[i];
    if (e->begin < pos)
      fail(c, "tensors '%.100s' and '%.100s' overlap (data_offsets [%llu, %llu) and [%llu, %llu))", by[i - 1]->name,
           e->name, (unsigned long long)by[i - 1]->begin, pos, (unsigned long long)e->begin,
           (unsigned long long)e->end);
    else if (e->begin > pos)
      fail(c, "bytes [%llu, %llu) of the data belong to no tensor (the data must be covered exactly)", pos,
           (unsigned long long)e->begin);
    pos = e->end;
  }
  if (c->st == KILN_OK && pos != data_len)
    fail(c, "bytes [%llu, %llu) of the data belong to no tensor (the data must be covered exactly)", pos,
         (unsigned long long)data_len);
  free(by);
  return c->st == KILN_OK;
}

kiln_status tr_st_parse(const unsigned char *bytes, size_t len, tr_st_header *h, char *why, size_t why_len) {
  cursor c = {.why = why, .why_len = why_len};
  *h = (tr_st_header){0};
  uint64_t hlen = 0;
  for (int i = 7; i >= 0 && len >= 8; i--) hlen = hlen << 8 | bytes[i];
  if (len < 8) fail(&c, "truncated file (%zu bytes): a safetensors file starts with an 8-byte header length", len);
  else if (hlen > TR_ST_MAX_HEADER)
    fail(&c, "header length %llu is more than the %d bytes accepted", (unsigned long long)hlen, TR_ST_MAX_HEADER);
  else if (hlen > len - 8)
    fail(&c, "truncated header (%llu bytes announced, the file has %zu after the length)", (unsigned long long)hlen,
         len - 8);
  else if (!(h->strings = ir_malloc(hlen ? hlen : 1)))
    out_of_memory(&c);
  if (c.st != KILN_OK) return c.st;
  c.p = bytes + 8;
  c.end = c.p + hlen;
  c.out = h->strings;
  h->data_offset = 8 + hlen;
  if (parse_members(&c, h, len - h->data_offset)) check_layout(&c, h, len - h->data_offset);
  h->strings_len = c.used;
  return c.st;
}

void tr_st_header_free(tr_st_header *h) {
  free(h->tensors);
  free(h->meta);
  free(h->strings);
  *h = (tr_st_header){0};
}

/* ---- writing ------------------------------------------------------------- */
/* s as a JSON string, escaped as the safetensors package (serde_json)
 * escapes it, so that both write the same bytes: quotes, backslashes and
 * control characters, in the short form where JSON has one ('/' stays as
 * it is); the rest (UTF-8) as it is. */
static void put_string(ir_str *out, const char *s) {
  ir_str_append(out, "\"", 1);
  for (const char *p = s; *p; p++) {
    unsigned char b = (unsigned char)*p;
    const char *k = b == '/' ? NULL : memchr(esc_char, b, sizeof esc_char);
    if (k) ir_str_printf(out, "\\%c", esc_letter[k - esc_char]);
    else if (b < 0x20) ir_str_printf(out, "\\u%04x", b);
    else ir_str_append(out, p, 1);
  }
  ir_str_append(out, "\"", 1);
}

void tr_st_header_write(ir_str *out, const tr_st_entry *e, size_t n, const char *const *meta, size_t nmeta) {
  size_t start = out->len;
  ir_str_append(out, "\0\0\0\0\0\0\0\0{", 9);   /* the length, filled in at the end */
  if (nmeta) ir_str_printf(out, "\"__metadata__\":{");
  for (size_t i = 0; i < nmeta; i++) {
    ir_str_printf(out, "%s", i ? "," : "");
    put_string(out, meta[2 * i]);
    ir_str_printf(out, ":");
    put_string(out, meta[2 * i + 1]);
  }
  if (nmeta) ir_str_printf(out, "}");
  for (size_t i = 0; i < n; i++) {
    ir_str_printf(out, "%s", i || nmeta ? "," : "");
    put_string(out, e[i].name);
    ir_str_printf(out, ":{\"dtype\":\"%s\",\"shape\":[", dtype_names[e[i].dtype]);
    for (int d = 0; d < e[i].ndim; d++) ir_str_printf(out, "%s%lld", d ? "," : "", (long long)e[i].shape[d]);
    ir_str_printf(out, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)e[i].begin,
                  (unsigned long long)e[i].end);
  }
  ir_str_printf(out, "}");
  while ((out->len - start) % 8 && !out->failed) ir_str_append(out, " ", 1);
  if (out->failed) return;
  uint64_t hlen = out->len - start - 8;
  for (int i = 0; i < 8; i++) out->s[start + (size_t)i] = (char)(hlen >> (8 * i));
}
