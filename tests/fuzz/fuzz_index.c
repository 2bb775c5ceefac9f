/* fuzz_index.c: libFuzzer target for kiln_index's parser. The first byte
 * picks a small shape (1-4 dims of size 1-4) of an arange tensor, the rest
 * is the index string. An index kiln accepts must select exactly what NumPy's
 * basic indexing selects, computed here by an oracle of its own (a tokenizer
 * and Python's slice rules, sharing no code with frontend/index.c); an index
 * kiln refuses must be one the oracle refuses. Any difference aborts. */
#include <kiln.h>

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ITEMS 32   /* kiln_index's limit on items */

/* ---- tokens ----------------------------------------------------------------- */
typedef enum { T_INT, T_COLON, T_COMMA, T_ELLIPSIS, T_NONE, T_END, T_BAD } tok_kind;
typedef struct { tok_kind kind; int64_t v; } token;

/* [+-]digits within int64; a sign must touch its digits. */
static bool read_int(const char **p, int64_t *out) {
  const char *s = *p;
  int sign = 1;
  if (*s == '+' || *s == '-') sign = *s++ == '-' ? -1 : 1;
  if (!isdigit((unsigned char)*s)) return false;
  __int128 v = 0;
  for (; isdigit((unsigned char)*s); s++) {
    v = v * 10 + (*s - '0');
    if (v > (__int128)INT64_MAX + 1) return false;
  }
  v *= sign;
  if (v > INT64_MAX || v < INT64_MIN) return false;
  *out = (int64_t)v;
  *p = s;
  return true;
}

static int tokenize(const char *s, token *t, int cap) {
  int n = 0;
  for (;;) {
    while (isspace((unsigned char)*s)) s++;
    if (n == cap) return -1;
    token *k = &t[n++];
    if (!*s) { k->kind = T_END; return n; }
    if (*s == ':') { k->kind = T_COLON; s++; }
    else if (*s == ',') { k->kind = T_COMMA; s++; }
    else if (!strncmp(s, "...", 3)) { k->kind = T_ELLIPSIS; s += 3; }
    else if (!strncmp(s, "None", 4) && !isalnum((unsigned char)s[4])) { k->kind = T_NONE; s += 4; }
    else if (read_int(&s, &k->v)) k->kind = T_INT;
    else { k->kind = T_BAD; return n; }
  }
}

/* ---- items -------------------------------------------------------------------- */
typedef enum { I_INT, I_SLICE, I_NONE, I_ELLIPSIS } item_kind;
typedef struct {
  item_kind kind;
  int64_t start, stop, step;
  bool has_start, has_stop;
} item;

/* index := empty | item (',' item)* ; item := '...' | 'None' | INT | [INT] ':' [INT] [':' [INT]] */
static int parse(const token *t, item *it) {
  int i = 0, n = 0;
  if (t[0].kind == T_END) return 0;
  for (;;) {
    if (n == MAX_ITEMS) return -1;
    item *x = &it[n++];
    memset(x, 0, sizeof *x);
    x->step = 1;
    if (t[i].kind == T_ELLIPSIS) x->kind = I_ELLIPSIS, i++;
    else if (t[i].kind == T_NONE) x->kind = I_NONE, i++;
    else if (t[i].kind == T_INT && t[i + 1].kind != T_COLON) x->kind = I_INT, x->start = t[i++].v;
    else {
      x->kind = I_SLICE;
      if (t[i].kind == T_INT) x->has_start = true, x->start = t[i++].v;
      if (t[i++].kind != T_COLON) return -1;
      if (t[i].kind == T_INT) x->has_stop = true, x->stop = t[i++].v;
      if (t[i].kind == T_COLON) {
        i++;
        if (t[i].kind == T_INT) x->step = t[i++].v;
        if (x->step <= 0) return -1;
      }
    }
    if (t[i].kind == T_END) return n;
    if (t[i++].kind != T_COMMA) return -1;
  }
}

/* ---- NumPy's selection ---------------------------------------------------------- */
/* Output dim d reads source dim src[d] at first[d] + i*step[d] (src -1: a new
 * dim of size 1); fixed source dims take at[] . */
typedef struct {
  int ndim;
  int64_t shape[KILN_MAX_DIMS + MAX_ITEMS];
  int src[KILN_MAX_DIMS + MAX_ITEMS];
  int64_t first[KILN_MAX_DIMS + MAX_ITEMS], step[KILN_MAX_DIMS + MAX_ITEMS];
  int64_t at[KILN_MAX_DIMS];
} selection;

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Python's slice.indices for a positive step: start and stop clamp into [0, n]. */
static void slice_dim(const item *x, int64_t n, int64_t *first, int64_t *len) {
  int64_t a = x->has_start ? x->start : 0, b = x->has_stop ? x->stop : n;
  if (a < 0) a = a < -n ? 0 : a + n;
  if (b < 0) b = b < -n ? 0 : b + n;
  a = clamp(a, 0, n), b = clamp(b, 0, n);
  *first = a;
  *len = b > a ? (b - a - 1) / x->step + 1 : 0;
}

/* False when NumPy (with kiln's limit of KILN_MAX_DIMS) raises. */
static bool select_items(const item *it, int n, int ndim, const int64_t *shape, selection *s) {
  int used = 0, ell = 0, ints = 0, nones = 0;
  for (int i = 0; i < n; i++) {
    used += it[i].kind == I_INT || it[i].kind == I_SLICE;
    ints += it[i].kind == I_INT;
    nones += it[i].kind == I_NONE;
    ell += it[i].kind == I_ELLIPSIS;
  }
  if (ell > 1 || used > ndim || ndim - ints + nones > KILN_MAX_DIMS) return false;
  s->ndim = 0;
  int d = 0;
  for (int i = 0; i < n; i++) {
    const item *x = &it[i];
    if (x->kind == I_ELLIPSIS) {
      for (int k = 0; k < ndim - used; k++, d++) {
        int o = s->ndim++;
        s->src[o] = d, s->first[o] = 0, s->step[o] = 1, s->shape[o] = shape[d];
      }
    } else if (x->kind == I_NONE) {
      int o = s->ndim++;
      s->src[o] = -1, s->shape[o] = 1;
    } else if (x->kind == I_INT) {
      if (x->start < -shape[d] || x->start >= shape[d]) return false;
      s->at[d] = x->start < 0 ? x->start + shape[d] : x->start;
      d++;
    } else {
      int o = s->ndim++;
      s->src[o] = d, s->step[o] = x->step;
      slice_dim(x, shape[d], &s->first[o], &s->shape[o]);
      d++;
    }
  }
  for (; d < ndim; d++) {   /* the dims no item named */
    int o = s->ndim++;
    s->src[o] = d, s->first[o] = 0, s->step[o] = 1, s->shape[o] = shape[d];
  }
  return true;
}

static int64_t numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

/* The selected elements of arange(numel).reshape(shape), in order. */
static void expected(const selection *s, int ndim, const int64_t *shape, int64_t *out) {
  int64_t total = numel(s->ndim, s->shape), idx[KILN_MAX_DIMS + MAX_ITEMS] = {0};
  for (int64_t e = 0; e < total; e++) {
    int64_t at[KILN_MAX_DIMS];
    memcpy(at, s->at, sizeof at);
    for (int o = 0; o < s->ndim; o++)
      if (s->src[o] >= 0) at[s->src[o]] = s->first[o] + idx[o] * s->step[o];
    int64_t flat = 0;
    for (int d = 0; d < ndim; d++) flat = flat * shape[d] + at[d];
    out[e] = flat;
    for (int o = s->ndim - 1; o >= 0 && ++idx[o] == s->shape[o]; o--) idx[o] = 0;
  }
}

/* ---- the target -------------------------------------------------------------- */
static void fail(const char *index, const char *why) {
  fprintf(stderr, "fuzz_index: \"%s\": %s (kiln: %s)\n", index, why, kiln_last_error());
  abort();
}

/* kiln's result against the oracle's (ok: the oracle accepts). */
static void compare(kiln_tensor *y, const char *index, bool ok, const selection *s, int ndim, const int64_t *shape) {
  bool accepted = kiln_status_of(y) == KILN_OK;
  if (accepted != ok) fail(index, accepted ? "kiln accepts what NumPy refuses" : "kiln refuses what NumPy accepts");
  if (!ok) return;
  if (kiln_ndim(y) != s->ndim) fail(index, "wrong number of dims");
  for (int d = 0; d < s->ndim; d++)
    if (kiln_shape(y)[d] != s->shape[d]) fail(index, "wrong shape");
  int64_t n = numel(s->ndim, s->shape), got[256], want[256];
  if (kiln_copy_to_host(y, got, sizeof got) != KILN_OK) fail(index, "the selection cannot be read");
  expected(s, ndim, shape, want);
  if (memcmp(got, want, sizeof(int64_t) * (size_t)n)) fail(index, "wrong elements");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 512) return 0;
  int ndim = 1 + (data[0] & 3);
  int64_t shape[4], values[256];
  for (int d = 0; d < ndim; d++) shape[d] = 1 + ((data[0] >> (2 + d % 3 * 2)) & 3);
  for (int64_t i = 0; i < numel(ndim, shape); i++) values[i] = i;
  char index[512];
  memcpy(index, data + 1, size - 1);
  index[size - 1] = '\0';
  token toks[2 * 512 + 2];
  item items[MAX_ITEMS];
  selection sel;
  int nt = tokenize(index, toks, (int)(sizeof toks / sizeof *toks));
  int ni = nt > 0 && toks[nt - 1].kind == T_END ? parse(toks, items) : -1;
  bool ok = ni >= 0 && select_items(items, ni, ndim, shape, &sel);
  kiln_scope_begin();
  kiln_tensor *t = kiln_from_data(values, KILN_I64, ndim, shape);
  compare(kiln_index(t, index), index, ok, &sel, ndim, shape);
  kiln_scope_end();
  return 0;
}
