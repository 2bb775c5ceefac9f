/* ir.h: what every internal layer shares: dtypes, the op table, small
 * utilities (arena, string builder) and the internal assert. */
#ifndef KILN_IR_H
#define KILN_IR_H

#include "kiln.h"
#include "ir/alloc.h"
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- internal bugs abort with kiln's own location (user errors never do) - */
#define IR_ASSERT(c) ((c) ? (void)0 : ir_die(__FILE__, __LINE__, #c))
_Noreturn void ir_die(const char *file, int line, const char *what);

/* ---- dtypes ------------------------------------------------------------- */
typedef enum { DK_BOOL, DK_INT, DK_FLOAT } ir_dkind;  /* promotion categories */
typedef struct {
  const char *name;     /* "float32" */
  const char *short_name; /* "f32" */
  size_t size;          /* bytes per element in storage */
  ir_dkind kind;
  bool is_signed;
} ir_dtype_info;
extern const ir_dtype_info ir_dtypes[KILN_NUM_DTYPES];
bool ir_dtype_valid(kiln_dtype d);
kiln_dtype ir_promote(kiln_dtype a, kiln_dtype b);  /* PyTorch's table */
/* f16 and bf16 are stored narrow and computed in f32. */
kiln_dtype ir_compute_dtype(kiln_dtype d);
bool ir_is_float(kiln_dtype d);
/* One stored element of dtype d at p (any alignment), widened: floats (f16
 * and bf16 exactly) as double, bool/integers as int64. */
double ir_load_f64(const void *p, kiln_dtype d);
int64_t ir_load_i64(const void *p, kiln_dtype d);

/* ---- the op table ------------------------------------------------------- */
enum { IR_SRC = 1, IR_MOVE = 2, IR_EW = 4, IR_COMM = 8, IR_NOBOOL = 16, IR_REDUCE = 32, IR_CONTRACT = 64,
       IR_XFER = 128, IR_COSTLY = 256, IR_NOFLOAT = 512, IR_SCAN = 1024,
       IR_SORTING = 2048, IR_ATTN = 4096 };
typedef enum { TR_ATTR, TR_SAME, TR_FLOAT, TR_BOOL, TR_WHERE } ir_typing;
typedef enum {
#define X(e, name, arity, flags, typing) IR_##e,
#include "ops.def"
#undef X
  IR_NUM_OPS
} ir_op;
typedef struct {
  const char *name;
  int arity;
  unsigned flags;
  ir_typing typing;
} ir_op_info;
extern const ir_op_info ir_ops[IR_NUM_OPS];
static inline bool ir_op_has(ir_op op, unsigned f) { return (ir_ops[op].flags & f) != 0; }
/* The ops that read or write through an index tensor (ops.def's indexing block). */
static inline bool ir_op_is_scatter(ir_op op) {
  return op == IR_SCATTER || op == IR_SCATTER_ADD || op == IR_SCATTER_MUL || op == IR_SCATTER_MAX || op == IR_SCATTER_MIN;
}
static inline bool ir_op_is_indexed(ir_op op) { return op == IR_GATHER || ir_op_is_scatter(op); }

/* ---- arena: IR built during one compile is freed whole afterwards ------- */
typedef struct ir_arena ir_arena;
ir_arena *ir_arena_new(void);                      /* NULL: out of memory */
void *ir_arena_alloc(ir_arena *a, size_t bytes);   /* zeroed, 16-byte aligned; NULL: out of memory */
void ir_arena_free(ir_arena *a);

/* ---- growable string ---------------------------------------------------- */
/* Out of memory, a string stops growing and says so in failed: whoever
 * reads the text checks it first (s may still be NULL). A failed string is
 * no key: the caches take their keys as ir_str and find and store nothing
 * for a failed one, and ir_str_cat passes the failure on. */
typedef struct { char *s; size_t len, cap; bool failed; } ir_str;
void ir_str_printf(ir_str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ir_str_vprintf(ir_str *b, const char *fmt, va_list ap);
void ir_str_append(ir_str *b, const void *p, size_t n);  /* raw bytes, kept NUL-terminated */
/* Appends src; a src that failed to grow fails b too, so a string built
 * from an incomplete one (a key from a prefix) is never taken as whole. */
void ir_str_cat(ir_str *b, const ir_str *src);
void ir_str_free(ir_str *b);
/* A new string (free() it) formatted as printf would; NULL out of memory. */
char *ir_strprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *ir_vstrprintf(const char *fmt, va_list ap);

/* "(2,3)", "(4,)", "()" */
void ir_str_shape(ir_str *b, int ndim, const int64_t *shape);
uint64_t ir_hash_bytes(const void *p, size_t n, uint64_t seed);

/* ---- a pointer -> int map (open addressing): walks keep nodes' scratch alone */
typedef struct {
  const void **keys;
  int *vals;
  size_t cap, n;
  bool borrowed;        /* keys/vals are the caller's (IR_PTRMAP_ON_STACK) until it grows */
} ir_ptrmap;
/* A map whose first 64 entries live in the caller's frame: hot walks of
 * small graphs allocate nothing. */
#define IR_PTRMAP_ON_STACK(m)                                      \
  const void *m##_keys[64] = {0};                                  \
  int m##_vals[64];                                                \
  ir_ptrmap m = {m##_keys, m##_vals, 64, 0, true}
bool ir_ptrmap_put(ir_ptrmap *m, const void *k, int v);   /* false: out of memory, m unchanged */
int ir_ptrmap_get(const ir_ptrmap *m, const void *k);   /* the value stored for k, or -1 */
void ir_ptrmap_free(ir_ptrmap *m);

/* ---- the thread's last user-facing error (kiln_last_error) -------------- */
void ir_error_set(const char *msg);
void ir_error_setf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *ir_error_get(void);

#endif
