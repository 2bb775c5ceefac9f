/* npy_header.c: NumPy's .npy header (numpy.lib.format), read and written.
 * Self-contained (no runtime, no allocation) so the fuzzer can drive the
 * parser on raw bytes; npy.c does the files and tensors around it. */
#include "frontend/frontend.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAGIC "\x93NUMPY"
#define MAGIC_LEN 6
/* numpy.lib.format refuses longer headers by default (max_header_size) for
 * the same reason: a valid header for kiln's dtypes and 8 dims is < 300 bytes. */
#define MAX_HEADER 10000
#define ALIGN 64          /* NumPy pads magic + header to a multiple of 64 */

/* The NumPy type strings kiln reads and writes, without the byte-order mark. */
static const struct { const char *code; kiln_dtype dt; size_t size; } types[] = {
    {"b1", KILN_BOOL, 1}, {"u1", KILN_U8, 1},  {"i1", KILN_I8, 1},  {"i2", KILN_I16, 2}, {"i4", KILN_I32, 4},
    {"i8", KILN_I64, 8},  {"f2", KILN_F16, 2}, {"f4", KILN_F32, 4}, {"f8", KILN_F64, 8},
};
#define NTYPES (sizeof types / sizeof types[0])

/* ---- a cursor over the header text, with the first error ---------------- */
typedef struct {
  const char *p, *end;
  char *why;
  size_t why_len;
  bool failed;
} cursor;

static bool fail(cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(cursor *c, const char *fmt, ...) {
  if (!c->failed) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, c->why_len, fmt, ap);
    va_end(ap);
    c->failed = true;
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

static bool expect(cursor *c, char ch, const char *where) {
  return take(c, ch) || fail(c, "header: expected '%c' %s", ch, where);
}

/* A quoted Python string without escapes, into out (NUL-terminated). */
static bool parse_string(cursor *c, char *out, size_t len) {
  skip_ws(c);
  char q = c->p < c->end ? *c->p : 0;
  if (q != '\'' && q != '"') return fail(c, "header: expected a quoted string");
  const char *s = ++c->p;
  while (c->p < c->end && *c->p != q && *c->p != '\\') c->p++;
  if (c->p == c->end || *c->p != q) return fail(c, "header: unterminated or escaped string");
  size_t n = (size_t)(c->p++ - s);
  if (n >= len) return fail(c, "header: string '%.20s...' is too long", s);
  memcpy(out, s, n);
  out[n] = '\0';
  return true;
}

static bool parse_bool(cursor *c, bool *out) {
  skip_ws(c);
  size_t left = (size_t)(c->end - c->p);
  if (left >= 4 && !memcmp(c->p, "True", 4)) *out = true, c->p += 4;
  else if (left >= 5 && !memcmp(c->p, "False", 5)) *out = false, c->p += 5;
  else return fail(c, "header: fortran_order must be True or False");
  return true;
}

/* A non-negative decimal size (Python 2 files may end it with L). */
static bool parse_size(cursor *c, int64_t *out) {
  skip_ws(c);
  if (c->p == c->end || *c->p < '0' || *c->p > '9') return fail(c, "header: shape must hold non-negative integers");
  int64_t v = 0;
  for (; c->p < c->end && *c->p >= '0' && *c->p <= '9'; c->p++)
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *c->p - '0', &v))
      return fail(c, "shape overflow: a size does not fit in int64");
  if (c->p < c->end && *c->p == 'L') c->p++;
  *out = v;
  return true;
}

/* "()", "(3,)", "(2, 3)", a trailing comma allowed. */
static bool parse_shape(cursor *c, fe_npy_header *h) {
  if (!expect(c, '(', "to open the shape")) return false;
  h->ndim = 0;
  while (!take(c, ')')) {
    if (h->ndim == KILN_MAX_DIMS) return fail(c, "shape has more than KILN_MAX_DIMS (%d) dims", KILN_MAX_DIMS);
    if (!parse_size(c, &h->shape[h->ndim++])) return false;
    if (!take(c, ',') && !(skip_ws(c), c->p < c->end && *c->p == ')'))
      return fail(c, "header: expected ',' or ')' in the shape");
  }
  return true;
}

/* '<f4' and friends: little-endian '<' (or '|' / '=' for one byte), big '>'. */
static bool parse_descr(cursor *c, fe_npy_header *h) {
  char s[32];
  if (!parse_string(c, s, sizeof s)) return false;
  for (size_t i = 0; i < NTYPES; i++) {
    if (strcmp(s + (s[0] ? 1 : 0), types[i].code)) continue;
    bool one = types[i].size == 1;
    if (s[0] == '<' || s[0] == '=' || (s[0] == '|' && one) || s[0] == '>') {
      h->dtype = types[i].dt;
      h->elem_size = types[i].size;
      h->big_endian = s[0] == '>' && !one;
      return true;
    }
  }
  return fail(c, "unsupported dtype '%s' (kiln reads b1 u1 i1 i2 i4 i8 f2 f4 f8)", s);
}

/* {'descr': ..., 'fortran_order': ..., 'shape': ...}: each key once, any order. */
static bool parse_dict(cursor *c, fe_npy_header *h) {
  static const char *const keys[] = {"descr", "fortran_order", "shape"};
  bool seen[3] = {false, false, false};
  if (!expect(c, '{', "at the start of the header")) return false;
  while (!take(c, '}')) {
    char key[32];
    if (!parse_string(c, key, sizeof key) || !expect(c, ':', "after a key")) return false;
    int k = 0;
    while (k < 3 && strcmp(key, keys[k])) k++;
    if (k == 3) return fail(c, "header: unexpected key '%s'", key);
    if (seen[k]) return fail(c, "header: key '%s' appears twice", key);
    seen[k] = true;
    bool ok = k == 0 ? parse_descr(c, h) : k == 1 ? parse_bool(c, &h->fortran) : parse_shape(c, h);
    if (!ok) return false;
    if (!take(c, ',') && !(skip_ws(c), c->p < c->end && *c->p == '}'))
      return fail(c, "header: expected ',' or '}' after '%s'", key);
  }
  for (int k = 0; k < 3; k++)
    if (!seen[k]) return fail(c, "header: key '%s' is missing", keys[k]);
  skip_ws(c);
  return c->p == c->end || fail(c, "header: unexpected text after the dict");
}

/* ---- the fixed prefix: magic, version, header length --------------------- */
static uint32_t read_le(const unsigned char *p, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* The header text's offset and length, after the version's length field. */
static bool parse_prefix(cursor *c, const unsigned char *b, size_t len, size_t *text, size_t *text_len) {
  if (len < MAGIC_LEN + 2 || memcmp(b, MAGIC, MAGIC_LEN))
    return fail(c, "not an npy file (it does not start with \\x93NUMPY)");
  int major = b[MAGIC_LEN], minor = b[MAGIC_LEN + 1];
  /* 2.0 widens the length to 4 bytes; 3.0 only allows UTF-8 in it, which no
   * header kiln accepts contains */
  if (major < 1 || major > 3 || minor != 0) return fail(c, "unsupported npy format version %d.%d", major, minor);
  int nlen = major == 1 ? 2 : 4;
  if (len < MAGIC_LEN + 2 + (size_t)nlen) return fail(c, "truncated header (the file has %zu bytes)", len);
  *text_len = read_le(b + MAGIC_LEN + 2, nlen);
  *text = MAGIC_LEN + 2 + (size_t)nlen;
  if (*text_len > MAX_HEADER)
    return fail(c, "header too long (%zu bytes; at most %d are accepted)", *text_len, MAX_HEADER);
  if (*text_len > len - *text)
    return fail(c, "truncated header (%zu bytes announced, the file has %zu after the prefix)", *text_len,
                len - *text);
  return true;
}

/* Element count and data bytes, checking both fit (and the file holds them). */
static bool check_data(cursor *c, fe_npy_header *h, size_t len) {
  int64_t numel = 1;
  for (int i = 0; i < h->ndim; i++)
    if (!h->shape[i]) numel = 0;   /* empty whatever the other sizes are */
  for (int i = 0; i < h->ndim && numel; i++)
    if (__builtin_mul_overflow(numel, h->shape[i], &numel))
      return fail(c, "shape overflow: the element count does not fit in int64");
  if (__builtin_mul_overflow((size_t)numel, h->elem_size, &h->data_bytes))
    return fail(c, "shape overflow: the data does not fit in memory");
  if (h->data_bytes > len - h->data_offset)
    return fail(c, "truncated data (%zu bytes needed after the header, the file has %zu)", h->data_bytes,
                len - h->data_offset);
  return true;
}

bool fe_npy_parse(const unsigned char *bytes, size_t len, fe_npy_header *h, char *why, size_t why_len) {
  cursor c = {.why = why, .why_len = why_len};
  size_t text = 0, text_len = 0;
  *h = (fe_npy_header){0};
  if (!parse_prefix(&c, bytes, len, &text, &text_len)) return false;
  c.p = (const char *)bytes + text;
  c.end = c.p + text_len;
  h->data_offset = text + text_len;
  return parse_dict(&c, h) && check_data(&c, h, len);
}

/* ---- writing -------------------------------------------------------------- */
size_t fe_npy_header_write(char *out, kiln_dtype dt, int ndim, const int64_t *shape) {
  size_t i = 0;
  while (i < NTYPES && types[i].dt != dt) i++;
  if (i == NTYPES) return 0;
  char dict[FE_NPY_HEADER_MAX];
  int n = snprintf(dict, sizeof dict, "{'descr': '%c%s', 'fortran_order': False, 'shape': (",
                   types[i].size == 1 ? '|' : '<', types[i].code);
  for (int d = 0; d < ndim; d++) n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%lld", d ? ", " : "",
                                               (long long)shape[d]);
  n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", ndim == 1 ? "," : "");
  /* version 1.0 always suffices: 8 dims of 19 digits stay far below 65535 */
  size_t total = (MAGIC_LEN + 4 + (size_t)n + 1 + ALIGN - 1) / ALIGN * ALIGN, text = total - MAGIC_LEN - 4;
  memcpy(out, MAGIC "\x01\x00", MAGIC_LEN + 2);
  out[MAGIC_LEN + 2] = (char)(text & 0xff);
  out[MAGIC_LEN + 3] = (char)(text >> 8);
  memcpy(out + MAGIC_LEN + 4, dict, (size_t)n);
  memset(out + MAGIC_LEN + 4 + n, ' ', text - (size_t)n - 1);
  out[total - 1] = '\n';
  return total;
}
