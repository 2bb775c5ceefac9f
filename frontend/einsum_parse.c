/* einsum_parse.c: torch.einsum's equation syntax ("bij,bjk->bik", "ii",
 * "...ij->...ji", spaces anywhere) parsed into subscript ids per operand dim
 * and for the output; every malformed equation is a message that quotes it
 * and points at the problem. Pure: no tensors (tests/fuzz/fuzz_einsum.c). */
#include "frontend/frontend.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define NO_POS (-1)

typedef struct {
  const char *eq;
  size_t at;      /* the next character */
  char *why;
  size_t why_len;
} cursor;

static bool fail_at(cursor *c, long pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail_at(cursor *c, long pos, const char *fmt, ...) {
  char what[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  int shown = (int)strnlen(c->eq, 120);
  const char *more = c->eq[shown] ? "..." : "";
  if (pos == NO_POS) snprintf(c->why, c->why_len, "einsum: %s in \"%.*s%s\"", what, shown, c->eq, more);
  else snprintf(c->why, c->why_len, "einsum: %s at position %ld of \"%.*s%s\"", what, pos, shown, c->eq, more);
  return false;
}

static int letter_id(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
  return -1;
}

static char id_letter(int id) { return (char)(id < 26 ? 'A' + id : 'a' + id - 26); }

static void skip_spaces(cursor *c) {
  while (c->eq[c->at] == ' ') c->at++;
}

/* One term's subscripts: letter ids, and -1 where its "..." stands. Stops
 * at ',', "->" or the end. */
typedef struct {
  int n;
  int ids[KILN_MAX_DIMS + 1];
  bool ell;
  long pos;       /* where the term starts */
} term;

static bool read_term(cursor *c, term *t, bool output) {
  memset(t, 0, sizeof *t);
  skip_spaces(c);
  t->pos = (long)c->at;
  for (;; skip_spaces(c)) {
    char ch = c->eq[c->at];
    if (!ch || ch == ',' || (ch == '-' && c->eq[c->at + 1] == '>')) return true;
    long pos = (long)c->at;
    int id = letter_id(ch);
    if (ch == '.') {
      if (strncmp(c->eq + c->at, "...", 3)) return fail_at(c, pos, "'.' that is not part of an ellipsis ('...')");
      if (t->ell) return fail_at(c, pos, "a second ellipsis in one %s", output ? "output" : "operand");
      t->ell = true;
      c->at += 3;
    } else if (id < 0) {
      return fail_at(c, pos, "invalid subscript '%c' (0x%02x); subscripts are letters (a-z, A-Z) and '...'",
                     ch >= 32 && ch < 127 ? ch : '?', (unsigned char)ch);
    } else {
      c->at++;
    }
    if (t->n == KILN_MAX_DIMS) return fail_at(c, pos, "more than KILN_MAX_DIMS (%d) subscripts in one term", KILN_MAX_DIMS);
    t->ids[t->n++] = id;
  }
}

/* The operand's ids: letters as they come, its "..." as the last of the
 * broadcast ellipsis dims (aligned to the right). */
static void place_operand(const term *t, int i, int ndim, int nell, fe_einsum *p) {
  int e = ndim - (t->n - t->ell);
  p->ndim[i] = ndim;
  for (int j = 0, d = 0; j < t->n; j++) {
    if (t->ids[j] >= 0) {
      p->sub[i][d++] = (signed char)t->ids[j];
      continue;
    }
    for (int k = 0; k < e; k++) p->sub[i][d++] = (signed char)(FE_EINSUM_ELL + nell - e + k);
  }
}

/* Each operand's term matches its tensor's number of dims. */
static bool check_dims(cursor *c, const term *t, int i, int ndim, int *ell_dims) {
  int letters = t->n - t->ell;
  if (ndim < 0 || ndim > KILN_MAX_DIMS) return fail_at(c, t->pos, "operand %d has %d dims", i, ndim);
  if (t->ell ? letters > ndim : letters != ndim)
    return fail_at(c, t->pos, "operand %d has %d subscripts%s but the tensor has %d dims", i, letters,
                   t->ell ? " and an ellipsis" : "", ndim);
  *ell_dims = t->ell ? ndim - letters : 0;
  return true;
}

/* Explicit output: known subscripts, each once. */
static bool place_output(cursor *c, const term *t, const int *count, int nell, fe_einsum *p) {
  int n = 0;
  bool seen[FE_EINSUM_LETTERS] = {0};
  size_t at = (size_t)t->pos;
  for (int j = 0; j < t->n; j++) {
    while (c->eq[at] == ' ') at++;
    int id = t->ids[j];
    if (id < 0) {
      if (n + nell > KILN_MAX_DIMS) return fail_at(c, (long)at, "an output of more than KILN_MAX_DIMS dims");
      for (int k = 0; k < nell; k++) p->out[n++] = (signed char)(FE_EINSUM_ELL + k);
      at += 3;
      continue;
    }
    if (!count[id]) return fail_at(c, (long)at, "output subscript '%c' does not appear in any operand", id_letter(id));
    if (seen[id]) return fail_at(c, (long)at, "output subscript '%c' appears more than once", id_letter(id));
    if (n == KILN_MAX_DIMS) return fail_at(c, (long)at, "an output of more than KILN_MAX_DIMS dims");
    seen[id] = true;
    p->out[n++] = (signed char)id;
    at++;
  }
  p->nout = n;
  return true;
}

/* Implicit output: the ellipsis dims, then the subscripts used once, sorted. */
static bool implicit_output(cursor *c, const int *count, int nell, fe_einsum *p) {
  int n = 0;
  for (int k = 0; k < nell; k++) p->out[n++] = (signed char)(FE_EINSUM_ELL + k);
  for (int id = 0; id < FE_EINSUM_LETTERS; id++) {
    if (count[id] != 1) continue;
    if (n == KILN_MAX_DIMS) return fail_at(c, NO_POS, "an implicit output of more than KILN_MAX_DIMS dims");
    p->out[n++] = (signed char)id;
  }
  p->nout = n;
  return true;
}

bool fe_einsum_parse(const char *equation, int nops, const int *ndim, fe_einsum *p, char *why, size_t why_len) {
  cursor c = {equation ? equation : "", 0, why, why_len};
  memset(p, 0, sizeof *p);
  if (!equation) return fail_at(&c, NO_POS, "the equation is NULL");
  if (nops < 1 || nops > FE_EINSUM_MAX_OPS)
    return fail_at(&c, NO_POS, "%d operands given; between 1 and %d are supported", nops, FE_EINSUM_MAX_OPS);
  term terms[FE_EINSUM_MAX_OPS];
  int nterms = 0, count[FE_EINSUM_LETTERS] = {0}, nell = 0, ell_dims[FE_EINSUM_MAX_OPS];
  for (;;) {
    if (nterms == nops) return fail_at(&c, (long)c.at, "more operands in the equation than the %d given", nops);
    if (!read_term(&c, &terms[nterms], false)) return false;
    if (!check_dims(&c, &terms[nterms], nterms, ndim[nterms], &ell_dims[nterms])) return false;
    if (ell_dims[nterms] > nell) nell = ell_dims[nterms];
    for (int j = 0; j < terms[nterms].n; j++)
      if (terms[nterms].ids[j] >= 0) count[terms[nterms].ids[j]]++;
    nterms++;
    if (c.eq[c.at] != ',') break;
    c.at++;
  }
  if (nterms != nops) return fail_at(&c, NO_POS, "%d operands in the equation but %d given", nterms, nops);
  p->nops = nops;
  for (int i = 0; i < nops; i++) place_operand(&terms[i], i, ndim[i], nell, p);
  if (!c.eq[c.at]) return implicit_output(&c, count, nell, p);
  c.at += 2;   /* "->" */
  term out;
  if (!read_term(&c, &out, true)) return false;
  if (c.eq[c.at]) return fail_at(&c, (long)c.at, "'%c' after the output", c.eq[c.at] == ',' ? ',' : '-');
  return place_output(&c, &out, count, nell, p);
}
