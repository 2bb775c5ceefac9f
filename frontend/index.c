/* index.c: kiln_index, NumPy basic indexing written as a string
 * ("0, :, 1:3, ::2, -1, None, ..."): a parser with errors that point at the
 * offending character, then a chain of select/slice/unsqueeze views. */
#include "frontend/frontend.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define MAX_ITEMS 32

typedef enum { IX_INT, IX_SLICE, IX_NONE, IX_ELLIPSIS } ix_kind;

typedef struct {
  ix_kind kind;
  int64_t v[3];         /* INT: v[0]; SLICE: start, stop, step */
  int pos;              /* where the item starts in the string */
} ix_item;

typedef struct {
  const char *s;
  int at;
  const char *err;      /* what went wrong at position err_at */
  int err_at;
} ix_parser;

static void skip_space(ix_parser *p) {
  while (isspace((unsigned char)p->s[p->at])) p->at++;
}

static bool fail_at(ix_parser *p, int at, const char *why) {
  p->err = why;
  p->err_at = at;
  return false;
}

/* An optionally signed decimal integer; false if none is there. */
static bool parse_int(ix_parser *p, int64_t *out) {
  int start = p->at, i = p->at;
  bool neg = p->s[i] == '-';
  if (p->s[i] == '-' || p->s[i] == '+') i++;
  if (!isdigit((unsigned char)p->s[i])) return false;
  uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : INT64_MAX;
  for (; isdigit((unsigned char)p->s[i]); i++) {
    uint64_t digit = (uint64_t)(p->s[i] - '0');
    if (v > (limit - digit) / 10) return fail_at(p, start, "integer out of range");  /* checked before it can wrap */
    v = v * 10 + digit;
  }
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  p->at = i;
  return true;
}

/* An optional integer bound of a slice; def when omitted. */
static bool slice_part(ix_parser *p, int64_t def, int64_t *out) {
  skip_space(p);
  *out = def;
  char c = p->s[p->at];
  if (c == ':' || c == ',' || c == '\0') return true;
  if (!parse_int(p, out)) return p->err ? false : fail_at(p, p->at, "expected an integer slice bound");
  skip_space(p);   /* "2 :" as well as "2:" */
  return true;
}

/* start:stop[:step] after the first bound (already in it->v[0]). */
static bool parse_slice(ix_parser *p, ix_item *it) {
  it->kind = IX_SLICE;
  p->at++;   /* the ':' */
  if (!slice_part(p, KILN_END, &it->v[1])) return false;
  it->v[2] = 1;
  if (p->s[p->at] != ':') return true;
  p->at++;
  int at = p->at;
  if (!slice_part(p, 1, &it->v[2])) return false;
  if (it->v[2] <= 0) return fail_at(p, at, "slice step must be greater than zero");
  return true;
}

static bool parse_item(ix_parser *p, ix_item *it) {
  skip_space(p);
  it->pos = p->at;
  const char *c = p->s + p->at;
  if (!strncmp(c, "...", 3)) {
    it->kind = IX_ELLIPSIS;
    p->at += 3;
  } else if (!strncmp(c, "None", 4) && !isalnum((unsigned char)c[4])) {
    it->kind = IX_NONE;
    p->at += 4;
  } else if (*c == ':') {
    it->v[0] = 0;
    return parse_slice(p, it);
  } else if (parse_int(p, &it->v[0])) {
    skip_space(p);
    if (p->s[p->at] == ':') return parse_slice(p, it);
    it->kind = IX_INT;
  } else {
    return p->err ? false : fail_at(p, p->at, "expected an integer, a slice, None or ...");
  }
  return true;
}

/* Items separated by commas; an empty string is no index at all. */
static int parse_items(ix_parser *p, ix_item *items) {
  int n = 0;
  skip_space(p);
  if (!p->s[p->at]) return 0;
  for (;;) {
    if (n == MAX_ITEMS) return fail_at(p, p->at, "too many items"), -1;
    if (!parse_item(p, &items[n++])) return -1;
    skip_space(p);
    if (!p->s[p->at]) return n;
    if (p->s[p->at] != ',') return fail_at(p, p->at, "expected ',' between items"), -1;
    p->at++;
  }
}

/* ---- applying the items -------------------------------------------------- */
typedef struct {
  const char *f;
  int l;
  const char *index;
  ir_node *t;
} ix_ctx;

static ir_node *ix_error(const ix_ctx *c, const char *why) {
  ir_str s = {0};
  fe_describe(&s, c->t);
  ir_node *e = fe_error(KILN_ERR_ARG, c->f, c->l, "index \"%s\": %s (input: %s)", c->index, why, s.s);
  ir_str_free(&s);
  return e;
}

/* Checks counts: indexed dims, ellipses, resulting rank. NULL or the error. */
static ir_node *check_counts(const ix_ctx *c, const ix_item *items, int n, int *fill) {
  int used = 0, ints = 0, nones = 0, ell = 0;
  for (int i = 0; i < n; i++) {
    used += items[i].kind == IX_INT || items[i].kind == IX_SLICE;
    ints += items[i].kind == IX_INT;
    nones += items[i].kind == IX_NONE;
    ell += items[i].kind == IX_ELLIPSIS;
  }
  char why[160];
  if (ell > 1) return ix_error(c, "an index can only have a single ellipsis ('...')");
  if (used > c->t->ndim) {
    snprintf(why, sizeof why, "too many indices for tensor of dimension %d (%d given)", c->t->ndim, used);
    return ix_error(c, why);
  }
  if (c->t->ndim - ints + nones > KILN_MAX_DIMS) {
    snprintf(why, sizeof why, "the result would have %d dims, more than KILN_MAX_DIMS (%d)",
             c->t->ndim - ints + nones, KILN_MAX_DIMS);
    return ix_error(c, why);
  }
  *fill = c->t->ndim - used;
  return NULL;
}

/* Integers are checked against the input's dim od before any view is built. */
static ir_node *check_ints(const ix_ctx *c, const ix_item *items, int n, int fill) {
  for (int i = 0, od = 0; i < n; i++) {
    if (items[i].kind == IX_ELLIPSIS) od += fill;
    if (items[i].kind != IX_INT && items[i].kind != IX_SLICE) continue;
    int64_t size = c->t->shape[od], v = items[i].v[0];
    if (items[i].kind == IX_INT && (v < -size || v >= size)) {
      char why[160];
      snprintf(why, sizeof why, "index %lld is out of bounds for dimension %d with size %lld", (long long)v, od,
               (long long)size);
      return ix_error(c, why);
    }
    od++;
  }
  return NULL;
}

/* Where each item acts: its input dim (INT, SLICE) and its output dim
 * (SLICE, NONE), ellipsis filling `fill` dims of both. */
static void place_items(ix_item *items, int n, int fill, int *in_dim, int *out_dim) {
  for (int i = 0, od = 0, rd = 0; i < n; i++) {
    in_dim[i] = od, out_dim[i] = rd;
    switch (items[i].kind) {
    case IX_ELLIPSIS: od += fill, rd += fill; break;
    case IX_INT: od++; break;
    case IX_SLICE: od++, rd++; break;
    case IX_NONE: rd++; break;
    }
  }
}

/* cur = next, releasing cur when it is a handle made here (*owned). */
static ir_node *step_to(ir_node *cur, ir_node *next, bool *owned) {
  if (*owned) fe_drop(cur);
  *owned = true;
  return next;
}

/* Integers first (last dim first, so the others keep their place), then
 * slices, then the new dims in output order: the rank only falls before it
 * rises, so no intermediate has more dims than input or result. */
static ir_node *apply_items(const ix_ctx *c, ix_item *items, int n, int fill) {
  int in_dim[MAX_ITEMS], out_dim[MAX_ITEMS];
  place_items(items, n, fill, in_dim, out_dim);
  ir_node *cur = c->t;
  bool owned = false;
  for (int i = n - 1; i >= 0; i--)
    if (items[i].kind == IX_INT) cur = step_to(cur, kiln_select_at(c->f, c->l, cur, in_dim[i], items[i].v[0]), &owned);
  for (int i = 0, ints = 0; i < n; i++) {
    ints += items[i].kind == IX_INT;
    if (items[i].kind != IX_SLICE) continue;
    const int64_t *v = items[i].v;
    cur = step_to(cur, kiln_slice_at(c->f, c->l, cur, in_dim[i] - ints, v[0], v[1], v[2]), &owned);
  }
  for (int i = 0; i < n; i++)
    if (items[i].kind == IX_NONE) cur = step_to(cur, kiln_unsqueeze_at(c->f, c->l, cur, out_dim[i]), &owned);
  return owned ? cur : fe_same(c->t);
}

static ir_node *index_views(const char *f, int l, ir_node *t, const char *index) {
  ir_node *e = fe_check_arg(f, l, "index", t, 1);
  if (e) return e;
  if (!index) return fe_error(KILN_ERR_ARG, f, l, "index: the index string is NULL");
  ix_parser p = {.s = index};
  ix_item items[MAX_ITEMS];
  int n = parse_items(&p, items), fill = 0;
  if (n < 0)
    return fe_error(KILN_ERR_ARG, f, l, "index \"%s\": %s at position %d", index, p.err, p.err_at);
  ix_ctx c = {f, l, index, t};
  if ((e = check_counts(&c, items, n, &fill)) || (e = check_ints(&c, items, n, fill))) return e;
  return apply_items(&c, items, n, fill);
}

kiln_tensor *kiln_index_at(const char *f, int l, kiln_tensor *t, const char *index) {
  FE_AS("index", index_views(f, l, t, index));
}
