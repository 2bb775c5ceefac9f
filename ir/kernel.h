/* kernel.h: the kernel IR that both back ends consume. One kernel is a loop
 * nest over typed, hash-consed expressions with loads and stores on buffer
 * parameters. Its printed form is what KILN_DEBUG=3 shows and, with the
 * target, the kernel cache key.
 *
 * Values are arguments, not code: the value of a constant (kiln_full, the
 * scalar forms, clamp bounds, pad fills, arange/linspace starts and steps,
 * random seeds, offsets and bounds) is a KX_ARG, read at run time from
 * k->args, so kernels that differ only in values have one key and compile
 * once. The few values that change the code are literals (KX_CONST); which
 * ones is decided by one rule, pass_value_is_code (passes/values.c).
 *
 * ABI of a compiled CPU kernel: void fn(void *const *bufs, int64_t lo, int64_t hi)
 *   bufs[p] is parameter p's base pointer (storage dtype elements).
 *   The one KL_PARALLEL loop (if any, always outermost) runs lo..hi instead of
 *   0..extent so the runtime can split it across threads; without one the
 *   runtime calls fn(bufs, 0, 1) once.
 *
 * Kernel checks: a value a kernel cannot compute (an integer division by
 * zero, an index out of range) is never trapped on. A KS_CHECK statement
 * records the failure into the launch's status slot (the params entry
 * flagged status: KC_SLOT_WORDS i64 words {code, site, position, value},
 * zero before the launch; the first failure to claim word 0 by an atomic
 * compare-exchange wins, so threads and GPU blocks are safe) and the
 * kernel goes on with a harmless stand-in value. After the launch the
 * runtime turns a nonzero code into KILN_ERR_VALUE naming the op and the
 * file:line of the check's site (k->sites, which is not in the key).
 */
#ifndef KILN_KERNEL_H
#define KILN_KERNEL_H

#include "ir.h"

typedef enum {
  KX_CONST,   /* literal of `type`: .i for bool/int types, .f for float types */
  KX_VAR,     /* loop variable number .var (type i64) */
  KX_LOAD,    /* element a (i64 index) of parameter .buf, converted from the
                 parameter's storage dtype to `type` (f16/bf16 -> f32) */
  KX_OP,      /* elementwise graph op .op on a, b, c (operands of the op's
                 compute type; result `type`: bool for comparisons) */
  KX_CAST,    /* a converted to `type` (semantics of IR_CAST) */
  KX_IDIV,    /* a / b on i64, both >= 0 (index arithmetic) */
  KX_IMOD,    /* a % b on i64, both >= 0 (index arithmetic) */
  KX_PHILOX,  /* 32-bit word .i (0..3) of Philox4x32-10 with 64-bit key b and
                 64-bit counter a (both i64), zero-extended to i64 (ir/philox.h) */
  KX_ACC,     /* current value of accumulator number .var (of `type`); .i
                 is 0, or after the KS_CARRY number .i of that accumulator
                 (kx_acc_after): its value after that carry, a distinct
                 expression so hash-consing never takes one for the other;
                 a lane accumulator's lane a (i64), else a is NULL */
  KX_ARG,     /* launch argument .i as a value of `type`: k->args[.i] holds
                 its bits (bool and integers sign-extended to 64 bits, f32 its
                 IEEE bits in the low 32, f64 its 64); read through the one
                 params entry flagged args. The value is not in the key */
} kx_kind;

typedef struct kexpr kexpr;
struct kexpr {
  kx_kind kind;
  kiln_dtype type;      /* never F16/BF16 (they compute as F32), except the
                           type of a KX_CAST that rounds an F32 value to that
                           precision (an explicit cast to f16/bf16): such a
                           value is only stored or cast back to F32 */
  ir_op op;             /* KX_OP */
  int var;              /* KX_VAR */
  int buf;              /* KX_LOAD */
  int64_t i;            /* KX_CONST (int/bool), KX_PHILOX word, KX_ARG number */
  double f;             /* KX_CONST (float) */
  kexpr *a, *b, *c;
  int id;               /* dense number within the kernel, for printers and memo tables */
};

/* The window geometry of a KS_GEMM whose B is a convolution's window. */
enum { KW_TAPS, KW_KW, KW_OW, KW_SH, KW_SW, KW_DH, KW_DW, KW_PH, KW_PW, KW_UH, KW_UW, KW_IN_H, KW_IN_W, KW_SC,
       KW_SY, KW_SX, KW_N };

typedef enum { KS_LOOP, KS_STORE, KS_ACC, KS_UPDATE, KS_GEMM, KS_CHECK, KS_CARRY, KS_SORT, KS_ATTN } ks_kind;

/* A KS_GEMM's sizes and strides, in the order of its gemm.bound. */
enum { KG_ROWS, KG_COLS, KG_DEPTH, KG_A_SI, KG_A_SK, KG_B_SK, KG_B_SN, KG_NUM };

/* What a failed check means: X(code, message, name of the reported value
 * or NULL when the value says nothing). Codes start at 1 (0: no failure). */
#define KC_CODES(X) \
  X(KC_DIV_ZERO, "integer division by zero (ZeroDivisionError)", NULL) \
  X(KC_INDEX, "index out of range (IndexError)", "index")
typedef enum {
  KC_NONE,
#define KC_ENUM(c, msg, value) c,
  KC_CODES(KC_ENUM)
#undef KC_ENUM
  KC_NUM
} kc_code;
typedef struct {
  const char *message;
  const char *value;   /* the reported value's name in messages; NULL: not shown */
} kc_info;
extern const kc_info kc_infos[KC_NUM];

/* The words of a status slot. */
enum { KC_CODE, KC_SITE, KC_POS, KC_VALUE, KC_SLOT_WORDS };

/* Where a check came from, for the error message: the node's op (its
 * public name), where the user built it, its dtype and shape (the
 * position is a flat row-major index into that shape). */
typedef struct {
  const char *api;
  char file[96];
  int line;
  kiln_dtype dtype;
  int ndim;
  int64_t shape[KILN_MAX_DIMS];
} kc_site;
typedef enum { KL_SERIAL, KL_PARALLEL, KL_VECTOR } kl_kind;

typedef struct kstmt kstmt;
struct kstmt {
  ks_kind kind;
  kstmt *next;          /* next statement in the same block */
  /* KS_LOOP: for var in 0..extent { body }; in a shape-generic kernel the
   * loop runs to bound instead when it is not NULL (an i64 launch argument),
   * and extent is bound's value at this launch (for the runtime's split) */
  int var;
  int64_t extent;
  kexpr *bound;
  kl_kind loop;
  kstmt *body;
  /* KS_STORE: param buf [index] = value (converted to the storage dtype) */
  int buf;
  kexpr *index;
  kexpr *value;
  /* KS_ACC: accumulator acc of type `type` starts at value. It is read by
   *   KX_ACC and lives until the end of the block holding this statement.
   * KS_UPDATE: acc = op(acc, value) with op IR_ADD, IR_MUL, IR_MAXIMUM or
   *   IR_MINIMUM (a reduction: the back end may reassociate it to vectorize).
   *   With acc2 >= 0 it is an arg-reduction: op IR_GT (argmax) or IR_LT
   *   (argmin) says when value beats acc (a NaN value beats a non-NaN acc;
   *   ties keep the first); then acc = value and acc2 (i64) = index.
   * KS_CARRY: acc = value, a carried accumulator (a scan): value may read
   *   acc (KX_ACC, its value before this statement), the statements run in
   *   loop order and are never reassociated, and the reads after it in the
   *   same block (kx_acc_after) see the new value; var is the carry's
   *   number (1, 2, ... in the kernel), op the scan it computes (IR_CUMSUM,
   *   ...: for the kernel's name).
   * Lane accumulators (ks_lanes; CPU kernels only): a KS_ACC or KS_CARRY
   *   with index not NULL writes lane index (i64) of accumulator acc, a row
   *   of extent lanes (the KS_ACC's extent) that lives in the block of its
   *   first KS_ACC's enclosing loop; KX_ACC reads lane a. A scan along a dim
   *   that is not innermost carries one lane per position of the kept dims
   *   after it, so the loop over those is innermost and vectorizes. */
  int acc, acc2;
  ir_op op;
  kiln_dtype type;
  /* KS_GEMM: for i in 0..m, j in 0..n (loop vars var and gemm.var_j):
   *   acc = sum over k in 0..kdim of A[a_off + i*a_si + k*a_sk] *
   *         B[b_off + k*b_sk + j*b_sn]   (params a_buf, b_buf; type f32/f64)
   *   then body (the epilogue: stores reading KX_ACC acc, vars i and j).
   * a_off and b_off are i64 expressions of enclosing loop vars (batches).
   * With win (KW_N values, below) B is a convolution's window instead
   * (ops.def's UNFOLD, b_sk and b_sn unused): its element (k, j) is
   * B[b_off + c*sc + h*sy + w*sx] for the channel c = k / taps, tap (i, t)
   * of k % taps (kw wide) and output position (oh, ow) of j (ow_n wide),
   * where uh*h = oh*sh + i*dh - ph and uw*w = ow*sw + t*dw - pw with
   * 0 <= h < in_h, 0 <= w < in_w; 0 where there is no such (h, w).
   * In a shape-generic kernel bound[KG_*] are the i64 launch arguments
   * (kx_dim) holding m (extent), n, kdim and the four strides, NULL where
   * the value is a literal (ks_gemm_bind): one compiled GEMM serves every
   * shape of its structure. */
  struct {
    int var_j;
    int64_t n, kdim;
    int a_buf, b_buf;
    kexpr *a_off, *b_off;
    int64_t a_si, a_sk, b_sk, b_sn;
    const int64_t *win;
    kexpr *bound[KG_NUM];
  } gemm;
  /* KS_CHECK: if value (bool) is true, the launch fails with code (kc_code)
   * at site (k->sites), flat position index (i64) and check.what (i64). */
  struct {
    int code, site;
    kexpr *what;
  } check;
  /* KS_SORT: one line of n elements of param in, element j at in_off +
   * j*in_stride, ordered (ascending, or descending; nan the largest; ties
   * by position: stable); its first k go to param vals (the values, -1:
   * none) and param idx (their i64 positions, -1: none), element j at
   * out_off + j*out_stride. in_off and out_off are i64 expressions of the
   * enclosing loop vars. */
  struct {
    int in, vals, idx;
    kexpr *in_off, *out_off;
    int64_t n, k, in_stride, out_stride;
    bool descending;
  } sort;
  /* KS_ATTN: query rows row0 .. min(row0 + rows, l) of one (batch, head):
   *   out[r, c] = sum over j < s of softmax_j(q[r, :] . k[j, :] * scale +
   *   mask[r, j]) * v[j, c], c < ev, the dots over e elements; causal: only
   *   j <= r; a bool mask (param dtype bool) drops j where it is false; a
   *   row with no key left is nan. Param q's element (r, x) is at q_off +
   *   r*st[0] + x*st[1]; k's (j, x), v's (j, c), mask's (r, j) and out's
   *   (r, c) likewise with st[2..9]; mask -1: none. The offsets (of row 0)
   *   and row0 are i64 expressions of the enclosing loop vars. */
  struct {
    int q, k, v, mask, out;
    kexpr *q_off, *k_off, *v_off, *m_off, *o_off, *row0;
    int64_t rows, l, s, e, ev;
    int64_t st[10];
    double scale;
    bool causal;
  } attn;
};

typedef struct {
  kiln_dtype dtype;     /* storage dtype of the elements */
  bool output;          /* written by the kernel */
  bool args;            /* bound to the kernel's args: launch values, not identity */
  bool status;          /* the launch's status slot (KC_SLOT_WORDS i64, zeroed,
                           written by failing checks): neither input nor output */
  int64_t numel;        /* elements addressable through it (for bounds and GB/s) */
} kparam;

/* Where a launch argument's value came from, so a plan can take it from the
 * next graph of the same structure (runtime/exec.c): the graph node and
 * attribute (pass_arg_field, passes/pass.h) lowering read, converted to
 * type. node NULL: a size (kx_dim) or a literal of the kernel. */
typedef struct {
  const kiln_tensor *node;
  int field;
  kiln_dtype type;
} karg_src;

typedef struct { kexpr **slot; int cap, used; } kx_table;
typedef struct {
  char name[32];        /* "k_" + 16 hex digits of the hash */
  int nparams;
  kparam *params;       /* outputs first, then inputs; grows in k_param */
  int nargs;
  int64_t *args;        /* the bits of the KX_ARG values, by number: bound to
                           the params entry flagged args, so a kernel that
                           differs only in them is the same kernel (one compile) */
  karg_src *arg_src;    /* per argument: its source (k_arg_from), while the kernel lives */
  int nvars;
  int naccs;
  int ncarries;         /* KS_CARRY statements so far (each has its number in var) */
  int nexprs;
  kstmt *body;
  int64_t work;         /* elements the kernel produces (for KILN_DEBUG lines) */
  bool generic;         /* shape-generic: sizes, strides and offsets are launch
                           arguments (kx_dim), and the key leaves out every
                           value that comes from a shape */
  bool sizes_only;      /* generic, and its shape would change nothing but
                           constants (a CPU GEMM, whose driver takes every
                           size at run time): auto dynamic takes this
                           variant at the first shape too, and every size is
                           its own argument (no duck sizing), so a square
                           product is no other structure */
  struct kx_dims *dims; /* generic: the argument of each size value (kx_dim) */
  int nsites;
  kc_site *sites;       /* where each check's failure is reported from (not in the key) */
  ir_arena *arena;      /* owns every expr and stmt */
  kx_table cse;         /* hash-consing table */
  /* Out of memory (SQLite's mallocFailed): an allocation failed, the kernel
   * is incomplete and its builder drops it (k_free). From then on every
   * builder returns a stand-in, oom_expr (an i64 constant) or oom_stmt,
   * that callers may read, fill and link as usual, so building needs no
   * check per call; what walks the statements checks oom first (a linked
   * stand-in may close a cycle). k_param and k_arg_push return 0. */
  bool oom;
  kexpr oom_expr;
  kstmt oom_stmt;
} kernel;

/* NULL when out of memory. */
kernel *k_new(void);
void k_free(kernel *k);
int k_param(kernel *k, kiln_dtype dt, bool output, int64_t numel);
int k_var(kernel *k);
int k_acc(kernel *k);

/* Builders: hash-consed (equal expressions are one pointer) and folding
 * constant index arithmetic (x*1, x+0, c1*c2, ...). */
kexpr *kx_int(kernel *k, kiln_dtype t, int64_t v);
kexpr *kx_float(kernel *k, kiln_dtype t, double v);
kexpr *kx_var(kernel *k, int var);
kexpr *kx_load(kernel *k, int buf, kexpr *index, kiln_dtype t);
kexpr *kx_op(kernel *k, ir_op op, kiln_dtype t, kexpr *a, kexpr *b, kexpr *c);
kexpr *kx_cast(kernel *k, kexpr *a, kiln_dtype t);
kexpr *kx_idiv(kernel *k, kexpr *a, kexpr *b);
kexpr *kx_imod(kernel *k, kexpr *a, kexpr *b);
kexpr *kx_philox(kernel *k, kexpr *key, kexpr *counter, int word);
/* A new launch argument (KX_ARG): k_arg_push appends raw bits (creating
 * the args param on first use) and returns their number; kx_arg reads
 * argument number i as t; k_arg_int is both for a bool or integer v. */
int k_arg_push(kernel *k, int64_t bits);
kexpr *kx_arg(kernel *k, kiln_dtype t, int i);
kexpr *k_arg_int(kernel *k, kiln_dtype t, int64_t v);
/* The bits of v as an argument of type t: F32 rounds to float, its IEEE
 * bits in the low 32; F64 its 64. */
int64_t k_float_bits(kiln_dtype t, double v);
/* Records that argument i holds field of node, as type (karg_src). */
void k_arg_from(kernel *k, int i, const kiln_tensor *node, int field, kiln_dtype type);
/* The params entry bound to k->args, or -1 when the kernel has no arguments. */
int k_args_param(const kernel *k);
/* The params entry that is the status slot, or -1 for a kernel without checks. */
int k_status_param(const kernel *k);
/* A new check site (copied) for KS_CHECK; returns its number. */
int k_site(kernel *k, const kc_site *site);
/* A size, stride or offset (i64) v: a literal in a shape-specialised kernel,
 * and in a shape-generic one (k->generic) a launch argument, one per
 * distinct value (equal sizes share one, as torch.compile's duck sizing,
 * unless k->sizes_only), except 0 and 1, which stay literals (a size of 1
 * broadcasts, a stride of 1 is contiguous: both are structure). */
kexpr *kx_dim(kernel *k, int64_t v);
/* i64 index helpers: a + b, a * b */
kexpr *kx_iadd(kernel *k, kexpr *a, kexpr *b);
kexpr *kx_imul(kernel *k, kexpr *a, kexpr *b);

/* e with every subexpression x for which map(ctx, x) is not NULL replaced
 * by that, rebuilt through the hash-consing builders (so a renamed loop
 * variable gives the expression the other loop already has); out of memory
 * k->oom_expr. */
typedef kexpr *(*kx_map_fn)(void *ctx, kexpr *x);
kexpr *kx_rewrite(kernel *k, kexpr *e, kx_map_fn map, void *ctx);

/* A loop to extent; in a shape-generic kernel to kx_dim(extent). */
kstmt *ks_loop(kernel *k, int var, int64_t extent, kl_kind kind);
kstmt *ks_store(kernel *k, int buf, kexpr *index, kexpr *value);
kexpr *kx_acc(kernel *k, int acc, kiln_dtype t);
kstmt *ks_acc(kernel *k, int acc, kiln_dtype t, kexpr *init);
kstmt *ks_update(kernel *k, int acc, ir_op op, kexpr *value);
kstmt *ks_argupdate(kernel *k, int acc, int acc_index, ir_op better, kexpr *value, kexpr *index);
/* A KS_CARRY acc = value of accumulator acc (type t) for scan op, and the
 * read of acc after it (KX_ACC numbered by that carry). */
kstmt *ks_carry(kernel *k, int acc, ir_op scan, kiln_dtype t, kexpr *value);
kexpr *kx_acc_after(kernel *k, const kstmt *carry);
/* Makes KS_ACC or KS_CARRY s write lane `lane` of a lane accumulator of
 * `lanes` lanes, and the read of lane `lane` of accumulator acc. */
void ks_lanes(kstmt *s, int64_t lanes, kexpr *lane);
kexpr *kx_acc_lane(kernel *k, int acc, kiln_dtype t, kexpr *lane);
/* A KS_GEMM with loop vars i (returned in s->var) and j (s->gemm.var_j);
 * the caller fills the A/B fields and the epilogue body. */
kstmt *ks_gemm(kernel *k, int acc, kiln_dtype t, int64_t m, int64_t n, int64_t kdim);
/* The value of a KS_GEMM's size or stride `which` (KG_*) at this launch. */
int64_t ks_gemm_value(const kstmt *s, int which);
/* In a shape-generic kernel, makes s's sizes and strides launch arguments
 * (gemm.bound; call once its strides are filled). A GEMM whose B is a
 * window keeps its geometry, so its kernel must be specialised. */
void ks_gemm_bind(kernel *k, kstmt *s);
/* if (fail) record code at site, flat position pos, value what (i64; NULL:
 * 0); adds the status param on first use. */
kstmt *ks_check(kernel *k, kc_code code, int site, kexpr *fail, kexpr *pos, kexpr *what);

/* A KS_SORT; the caller fills the params and offsets. */
kstmt *ks_sort(kernel *k, int64_t n, int64_t keep, bool descending);

/* A KS_ATTN over blocks of `rows` query rows; the caller fills the rest. */
kstmt *ks_attn(kernel *k, int64_t rows);

/* The kernel's identity: a compact binary serialization of its normalized
 * IR (params, loops, every expression once in post-order by id) appended to
 * key; sets k->name (what it computes + the hash of it) and returns the
 * hash. Equal kernels give equal keys; no pointers are serialized, nor
 * argument values, nor (generic kernels) any size from a shape. Out of
 * memory key->failed is set, and 0 returned with the name unset. */
uint64_t k_key(kernel *k, ir_str *key);
/* The range the runtime splits across threads: the extent of the top-level
 * KL_PARALLEL loop (or a top-level KS_GEMM's rows), 0 when there is none;
 * *iter_cost = innermost iterations per step of it (loop extents multiplied
 * through the nest, reductions included), for sizing chunks. */
int64_t k_parallel(const kernel *k, int64_t *iter_cost);
/* The leading dimension with which BLAS (cuBLASLt) reads a column-major
 * rows x cols matrix whose element (x, y) is at x*unit + y*lead, or 0 when
 * it cannot read it in place (unit stride along the rows, lead at least the
 * row count; size-1 dims take any stride). The CUDA GEMM split and the
 * gemm_operands pass, which copies what it cannot read, share this rule. */
int64_t k_blas_ld(int64_t rows, int64_t cols, int64_t unit, int64_t lead);
/* Human-readable text of the kernel (KILN_DEBUG=3), named as k_key names it;
 * out of memory b->failed is set. */
void k_print(ir_str *b, kernel *k);

#endif
