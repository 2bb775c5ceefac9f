/** @file kiln.h
 * kiln.h: the one public header of kiln, a lazy graph compiler for tensor
 * expressions. Every op only builds a node of a DAG; kiln_realize (or any call
 * that reads data) checks, fuses, compiles and runs what is pending.
 *
 * @section conventions Conventions
 * - Every function that can fail is a macro that passes the caller's
 *   __FILE__/__LINE__ to a `*_at` function; call the `_at` form directly to
 *   report a location of your own (a wrapper library, say). The `f` and `l`
 *   parameters of every `_at` function are that location.
 * - Ops never return NULL. A bad op returns an error node; errors are sticky
 *   (an op on an error node returns an error node) and surface at realize as
 *   a kiln_status plus kiln_last_error().
 *
 * @section handles Handles
 * A kiln_tensor * is a reference-counted handle to a node of the graph.
 * Every function returning a new handle gives the caller one reference:
 * inside kiln_scope_begin / kiln_scope_end the innermost scope owns it and
 * releases it at its end (unless kiln_keep moves it out or kiln_retain
 * takes one of the caller's own); outside any scope the caller releases it
 * with kiln_release. Sources a node was built from stay alive as long as
 * the node does. A handle may be used from any thread (see Threads for
 * what may be done at the same time).
 *
 * @section errors Errors
 * A bad argument gives an error node (or, for functions returning a status,
 * the status) and a message naming the op, the operands' shapes and dtypes
 * and the caller's file:line, as `model.c:42: add: shapes (2,3) and (4,)
 * cannot broadcast`. kiln_status_of and kiln_realize return the status and
 * make the message kiln_last_error().
 *
 * @section lifetimes Lifetimes
 * - A handle is valid until its last reference is dropped (kiln_release, or
 *   the kiln_scope_end of the scope that holds it). Using it afterwards is a
 *   use after free; with KILN_CHECK_HANDLES=1 (the default in Debug builds)
 *   kiln keeps the last 4096 freed handles in quarantine and reports their use
 *   as an error ("exp: argument 1 is a handle that was already released",
 *   with your file:line) instead of crashing. Older ones are really freed.
 * - kiln_shutdown ends the scopes still open (releasing their handles) and
 *   frees the runtime: caches, the JIT, the thread pool. Release every other
 *   handle before it: one that outlives it keeps its memory until released,
 *   and computing with it restarts the runtime. kiln may be used again after
 *   kiln_shutdown; the state is created afresh on first use.
 *
 * @section threads Threads
 * - Any number of threads may build and realize independent graphs at the
 *   same time, and use tensors another thread realized as inputs (read
 *   them, build on them, pass them to kiln_fn_run). No lock is held for a
 *   whole realize: the plan and kernel caches, the JIT, the allocators and
 *   the disk cache each lock briefly. Compiling a new kernel is serialized
 *   (one compile at a time in the process) while realizes whose kernels are
 *   cached go on. The CPU thread pool runs one parallel kernel at a time; a
 *   kernel launched while it is busy runs on its caller's thread. On a GPU,
 *   realizes from several threads queue on the device's one stream.
 * - A pending (unrealized) tensor belongs to one thread at a time: two
 *   threads must not build on it, realize it or read it at once (realize
 *   rewrites the nodes it computes). kiln_data of a realized tensor that is
 *   not contiguous replaces its storage with a contiguous copy: call it
 *   before sharing the tensor, not while other threads use it.
 * - kiln_retain and kiln_release may be called on one handle from any
 *   threads (the counts are atomic). Scopes and kiln_last_error are per
 *   thread: a scope holds the handles its own thread made.
 * - Settings are process-wide, none is per thread: the KILN_* variables are
 *   read once, at first use; kiln_set_eager, kiln_set_dynamic,
 *   kiln_set_printoptions and kiln_manual_seed affect every thread and are
 *   safe to call at any time. Random ops draw from one generator in the
 *   order they are built, whichever thread builds them. kiln_stats counters
 *   are atomic and count every thread.
 * - A compiled function (kiln_fn_run) may be run from several threads at
 *   once with different buffers; it takes no global lock.
 * - kiln_shutdown must not run while another thread uses kiln.
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/** @name Version
 * The version of this header. CMakeLists.txt reads the three numbers (the
 * one place the version is set); kiln_version() gives the library's.
 * @{ */
/** Incompatible API changes (0: not frozen yet). */
#define KILN_VERSION_MAJOR 0
/** Additions. */
#define KILN_VERSION_MINOR 9
/** Fixes. */
#define KILN_VERSION_PATCH 0
#define KILN_STR_(x) #x        /**< an implementation detail of KILN_VERSION_STRING */
#define KILN_XSTR_(x) KILN_STR_(x)   /**< an implementation detail of KILN_VERSION_STRING */
/** "MAJOR.MINOR.PATCH" of this header. */
#define KILN_VERSION_STRING \
  KILN_XSTR_(KILN_VERSION_MAJOR) "." KILN_XSTR_(KILN_VERSION_MINOR) "." KILN_XSTR_(KILN_VERSION_PATCH)
/** @} */

/** Starts every function declaration below. kiln is compiled with
 * -fvisibility=hidden, so a function declared without it is missing from
 * libkiln.so (the test_exports ctest names it): a new public function needs
 * KILN_API too. */
#if defined(__GNUC__) || defined(__clang__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** A handle to a tensor: a node of the lazy graph (see @ref handles). */
typedef struct kiln_tensor kiln_tensor;

/** Element types, PyTorch's (kiln_dtype_name gives "float32", ...). */
typedef enum {
  KILN_BOOL, KILN_U8, KILN_I8, KILN_I16, KILN_I32, KILN_I64,
  KILN_F16, KILN_BF16, KILN_F32, KILN_F64,
  KILN_NUM_DTYPES     /**< the number of dtypes, not a dtype */
} kiln_dtype;

/** The kinds of device a tensor can live on. */
typedef enum { KILN_CPU, KILN_CUDA } kiln_device_type;
/** A device: the host (index 0) or a CUDA device by its driver index. */
typedef struct {
  kiln_device_type type;  /**< CPU or CUDA */
  int index;              /**< 0 for the CPU; the CUDA device number */
} kiln_device;

/** What a call that can fail returns; kiln_last_error() says more. */
typedef enum {
  KILN_OK = 0,        /**< success */
  KILN_ERR_ARG,       /**< NULL handle, bad dtype, bad size, bad dim */
  KILN_ERR_SHAPE,     /**< shapes that cannot broadcast, overflowing sizes */
  KILN_ERR_DTYPE,     /**< an op that does not accept the operands' dtypes */
  KILN_ERR_DEVICE,    /**< operands on different devices, CUDA not available */
  KILN_ERR_MEMORY,    /**< allocation failed */
  KILN_ERR_COMPILE,   /**< the JIT or NVRTC failed (an internal error) */
  KILN_ERR_IO,        /**< a file that cannot be read or written, or is not a valid .npy or safetensors file */
  KILN_ERR_VALUE,     /**< a kernel met a value it cannot compute: an integer division by zero */
  KILN_NUM_STATUS     /**< the number of statuses, not a status */
} kiln_status;

/** @name Shapes and dim lists
 * Shapes and dim lists in C: KILN_SHAPE(2, 3) expands to the two arguments
 * `2, (const int64_t[]){2, 3}` (a count and a compound-literal array).
 * @{ */
/** The number of its arguments (an implementation detail of KILN_SHAPE). */
#define KILN_NARGS_(...) ((int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
/** `ndim, shape` arguments from a list of sizes: KILN_SHAPE(2, 3). */
#define KILN_SHAPE(...) KILN_NARGS_(__VA_ARGS__), ((const int64_t[]){__VA_ARGS__})
/** `ndims, dims` arguments from a list of dims: KILN_DIMS(0, -1). */
#define KILN_DIMS(...) KILN_SHAPE(__VA_ARGS__)
/** The most dims a tensor can have. */
#define KILN_MAX_DIMS 8
/** @} */

/* ---- runtime, devices, modes --------------------------------------------- */
/** @return the library's version, its KILN_VERSION_STRING ("0.9.0"): it
 * differs from this header's when a program runs against another build. */
KILN_API const char *kiln_version(void);
/** @return the host device, {KILN_CPU, 0}. */
KILN_API kiln_device kiln_cpu_device(void);
/** @return cuda:0 when it can be used, else the CPU. */
KILN_API kiln_device kiln_default_device(void);   /* cuda:0 when available, else cpu */
/** @return 1 when cuda:0 can run kiln's kernels (a driver, a device, kiln built with the toolkit), else 0. */
KILN_API int kiln_cuda_is_available(void);
/** @return the number of CUDA devices kiln can use, 0 without a driver. */
KILN_API int kiln_cuda_device_count(void);
/** Why cuda:0 cannot be used ("libcuda.so.1 not found (no NVIDIA driver)").
 * @return the reason, "" when it can be used; kiln's thread-local string,
 * valid until the thread's next call. */
KILN_API const char *kiln_cuda_unavailable_reason(void);
/** Eager mode: every op runs as its own kernel when built (the baseline for
 * fused-vs-eager comparisons); also set by KILN_EAGER=1.
 * @param on nonzero for eager, 0 for lazy (the default) */
KILN_API void kiln_set_eager(int on);             /* also KILN_EAGER=1 */
/** @return 1 in eager mode, else 0. */
KILN_API int kiln_get_eager(void);
/** The modes of kiln_set_dynamic. */
enum {
  KILN_DYNAMIC_OFF,     /**< every shape compiles a kernel for its exact shape */
  KILN_DYNAMIC_ON,      /**< always the shape-generic variant */
  KILN_DYNAMIC_AUTO     /**< the default: exact the first time, generic from a structure's second shape */
};
/** Shape-generic kernels (also KILN_DYNAMIC=0|1|auto): AUTO (the default)
 * compiles a kernel for its exact shape the first time, and one variant
 * with sizes and strides as launch arguments when the same structure comes
 * back with another shape; OFF compiles every shape exactly; ON always the
 * generic variant. A CPU matmul's kernel is generic from its first shape
 * (its GEMM driver takes every size at run time) unless OFF; groups
 * holding a column reduction, a sort or a convolution window are always
 * compiled for their shape.
 * @param mode KILN_DYNAMIC_OFF, KILN_DYNAMIC_ON or KILN_DYNAMIC_AUTO */
KILN_API void kiln_set_dynamic(int mode);
/** Frees all runtime state (JIT, kernel caches, thread pool, devices, open
 * scopes' handles) so leak checkers see a clean exit; kiln starts afresh
 * on its next use. Handles still held afterwards stay valid to release. */
KILN_API void kiln_shutdown(void);                /* frees all runtime state */
/** @param d a dtype
 * @return its PyTorch name ("float32", "int64", ...), "invalid" for a value that is none. */
KILN_API const char *kiln_dtype_name(kiln_dtype d);  /* "float32", "int64", ... */
/** @param d a dtype
 * @return bytes per element, 0 for a value that is no dtype. */
KILN_API size_t kiln_dtype_size(kiln_dtype d);

/** Counters since the start or the last kiln_reset_stats. */
typedef struct {
  uint64_t kernels_launched; /**< kernels run, on any device */
  uint64_t compiles;         /**< kernels compiled (not found in memory or on disk) */
  uint64_t cache_hits;       /**< launches whose code was already in memory */
  uint64_t bytes_moved;      /**< bytes read + written by launched kernels */
  uint64_t auto_realizes;    /**< pending graphs realized for growing too big */
  uint64_t disk_hits;        /**< kernels whose code came from the disk cache (not compiled) */
  uint64_t evictions;        /**< compiled CPU kernels dropped from memory for KILN_KERNEL_CACHE_MB */
  uint64_t code_bytes;       /**< bytes of compiled CPU code held now (object file sizes); not reset */
  uint64_t plans;            /**< realize plans made (passes and lowering ran); a graph of a structure
                                  seen before runs its plan, new constant values bound as arguments */
} kiln_stats_t;
/** @return the counters (a copy). */
KILN_API kiln_stats_t kiln_stats(void);
/** Sets every counter of kiln_stats to zero. */
KILN_API void kiln_reset_stats(void);

/** Memory kiln holds on a device. */
typedef struct {
  uint64_t allocated_bytes;  /**< bytes in live tensors */
  uint64_t reserved_bytes;   /**< allocated plus freed blocks kept for reuse */
  uint64_t peak_bytes;       /**< the highest allocated figure since kiln_reset_peak_memory */
} kiln_memory_stats_t;
/** Memory kiln holds on the CPU or a CUDA device (zeros before its first use).
 * @param dev the device
 * @param out where the figures go
 * @return KILN_OK; KILN_ERR_ARG for a NULL out; KILN_ERR_DEVICE (with a
 * message) for a CUDA device that cannot be used. */
KILN_API kiln_status kiln_memory_stats(kiln_device dev, kiln_memory_stats_t *out);
/** Starts every device's peak_bytes afresh from what is allocated now. */
KILN_API void kiln_reset_peak_memory(void);       /* on every device */
/** Gives the freed blocks every allocator keeps for reuse back to the system
 * (after a GPU's queued work is done). Memory of live tensors stays. */
KILN_API void kiln_empty_cache(void);

/* ---- lifetimes ----------------------------------------------------------- */
/** Opens a scope: handles made on this thread until the matching
 * kiln_scope_end belong to it (see @ref handles). Scopes nest. */
KILN_API void kiln_scope_begin(void);
/** Closes the innermost scope, releasing every handle it owns, newest
 * first. Without an open scope it does nothing. */
KILN_API void kiln_scope_end(void);
/** Moves t out of the innermost scope into the enclosing one (or, at the
 * outermost, to the caller), like returning a value from a function.
 * @param t a handle (NULL is returned as is)
 * @return t */
KILN_API kiln_tensor *kiln_keep(kiln_tensor *t);  /* survives the current scope */
/** Drops one reference: one kiln_retain took, else the one a scope holds
 * (which then no longer releases it). A handle already released is
 * reported (with f:l) under KILN_CHECK_HANDLES=1 (see @ref lifetimes).
 * @at
 * @param t a handle; NULL is fine */
KILN_API void kiln_release_at(const char *f, int l, kiln_tensor *t);
/** Adds a reference of the caller's own, which no scope releases.
 * @at
 * @param t a handle; NULL gives NULL
 * @return t, to be released with kiln_release */
KILN_API kiln_tensor *kiln_retain_at(const char *f, int l, kiln_tensor *t);
/** @macros */
#define kiln_release(...) kiln_release_at(__FILE__, __LINE__, __VA_ARGS__)
/** @macros */
#define kiln_retain(...) kiln_retain_at(__FILE__, __LINE__, __VA_ARGS__)

/* ---- errors -------------------------------------------------------------- */
/** @return the message of this thread's last failure, "" if none; valid
 * until the thread's next failing call. */
KILN_API const char *kiln_last_error(void);       /* message of the last failure, "" if none */
/** The status of a handle without realizing it; an error's message becomes
 * kiln_last_error().
 * @param t a handle
 * @return KILN_OK, the error node's status, or KILN_ERR_ARG for NULL */
KILN_API kiln_status kiln_status_of(kiln_tensor *t);

/* ---- creation ------------------------------------------------------------ */
/** A CPU tensor holding a copy of data.
 * @at
 * @param data numel elements of dt, contiguous row-major (may be NULL when empty)
 * @param dt the dtype
 * @param ndim,shape the shape (KILN_SHAPE(2, 3)); sizes >= 0, ndim <= KILN_MAX_DIMS
 * @handle KILN_ERR_ARG for a bad dtype, shape or NULL data; KILN_ERR_SHAPE
 * when the size overflows; KILN_ERR_MEMORY. */
KILN_API kiln_tensor *kiln_from_data_at(const char *f, int l, const void *data, kiln_dtype dt, int ndim, const int64_t *shape);
/** A CPU tensor over the caller's memory, zero-copy: kiln reads data in
 * place and never frees it, so it must outlive every tensor reading it and
 * later writes show.
 * @at
 * @param data numel elements of dt, contiguous row-major
 * @param dt,ndim,shape as for kiln_from_data_at
 * @handle errors as for kiln_from_data_at. */
KILN_API kiln_tensor *kiln_from_buffer_at(const char *f, int l, void *data, kiln_dtype dt, int ndim, const int64_t *shape);
/** A 0-dim tensor of value v.
 * @at
 * @param v the value, converted as torch.full converts it (integers truncate, bool is v != 0)
 * @param dt the dtype
 * @handle KILN_ERR_ARG for a bad dtype. Costs nothing until read. */
KILN_API kiln_tensor *kiln_scalar_at(const char *f, int l, double v, kiln_dtype dt);
/** A tensor of one value (a constant: costs nothing until read).
 * @at
 * @param ndim,shape the shape
 * @param v the value, converted as for kiln_scalar_at
 * @param dt the dtype
 * @handle KILN_ERR_ARG / KILN_ERR_SHAPE for a bad dtype or shape. */
KILN_API kiln_tensor *kiln_full_at(const char *f, int l, int ndim, const int64_t *shape, double v, kiln_dtype dt);
/** kiln_full_at with 0.
 * @at
 * @param ndim,shape the shape
 * @param dt the dtype
 * @handle as kiln_full_at. */
KILN_API kiln_tensor *kiln_zeros_at(const char *f, int l, int ndim, const int64_t *shape, kiln_dtype dt);
/** kiln_full_at with 1.
 * @at
 * @param ndim,shape the shape
 * @param dt the dtype
 * @handle as kiln_full_at. */
KILN_API kiln_tensor *kiln_ones_at(const char *f, int l, int ndim, const int64_t *shape, kiln_dtype dt);
/** torch.arange: start, start + step, ... below end (above it for a
 * negative step), ceil((end - start) / step) elements; int64 when all three
 * are integral, else float32.
 * @at
 * @param start,end,step the range; step nonzero
 * @handle KILN_ERR_ARG for a zero or NaN step, non-finite bounds or a step
 * of the wrong sign; KILN_ERR_SHAPE for too many elements. */
KILN_API kiln_tensor *kiln_arange_at(const char *f, int l, double start, double end, double step);
/** torch.linspace: steps float32 values evenly from start to end inclusive.
 * @at
 * @param start,end the first and last value
 * @param steps the number of elements, >= 0
 * @handle KILN_ERR_ARG for negative steps. */
KILN_API kiln_tensor *kiln_linspace_at(const char *f, int l, double start, double end, int64_t steps);
/** An n x m identity matrix.
 * @at
 * @param n rows, >= 0
 * @param m columns; negative means n (square)
 * @param dt the dtype
 * @handle KILN_ERR_ARG for a negative n or a bad dtype. */
KILN_API kiln_tensor *kiln_eye_at(const char *f, int l, int64_t n, int64_t m, kiln_dtype dt);
/** Uniform random values in [0, 1) from kiln's Philox stream (see kiln_manual_seed).
 * @at
 * @param ndim,shape the shape
 * @param dt a floating dtype
 * @handle KILN_ERR_DTYPE for a non-floating dtype; shape errors as kiln_full_at. */
KILN_API kiln_tensor *kiln_rand_at(const char *f, int l, int ndim, const int64_t *shape, kiln_dtype dt);
/** Standard normal random values (mean 0, variance 1), as kiln_rand_at.
 * @at
 * @param ndim,shape the shape
 * @param dt a floating dtype
 * @handle errors as kiln_rand_at. */
KILN_API kiln_tensor *kiln_randn_at(const char *f, int l, int ndim, const int64_t *shape, kiln_dtype dt);
/** Uniform random integers in [low, high).
 * @at
 * @param low,high the range, low < high
 * @param ndim,shape the shape
 * @param dt any dtype but bool
 * @handle KILN_ERR_ARG when low >= high; KILN_ERR_DTYPE for bool. */
KILN_API kiln_tensor *kiln_randint_at(const char *f, int l, int64_t low, int64_t high, int ndim, const int64_t *shape, kiln_dtype dt);
/** Zeros of t's shape, dtype and device.
 * @at
 * @param t the model
 * @handle t's error when t is an error node, KILN_ERR_ARG for NULL. */
KILN_API kiln_tensor *kiln_zeros_like_at(const char *f, int l, kiln_tensor *t);
/** Ones of t's shape, dtype and device.
 * @at
 * @param t the model
 * @handle errors as kiln_zeros_like_at. */
KILN_API kiln_tensor *kiln_ones_like_at(const char *f, int l, kiln_tensor *t);
/** kiln_rand_at of t's shape, dtype and device.
 * @at
 * @param t the model, of a floating dtype
 * @handle errors as kiln_zeros_like_at and kiln_rand_at. */
KILN_API kiln_tensor *kiln_rand_like_at(const char *f, int l, kiln_tensor *t);
/** Restarts the random stream every random op draws from.
 * @param seed the seed; the same seed gives the same values on every device */
KILN_API void kiln_manual_seed(uint64_t seed);

/** @name Creation macros
 * @{ */
/** @macros */
#define kiln_from_data(...) kiln_from_data_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_from_buffer(...) kiln_from_buffer_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_scalar(...) kiln_scalar_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_full(...) kiln_full_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_zeros(...) kiln_zeros_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_ones(...) kiln_ones_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_arange(...) kiln_arange_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_linspace(...) kiln_linspace_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_eye(...) kiln_eye_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_rand(...) kiln_rand_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_randn(...) kiln_randn_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_randint(...) kiln_randint_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_zeros_like(...) kiln_zeros_like_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_ones_like(...) kiln_ones_like_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_rand_like(...) kiln_rand_like_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- elementwise ops (NumPy broadcasting, PyTorch type promotion) -------- */
/** Declares the `_at` function of a unary op (undefined after use). */
#define KILN_UNARY_(name) \
  KILN_API kiln_tensor *kiln_##name##_at(const char *f, int l, kiln_tensor *a);
/** Declares the `_at` functions of a binary op and its scalar form (undefined after use). */
#define KILN_BINARY_(name) \
  KILN_API kiln_tensor *kiln_##name##_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b); \
  KILN_API kiln_tensor *kiln_##name##s_at(const char *f, int l, kiln_tensor *a, double b);
/** @name Unary ops
 * PyTorch's torch.neg, abs, exp, log, sqrt, rsqrt, sin, cos, tanh, sigmoid,
 * relu, gelu (the exact erf form), gelu_tanh (approximate='tanh'), silu,
 * floor, ceil, round (half to even), sign, reciprocal and logical_not, one
 * element at a time; the fuser merges chains of them into one kernel.
 * @{ */
/** An elementwise op of a. The result dtype is PyTorch's: ops of floats on
 * an integer or bool tensor give float32, logical_not gives bool.
 * @at
 * @param a the operand
 * @handle a's error for an error node, KILN_ERR_ARG for NULL, KILN_ERR_DTYPE
 * for a dtype PyTorch refuses for the op. */
KILN_UNARY_(neg) KILN_UNARY_(abs) KILN_UNARY_(exp) KILN_UNARY_(log)
KILN_UNARY_(sqrt) KILN_UNARY_(rsqrt) KILN_UNARY_(sin) KILN_UNARY_(cos)
KILN_UNARY_(tanh) KILN_UNARY_(sigmoid) KILN_UNARY_(relu) KILN_UNARY_(gelu) KILN_UNARY_(gelu_tanh)
KILN_UNARY_(silu) KILN_UNARY_(floor) KILN_UNARY_(ceil) KILN_UNARY_(round)
KILN_UNARY_(sign) KILN_UNARY_(reciprocal) KILN_UNARY_(logical_not)
/** @} */
/** @name Binary ops
 * PyTorch's add, sub, mul, div (true division), pow, maximum, minimum, the
 * comparisons eq, ne, lt, le, gt, ge (bool results) and logical_and,
 * logical_or; each also in a scalar form kiln_adds_at(..., a, 2.0). An
 * integer tensor to a negative integral number (kiln_pows) is refused as in
 * PyTorch, KILN_ERR_VALUE "Integers to negative integer powers are not
 * allowed"; negative values of an exponent tensor give PyTorch's 0 (1 or -1
 * for a base of 1 or -1).
 * @{ */
/** An elementwise op of a and b with NumPy broadcasting and PyTorch's type
 * promotion; in the scalar forms (name ending in s) b acts as a Python
 * number: it never widens a tensor of its own kind.
 * @at
 * @param a the first operand
 * @param b the second operand: a tensor, or a double in the scalar forms
 * @handle an operand's error for an error node, KILN_ERR_ARG for NULL,
 * KILN_ERR_SHAPE for shapes that cannot broadcast, KILN_ERR_DEVICE for
 * operands on different devices, KILN_ERR_DTYPE for dtypes the op refuses. */
KILN_BINARY_(add) KILN_BINARY_(sub) KILN_BINARY_(mul) KILN_BINARY_(div)
KILN_BINARY_(pow) KILN_BINARY_(maximum) KILN_BINARY_(minimum)
KILN_BINARY_(eq) KILN_BINARY_(ne) KILN_BINARY_(lt) KILN_BINARY_(le)
KILN_BINARY_(gt) KILN_BINARY_(ge) KILN_BINARY_(logical_and) KILN_BINARY_(logical_or)
/** @} */
/** @name Elementwise math
 * PyTorch's torch.erf, erfc, expm1, log1p, log2, log10, exp2, tan, asin,
 * acos, atan, sinh, cosh, asinh, acosh and atanh. erfc,
 * expm1 and log1p keep their relative accuracy where 1 - erf(x), e^x - 1 and
 * log(1 + x) lose it; outside a function's domain (acosh(x < 1), asin(2),
 * log1p(-2)) the result is nan, at a pole (atanh(1)) an infinity.
 * @{ */
/** An elementwise math function of a; integer and bool tensors give float32.
 * @at
 * @param a the operand
 * @handle a's error for an error node, KILN_ERR_ARG for NULL. */
KILN_UNARY_(erf) KILN_UNARY_(erfc) KILN_UNARY_(expm1) KILN_UNARY_(log1p) KILN_UNARY_(log2)
KILN_UNARY_(log10) KILN_UNARY_(exp2) KILN_UNARY_(tan) KILN_UNARY_(asin) KILN_UNARY_(acos)
KILN_UNARY_(atan) KILN_UNARY_(sinh) KILN_UNARY_(cosh) KILN_UNARY_(asinh) KILN_UNARY_(acosh)
KILN_UNARY_(atanh)
/** @} */
/** @name Elementwise math of two operands
 * PyTorch's torch.atan2 and logaddexp, each also in a scalar form.
 * @{ */
/** atan2(a, b): the angle of the point (b, a) in [-pi, pi]; logaddexp(a, b):
 * log(e^a + e^b) without overflow. Broadcasting and promotion as the binary
 * ops; integer and bool operands give float32.
 * @at
 * @param a the first operand (y of atan2)
 * @param b the second operand (x of atan2): a tensor, or a double in the scalar forms
 * @handle as the binary ops. */
KILN_BINARY_(atan2) KILN_BINARY_(logaddexp)
/** @} */
/** @name Smooth activations
 * torch.nn.functional's elu, celu, softplus, selu, mish and logsigmoid,
 * built from the math functions above so that they fuse with their
 * neighbours. Integer and bool tensors give float32.
 * @{ */
/** elu: x for x > 0, else alpha (e^x - 1); PyTorch's default alpha is 1.
 * @at
 * @param t the operand
 * @param alpha the scale of the negative part
 * @handle t's error for an error node, KILN_ERR_ARG for NULL. */
KILN_API kiln_tensor *kiln_elu_at(const char *f, int l, kiln_tensor *t, double alpha);
/** celu: max(0, x) + min(0, alpha (e^(x/alpha) - 1)); PyTorch's default alpha is 1.
 * @at
 * @param t the operand
 * @param alpha the scale, not 0
 * @handle as kiln_elu_at; KILN_ERR_ARG for alpha 0. */
KILN_API kiln_tensor *kiln_celu_at(const char *f, int l, kiln_tensor *t, double alpha);
/** softplus: log(1 + e^(beta x)) / beta, and x itself where beta x > threshold
 * (PyTorch's defaults: beta 1, threshold 20).
 * @at
 * @param t the operand
 * @param beta the sharpness, not 0
 * @param threshold above which beta x counts as linear
 * @handle as kiln_elu_at; KILN_ERR_ARG for beta 0. */
KILN_API kiln_tensor *kiln_softplus_at(const char *f, int l, kiln_tensor *t, double beta, double threshold);
/** selu: scale elu(x, alpha) with PyTorch's constants (alpha 1.6732632423543772,
 * scale 1.0507009873554805); mish: x tanh(softplus(x)); logsigmoid: log(1 /
 * (1 + e^-x)), computed as min(x, 0) - log1p(e^-|x|) so neither tail overflows.
 * @at
 * @param t the operand
 * @handle as kiln_elu_at. */
KILN_API kiln_tensor *kiln_selu_at(const char *f, int l, kiln_tensor *t);
/** @copydoc kiln_selu_at */
KILN_API kiln_tensor *kiln_mish_at(const char *f, int l, kiln_tensor *t);
/** @copydoc kiln_selu_at */
KILN_API kiln_tensor *kiln_logsigmoid_at(const char *f, int l, kiln_tensor *t);
/** @} */
#undef KILN_UNARY_
#undef KILN_BINARY_
/** torch.where: a where cond is true, else b, all three broadcast together.
 * @at
 * @param cond a bool tensor
 * @param a,b the values, promoted together
 * @handle errors as the binary ops; KILN_ERR_DTYPE when cond is not bool. */
KILN_API kiln_tensor *kiln_where_at(const char *f, int l, kiln_tensor *cond, kiln_tensor *a, kiln_tensor *b);
/** torch.clamp: min(max(a, lo), hi).
 * @at
 * @param a the operand
 * @param lo,hi the bounds (as Python numbers: they keep an integer tensor integer when integral)
 * @handle errors as the unary ops. */
KILN_API kiln_tensor *kiln_clamp_at(const char *f, int l, kiln_tensor *a, double lo, double hi);
/** a converted to dt as PyTorch's Tensor.to(dtype) converts.
 * @at
 * @param a the operand
 * @param dt the new dtype (a itself, as a new handle, when it is a's)
 * @handle KILN_ERR_ARG for a bad dtype, a's error for an error node. */
KILN_API kiln_tensor *kiln_cast_at(const char *f, int l, kiln_tensor *a, kiln_dtype dt);

/** @name Elementwise macros
 * @{ */
/** @macros */
#define kiln_neg(...) kiln_neg_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_abs(...) kiln_abs_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_exp(...) kiln_exp_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_log(...) kiln_log_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_sqrt(...) kiln_sqrt_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_rsqrt(...) kiln_rsqrt_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_sin(...) kiln_sin_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_cos(...) kiln_cos_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_tanh(...) kiln_tanh_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_sigmoid(...) kiln_sigmoid_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_relu(...) kiln_relu_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_gelu(...) kiln_gelu_at(__FILE__, __LINE__, __VA_ARGS__)
/* PyTorch's gelu(x, approximate='tanh'): x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
 * kiln_gelu is the exact erf form; this one is what cuBLASLt's GELU epilogue
 * computes, so on a GPU it fuses into the matrix product. */
#define kiln_gelu_tanh(...) kiln_gelu_tanh_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_silu(...) kiln_silu_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_floor(...) kiln_floor_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_ceil(...) kiln_ceil_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_round(...) kiln_round_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_sign(...) kiln_sign_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_reciprocal(...) kiln_reciprocal_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_logical_not(...) kiln_logical_not_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_add(...) kiln_add_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_sub(...) kiln_sub_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_mul(...) kiln_mul_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_div(...) kiln_div_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_pow(...) kiln_pow_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_maximum(...) kiln_maximum_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_minimum(...) kiln_minimum_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_eq(...) kiln_eq_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_ne(...) kiln_ne_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_lt(...) kiln_lt_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_le(...) kiln_le_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_gt(...) kiln_gt_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_ge(...) kiln_ge_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_logical_and(...) kiln_logical_and_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_logical_or(...) kiln_logical_or_at(__FILE__, __LINE__, __VA_ARGS__)
/* Scalar forms: kiln_adds(t, 10.0) is t + 10. The scalar acts like a Python
 * number in PyTorch: it never widens a tensor of its own kind; an integral
 * value keeps an integer tensor integer, a fractional one makes it float32. */
#define kiln_adds(...) kiln_adds_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_subs(...) kiln_subs_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_muls(...) kiln_muls_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_divs(...) kiln_divs_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_pows(...) kiln_pows_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_maximums(...) kiln_maximums_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_minimums(...) kiln_minimums_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_eqs(...) kiln_eqs_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_nes(...) kiln_nes_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_lts(...) kiln_lts_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_les(...) kiln_les_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_gts(...) kiln_gts_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_ges(...) kiln_ges_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_logical_ands(...) kiln_logical_ands_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_logical_ors(...) kiln_logical_ors_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_where(...) kiln_where_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_clamp(...) kiln_clamp_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_cast(...) kiln_cast_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_erf(...) kiln_erf_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_erfc(...) kiln_erfc_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_expm1(...) kiln_expm1_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_log1p(...) kiln_log1p_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_log2(...) kiln_log2_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_log10(...) kiln_log10_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_exp2(...) kiln_exp2_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_tan(...) kiln_tan_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_asin(...) kiln_asin_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_acos(...) kiln_acos_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_atan(...) kiln_atan_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_sinh(...) kiln_sinh_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_cosh(...) kiln_cosh_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_asinh(...) kiln_asinh_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_acosh(...) kiln_acosh_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_atanh(...) kiln_atanh_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_atan2(...) kiln_atan2_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_atan2s(...) kiln_atan2s_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_logaddexp(...) kiln_logaddexp_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_logaddexps(...) kiln_logaddexps_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_elu(...) kiln_elu_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_celu(...) kiln_celu_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_softplus(...) kiln_softplus_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_selu(...) kiln_selu_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_mish(...) kiln_mish_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_logsigmoid(...) kiln_logsigmoid_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- elementwise: integer-aware division, bitwise ops, trunc ------------- */
/** Declares the `_at` functions of a binary op and its scalar form (undefined after use). */
#define KILN_BINARY_(name) \
  KILN_API kiln_tensor *kiln_##name##_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b); \
  KILN_API kiln_tensor *kiln_##name##s_at(const char *f, int l, kiln_tensor *a, double b);
/** @name Division and bitwise ops
 * PyTorch's floor_divide (a // b), trunc_divide (div with rounding_mode
 * 'trunc'), remainder (a % b: the sign of b), fmod (the sign of a),
 * copysign, bitwise_and, bitwise_or, bitwise_xor (&, |, ^: integer and bool
 * tensors), bitwise_left_shift and bitwise_right_shift (<<, >>: integer
 * tensors; a shift by a negative amount or by the width or more gives 0, or
 * the sign for >> of a signed type, as PyTorch); each also in a scalar form.
 * An integer division by zero is PyTorch's ZeroDivisionError: the scalar
 * forms fail at once, and a divisor tensor holding 0 makes the realize fail
 * with KILN_ERR_VALUE, naming the op, the element and the caller's line;
 * INT_MIN // -1 wraps. A Python number on the left (7 // x) is the tensor
 * form with kiln_scalar.
 * @{ */
/** An elementwise op of a and b with NumPy broadcasting and PyTorch's type
 * promotion (copysign gives a float; the others keep the promoted dtype).
 * @at
 * @param a the first operand
 * @param b the second operand: a tensor, or a double in the scalar forms
 * @handle errors as the binary ops; KILN_ERR_DTYPE for bool operands of the
 * divisions and shifts and float operands of the bitwise ops; KILN_ERR_VALUE
 * for an integer division by the number 0. */
KILN_BINARY_(floor_divide) KILN_BINARY_(trunc_divide) KILN_BINARY_(remainder) KILN_BINARY_(fmod)
KILN_BINARY_(copysign) KILN_BINARY_(bitwise_and) KILN_BINARY_(bitwise_or) KILN_BINARY_(bitwise_xor)
KILN_BINARY_(bitwise_left_shift) KILN_BINARY_(bitwise_right_shift)
/** @} */
#undef KILN_BINARY_
/** torch.trunc: rounds toward zero (integers unchanged).
 * @at
 * @param a the operand (not bool)
 * @handle errors as the unary ops. */
KILN_API kiln_tensor *kiln_trunc_at(const char *f, int l, kiln_tensor *a);
/** torch.bitwise_not (~a): integer tensors bit by bit, bool tensors logically.
 * @at
 * @param a an integer or bool tensor
 * @handle errors as the unary ops; KILN_ERR_DTYPE for a float tensor. */
KILN_API kiln_tensor *kiln_bitwise_not_at(const char *f, int l, kiln_tensor *a);

/** @name Division and bitwise macros
 * @{ */
/** @macros */
#define kiln_floor_divide(...) kiln_floor_divide_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_floor_divides(...) kiln_floor_divides_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_trunc_divide(...) kiln_trunc_divide_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_trunc_divides(...) kiln_trunc_divides_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_remainder(...) kiln_remainder_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_remainders(...) kiln_remainders_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_fmod(...) kiln_fmod_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_fmods(...) kiln_fmods_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_copysign(...) kiln_copysign_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_copysigns(...) kiln_copysigns_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_bitwise_and(...) kiln_bitwise_and_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_bitwise_ands(...) kiln_bitwise_ands_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_bitwise_or(...) kiln_bitwise_or_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_bitwise_ors(...) kiln_bitwise_ors_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_bitwise_xor(...) kiln_bitwise_xor_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_bitwise_xors(...) kiln_bitwise_xors_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_bitwise_left_shift(...) kiln_bitwise_left_shift_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_bitwise_left_shifts(...) kiln_bitwise_left_shifts_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_bitwise_right_shift(...) kiln_bitwise_right_shift_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_bitwise_right_shifts(...) kiln_bitwise_right_shifts_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_trunc(...) kiln_trunc_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_bitwise_not(...) kiln_bitwise_not_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- elementwise compositions: tests, parameters, simple activations ----- */
/** @name Elementwise tests, parameterised ops and simple activations
 * Made of the ops above, so they fuse with their neighbours; an error
 * inside one names it. Semantics, defaults and dtypes are PyTorch's.
 * @{ */
/** torch.frac: a - trunc(a).
 * @at
 * @param a a floating-point tensor
 * @handle KILN_ERR_DTYPE for an integer or bool tensor. */
KILN_API kiln_tensor *kiln_frac_at(const char *f, int l, kiln_tensor *a);
/** torch.isnan: a bool tensor, true where a is nan (never for integers).
 * @at
 * @param a the tensor
 * @handle */
KILN_API kiln_tensor *kiln_isnan_at(const char *f, int l, kiln_tensor *a);
/** torch.isinf: a bool tensor, true where a is +-inf.
 * @at
 * @param a the tensor
 * @handle */
KILN_API kiln_tensor *kiln_isinf_at(const char *f, int l, kiln_tensor *a);
/** torch.isfinite: a bool tensor, true where a is neither nan nor +-inf.
 * @at
 * @param a the tensor
 * @handle */
KILN_API kiln_tensor *kiln_isfinite_at(const char *f, int l, kiln_tensor *a);
/** torch.nan_to_num: nan, +inf and -inf replaced (an integer or bool tensor
 * is returned unchanged). PyTorch's posinf/neginf=None is the dtype's
 * largest/lowest finite value, which the caller passes.
 * @at
 * @param t the tensor
 * @param nan,posinf,neginf the replacements (converted to t's dtype)
 * @handle */
KILN_API kiln_tensor *kiln_nan_to_num_at(const char *f, int l, kiln_tensor *t, double nan, double posinf, double neginf);
/** torch.clamp with tensor bounds: maximum(a, min) then minimum(.., max),
 * all three broadcast and promoted together; where min > max the result is
 * max; a nan in any of them gives nan.
 * @at
 * @param a the tensor
 * @param min,max the bounds; NULL for no bound (not both)
 * @handle errors as the binary ops; KILN_ERR_ARG when both bounds are NULL. */
KILN_API kiln_tensor *kiln_clamp_tensor_at(const char *f, int l, kiln_tensor *a, kiln_tensor *min, kiln_tensor *max);
/** Tensor.masked_fill: value where mask is true, t elsewhere, in t's dtype
 * and shape.
 * @at
 * @param t the tensor
 * @param mask a bool tensor that broadcasts to t's shape
 * @param value acts like a Python number converted to t's dtype
 * @handle KILN_ERR_DTYPE for a mask that is not bool; KILN_ERR_SHAPE when it
 * cannot broadcast to t; KILN_ERR_ARG for a value out of an integer dtype's range. */
KILN_API kiln_tensor *kiln_masked_fill_at(const char *f, int l, kiln_tensor *t, kiln_tensor *mask, double value);
/** torch.lerp: a + weight (b - a), computed as PyTorch does (from b's end
 * when |weight| >= 0.5, so weight 1 gives b exactly).
 * @at
 * @param a the start (floating point)
 * @param b the end
 * @param weight the weights (tensor form) or one weight (kiln_lerps_at)
 * @handle errors as the binary ops; KILN_ERR_DTYPE for an integer start. */
KILN_API kiln_tensor *kiln_lerp_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b, kiln_tensor *weight);
/** torch.lerp with a number weight (see kiln_lerp_at).
 * @at
 * @param a the start (floating point)
 * @param b the end
 * @param weight the weight
 * @handle as kiln_lerp_at. */
KILN_API kiln_tensor *kiln_lerps_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b, double weight);
/** torch.isclose: a == b, or |a - b| <= atol + |rtol * b| (finite), or,
 * with equal_nan, both nan.
 * @at
 * @param a,b tensors of one dtype
 * @param rtol,atol tolerances >= 0 (PyTorch's defaults are 1e-5, 1e-8)
 * @param equal_nan nonzero: nan is close to nan
 * @handle KILN_ERR_DTYPE for dtypes that differ; KILN_ERR_ARG for a negative tolerance. */
KILN_API kiln_tensor *kiln_isclose_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b, double rtol, double atol,
                                      int equal_nan);
/** F.hardtanh: t clamped to [min_val, max_val] (PyTorch's defaults: -1, 1).
 * @at
 * @param t the tensor (not bool)
 * @param min_val,max_val the bounds, min_val <= max_val
 * @handle KILN_ERR_ARG for min_val > max_val; errors as kiln_clamp_at. */
KILN_API kiln_tensor *kiln_hardtanh_at(const char *f, int l, kiln_tensor *t, double min_val, double max_val);
/** F.relu6: hardtanh(t, 0, 6).
 * @at
 * @param t the tensor (not bool)
 * @handle errors as kiln_clamp_at. */
KILN_API kiln_tensor *kiln_relu6_at(const char *f, int l, kiln_tensor *t);
/** F.leaky_relu: t where t > 0, else t * negative_slope (PyTorch's default 0.01).
 * @at
 * @param t a floating-point tensor
 * @param negative_slope the slope below 0
 * @handle KILN_ERR_DTYPE for an integer or bool tensor. */
KILN_API kiln_tensor *kiln_leaky_relu_at(const char *f, int l, kiln_tensor *t, double negative_slope);
/** F.hardswish: t * relu6(t + 3) / 6.
 * @at
 * @param t a floating-point tensor
 * @handle KILN_ERR_DTYPE for an integer or bool tensor. */
KILN_API kiln_tensor *kiln_hardswish_at(const char *f, int l, kiln_tensor *t);
/** F.hardsigmoid: relu6(t + 3) / 6.
 * @at
 * @param t a floating-point tensor
 * @handle KILN_ERR_DTYPE for an integer or bool tensor. */
KILN_API kiln_tensor *kiln_hardsigmoid_at(const char *f, int l, kiln_tensor *t);
/** F.softsign: t / (1 + |t|) (a float result for integers).
 * @at
 * @param t the tensor (not bool)
 * @handle errors as kiln_abs_at. */
KILN_API kiln_tensor *kiln_softsign_at(const char *f, int l, kiln_tensor *t);
/** @} */

/** @name Elementwise composition macros
 * @{ */
/** @macros */
#define kiln_frac(...) kiln_frac_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_isnan(...) kiln_isnan_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_isinf(...) kiln_isinf_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_isfinite(...) kiln_isfinite_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_nan_to_num(...) kiln_nan_to_num_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_clamp_tensor(...) kiln_clamp_tensor_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_masked_fill(...) kiln_masked_fill_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_lerp(...) kiln_lerp_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_lerps(...) kiln_lerps_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_isclose(...) kiln_isclose_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_hardtanh(...) kiln_hardtanh_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_relu6(...) kiln_relu6_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_leaky_relu(...) kiln_leaky_relu_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_hardswish(...) kiln_hardswish_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_hardsigmoid(...) kiln_hardsigmoid_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_softsign(...) kiln_softsign_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- movement: views, never copies until realize (PyTorch semantics) ----- */
/** @name Movement ops
 * Dims may be negative (counting from the end). reshape allows one -1 (the
 * size that keeps numel); view is reshape that fails, as PyTorch's view does,
 * when the input's strides cannot express the new shape (after a transpose,
 * say): reshape copies then, view never does. expand's -1 keeps a size.
 * slice follows Python: start/stop clamp into range, negative ones count from
 * the end, KILN_END as stop means "to the end", step must be > 0. select
 * removes the dim. pad takes npads amounts in PyTorch F.pad's order, so
 * kiln_pad(t, KILN_SHAPE(1, 2), 0.0) pads the last dim: (left, right) pairs,
 * last dim first; negative amounts crop. cat concatenates along an existing
 * dim (promoting dtypes), stack along a new one. kiln_index is NumPy basic
 * indexing from a string: "0, :, 1:3, ::2, -1, None, ...".
 * Every one takes t's error for an error node and gives KILN_ERR_ARG for a
 * NULL t, a dim out of range or an argument the op cannot take, with the
 * shapes in the message.
 * @{ */
/** The stop of kiln_slice_at meaning "to the end". */
#define KILN_END INT64_MAX
/** t with a new shape of the same numel, a view when t's strides allow, else a copy.
 * @at
 * @param t the tensor
 * @param ndim,shape the new shape; one size may be -1
 * @handle KILN_ERR_SHAPE when numel differs. */
KILN_API kiln_tensor *kiln_reshape_at(const char *f, int l, kiln_tensor *t, int ndim, const int64_t *shape);
/** kiln_reshape_at that never copies.
 * @at
 * @param t the tensor
 * @param ndim,shape the new shape; one size may be -1
 * @handle KILN_ERR_SHAPE also when t's strides cannot express the shape (use kiln_reshape_at). */
KILN_API kiln_tensor *kiln_view_at(const char *f, int l, kiln_tensor *t, int ndim, const int64_t *shape);
/** t's dims reordered: output dim d is t's dim dims[d].
 * @at
 * @param t the tensor
 * @param ndim,dims a permutation of t's dims
 * @handle KILN_ERR_ARG for a list that is not a permutation. */
KILN_API kiln_tensor *kiln_permute_at(const char *f, int l, kiln_tensor *t, int ndim, const int64_t *dims);
/** t with dims d0 and d1 swapped.
 * @at
 * @param t the tensor
 * @param d0,d1 the dims
 * @handle */
KILN_API kiln_tensor *kiln_transpose_at(const char *f, int l, kiln_tensor *t, int d0, int d1);
/** The transpose of a matrix.
 * @at
 * @param t a 2-D tensor
 * @handle KILN_ERR_ARG for a tensor that is not 2-D. */
KILN_API kiln_tensor *kiln_T_at(const char *f, int l, kiln_tensor *t);   /* 2-D only */
/** t broadcast to shape without copying (size-1 dims repeat, new dims lead).
 * @at
 * @param t the tensor
 * @param ndim,shape the target; -1 keeps a size
 * @handle KILN_ERR_SHAPE when t cannot broadcast to it. */
KILN_API kiln_tensor *kiln_expand_at(const char *f, int l, kiln_tensor *t, int ndim, const int64_t *shape);
/** t without its size-1 dims.
 * @at
 * @param t the tensor
 * @handle */
KILN_API kiln_tensor *kiln_squeeze_at(const char *f, int l, kiln_tensor *t);   /* every size-1 dim */
/** t without dim, when its size is 1 (else t).
 * @at
 * @param t the tensor
 * @param dim the dim
 * @handle */
KILN_API kiln_tensor *kiln_squeeze_dim_at(const char *f, int l, kiln_tensor *t, int dim);  /* no-op unless size 1 */
/** t with a size-1 dim inserted at dim.
 * @at
 * @param t the tensor
 * @param dim where, in -(ndim + 1) .. ndim
 * @handle */
KILN_API kiln_tensor *kiln_unsqueeze_at(const char *f, int l, kiln_tensor *t, int dim);
/** t as 1-D.
 * @at
 * @param t the tensor
 * @handle */
KILN_API kiln_tensor *kiln_flatten_at(const char *f, int l, kiln_tensor *t);   /* to 1-D */
/** t with dims start..end (inclusive) merged into one.
 * @at
 * @param t the tensor
 * @param start,end the first and last dim merged
 * @handle */
KILN_API kiln_tensor *kiln_flatten_dims_at(const char *f, int l, kiln_tensor *t, int start, int end);
/** Python's t[start:stop:step] along dim.
 * @at
 * @param t the tensor
 * @param dim the dim
 * @param start,stop Python bounds (clamped; negative counts from the end; KILN_END)
 * @param step > 0
 * @handle KILN_ERR_ARG for a step <= 0. */
KILN_API kiln_tensor *kiln_slice_at(const char *f, int l, kiln_tensor *t, int dim, int64_t start, int64_t stop, int64_t step);
/** t[..., index, ...] along dim, which is removed.
 * @at
 * @param t the tensor
 * @param dim the dim
 * @param index in -size .. size - 1
 * @handle KILN_ERR_ARG for an index out of range. */
KILN_API kiln_tensor *kiln_select_at(const char *f, int l, kiln_tensor *t, int dim, int64_t index);
/** t reversed along the listed dims.
 * @at
 * @param t the tensor
 * @param ndims,dims the dims (KILN_DIMS(0, -1))
 * @handle */
KILN_API kiln_tensor *kiln_flip_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims);
/** PyTorch's F.pad with a constant.
 * @at
 * @param t the tensor
 * @param npads,pads (before, after) pairs, last dim first; negative amounts crop
 * @param value the fill
 * @handle KILN_ERR_ARG for an odd count or more pairs than dims. */
KILN_API kiln_tensor *kiln_pad_at(const char *f, int l, kiln_tensor *t, int npads, const int64_t *pads, double value);
/** torch.cat: the tensors joined along an existing dim, dtypes promoted.
 * @at
 * @param n,ts the tensors (n >= 1), equal in every other dim
 * @param dim the dim
 * @handle KILN_ERR_SHAPE for sizes that differ elsewhere. */
KILN_API kiln_tensor *kiln_cat_at(const char *f, int l, int n, kiln_tensor *const *ts, int dim);
/** torch.stack: the tensors joined along a new dim.
 * @at
 * @param n,ts the tensors (n >= 1), all of one shape
 * @param dim where the new dim goes
 * @handle KILN_ERR_SHAPE for shapes that differ. */
KILN_API kiln_tensor *kiln_stack_at(const char *f, int l, int n, kiln_tensor *const *ts, int dim);
/** NumPy basic indexing from a string: "0, :, 1:3, ::2, -1, None, ...".
 * @at
 * @param t the tensor
 * @param index the index expression
 * @handle KILN_ERR_ARG for a malformed index (the message points into it). */
KILN_API kiln_tensor *kiln_index_at(const char *f, int l, kiln_tensor *t, const char *index);
/** @} */

/** @name Movement macros
 * @{ */
/** @macros */
#define kiln_reshape(...) kiln_reshape_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_view(...) kiln_view_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_permute(...) kiln_permute_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_transpose(...) kiln_transpose_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_T(...) kiln_T_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_expand(...) kiln_expand_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_squeeze(...) kiln_squeeze_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_squeeze_dim(...) kiln_squeeze_dim_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_unsqueeze(...) kiln_unsqueeze_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_flatten(...) kiln_flatten_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_flatten_dims(...) kiln_flatten_dims_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_slice(...) kiln_slice_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_select(...) kiln_select_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_flip(...) kiln_flip_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_pad(...) kiln_pad_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_cat(...) kiln_cat_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_stack(...) kiln_stack_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_index(...) kiln_index_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- indexing with index tensors (PyTorch semantics) -------------------- */
/** @name Indexing with index tensors
 * torch.gather, take_along_dim, index_select, take, x[i0, i1, ...] with
 * index tensors, F.embedding, the scatters, masked_select and nonzero.
 * Index tensors are int64 or int32; a negative index counts from the end of
 * its dim. The loads (gather ... embedding) are computed inside the kernel
 * that reads their result: an embedding feeding an add is one kernel.
 * Each scatter is a kernel of its own: a copy of t, then the values applied
 * in increasing position of the index, so duplicate indices give the same
 * result on every run and thread count (for scatter, the last value wins).
 * An index out of range (PyTorch's IndexError) is found by the kernel:
 * realize fails with KILN_ERR_VALUE and "file:line: op: index out of range
 * (IndexError) at element <position> of <the index tensor's dtype and
 * shape>, index <value>", the first bad index the kernel met. The kernel
 * never reads or writes outside a buffer meanwhile.
 * masked_select and nonzero have a shape that depends on values: like
 * PyTorch, which synchronizes with the device for them, they realize their
 * input (the mask) when they are called, then return an ordinary tensor.
 * @{ */
/** torch.gather: out[i][j][k] = t[index[i][j][k]][j][k] for dim 0 (and so on).
 * @at
 * @param t the input
 * @param dim the indexed dim; negative counts from the end
 * @param index of t's number of dims, no larger than t along every other dim
 * @handle KILN_ERR_DTYPE for an index that is not int64 or int32,
 * KILN_ERR_SHAPE for shapes that do not fit, KILN_ERR_ARG for a dim out of range. */
KILN_API kiln_tensor *kiln_gather_at(const char *f, int l, kiln_tensor *t, int dim, kiln_tensor *index);
/** torch.scatter: a copy of t with out[index[i][j]][j] = src[i][j] (dim 0).
 * @at
 * @param t the input
 * @param dim the indexed dim
 * @param index of t's number of dims, no larger than src, nor than t but along dim
 * @param src the values, of t's dtype (only its first index.shape elements are used)
 * @handle errors as kiln_gather_at; KILN_ERR_DTYPE when src's dtype is not t's. */
KILN_API kiln_tensor *kiln_scatter_at(const char *f, int l, kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src);
/** torch.scatter with value=: every indexed element becomes value.
 * @at
 * @param t the input
 * @param dim the indexed dim
 * @param index as kiln_scatter_at
 * @param value converted to t's dtype
 * @handle errors as kiln_gather_at. */
KILN_API kiln_tensor *kiln_scatters_at(const char *f, int l, kiln_tensor *t, int dim, kiln_tensor *index, double value);
/** torch.scatter_add: a copy of t with src's values added at their indices.
 * @at
 * @param t the input
 * @param dim the indexed dim
 * @param index as kiln_scatter_at
 * @param src the values, of t's dtype
 * @handle errors as kiln_scatter_at. */
KILN_API kiln_tensor *kiln_scatter_add_at(const char *f, int l, kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src);
/** torch.scatter_reduce: src's values reduced into a copy of t at their indices.
 * "mean" of integers divides with floor (in float64), as torch does.
 * @at
 * @param t the input
 * @param dim the indexed dim
 * @param index as kiln_scatter_at
 * @param src the values, of t's dtype
 * @param reduce "sum", "prod", "mean", "amax" or "amin"
 * @param include_self nonzero: t's element takes part; zero: an element that
 * some value reaches is the reduction of those values alone
 * @handle errors as kiln_scatter_at; KILN_ERR_ARG for another reduce. */
KILN_API kiln_tensor *kiln_scatter_reduce_at(const char *f, int l, kiln_tensor *t, int dim, kiln_tensor *index,
                                             kiln_tensor *src, const char *reduce, int include_self);
/** torch.index_select: t's slices along dim at the positions in index.
 * @at
 * @param t the input
 * @param dim the indexed dim
 * @param index 1-D (or 0-dim)
 * @handle errors as kiln_gather_at. */
KILN_API kiln_tensor *kiln_index_select_at(const char *f, int l, kiln_tensor *t, int dim, kiln_tensor *index);
/** torch.take_along_dim: t and indices broadcast against each other along
 * every dim but dim, then gathered (torch's dim=None is kiln_take_at).
 * @at
 * @param t the input
 * @param indices of t's number of dims
 * @param dim the indexed dim
 * @handle errors as kiln_gather_at. */
KILN_API kiln_tensor *kiln_take_along_dim_at(const char *f, int l, kiln_tensor *t, kiln_tensor *indices, int dim);
/** torch.take: the elements of flattened t at index, in index's shape.
 * @at
 * @param t the input
 * @param index positions into t's elements in row-major order
 * @handle errors as kiln_gather_at. */
KILN_API kiln_tensor *kiln_take_at(const char *f, int l, kiln_tensor *t, kiln_tensor *index);
/** x[i0, i1, ...] with index tensors (PyTorch's advanced indexing): the
 * index tensors broadcast together to B; when the indexed dims are adjacent
 * B replaces them in place, otherwise B's dims come first. One kernel
 * computes it together with its consumer.
 * @at
 * @param t the input
 * @param n,indices one entry per leading dim of t (n <= its number of dims);
 * a NULL entry is a full ":"; a bool entry is a mask over as many dims as
 * it has, its true positions indexing them (it is realized now, as in
 * kiln_masked_select)
 * @handle errors as kiln_gather_at; KILN_ERR_SHAPE for index tensors that do
 * not broadcast or a mask of other sizes than its dims, KILN_ERR_ARG for more
 * indices than dims. */
KILN_API kiln_tensor *kiln_index_tensors_at(const char *f, int l, kiln_tensor *t, int n, kiln_tensor *const *indices);
/** torch.masked_select: the 1-D tensor of t's elements where mask (broadcast
 * with t) is true. Realizes the mask now (the result's length depends on it).
 * @at
 * @param t the input
 * @param mask a bool tensor
 * @handle KILN_ERR_DTYPE for a mask that is not bool, KILN_ERR_SHAPE for
 * shapes that do not broadcast; the mask's error when it cannot be computed. */
KILN_API kiln_tensor *kiln_masked_select_at(const char *f, int l, kiln_tensor *t, kiln_tensor *mask);
/** torch.nonzero: the int64 (count, ndim) positions of t's nonzero elements
 * (NaN counts), in row-major order. Realizes t now.
 * @at
 * @param t the input
 * @handle t's error when it cannot be computed. */
KILN_API kiln_tensor *kiln_nonzero_at(const char *f, int l, kiln_tensor *t);
/** F.embedding: weight's rows at indices, of shape indices.shape + (dim,).
 * @at
 * @param indices an int64 or int32 tensor of any shape
 * @param weight a 2-D (num_embeddings, dim) table
 * @handle errors as kiln_gather_at; KILN_ERR_SHAPE when weight is not 2-D. */
KILN_API kiln_tensor *kiln_embedding_at(const char *f, int l, kiln_tensor *indices, kiln_tensor *weight);
/** @} */
/** @name Indexing macros
 * @{ */
/** @macros */
#define kiln_gather(...) kiln_gather_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_scatter(...) kiln_scatter_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_scatters(...) kiln_scatters_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_scatter_add(...) kiln_scatter_add_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_scatter_reduce(...) kiln_scatter_reduce_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_index_select(...) kiln_index_select_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_take_along_dim(...) kiln_take_along_dim_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_take(...) kiln_take_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_index_tensors(...) kiln_index_tensors_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_masked_select(...) kiln_masked_select_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_nonzero(...) kiln_nonzero_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_embedding(...) kiln_embedding_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- reductions (PyTorch semantics) ------------------------------------- */
/** @name Reductions
 * kiln_sum(t) reduces every element to a 0-dim tensor; kiln_sum_dims(t,
 * KILN_DIMS(0, -1), keepdim) reduces the listed dims. bool and integer sums
 * and products are int64; mean/var/std of an integer tensor is an error (as
 * in PyTorch). argmax/argmin give int64 indices of the first extreme (NaN
 * counts as the extreme); over all elements the index is into the flattened
 * tensor. var/std: unbiased (0 or 1) divides by n - 1.
 * @{ */
/** Declares the `_at` function of a reduction over every element (undefined after use). */
#define KILN_REDUCE_(name) \
  KILN_API kiln_tensor *kiln_##name##_at(const char *f, int l, kiln_tensor *t);
/** Declares the `_at` function of a reduction over listed dims (undefined after use). */
#define KILN_REDUCE_DIMS_(name) \
  KILN_API kiln_tensor *kiln_##name##_dims_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, int keepdim);
/** @name Reductions over every element
 * @{ */
/** sum, mean, prod, max, min, any (bool), all (bool) of every element: a 0-dim result.
 * @at
 * @param t the tensor
 * @handle t's error, KILN_ERR_ARG for NULL, KILN_ERR_DTYPE for mean of an
 * integer tensor, KILN_ERR_SHAPE for max or min of an empty tensor. */
KILN_REDUCE_(sum) KILN_REDUCE_(mean) KILN_REDUCE_(prod) KILN_REDUCE_(max) KILN_REDUCE_(min)
KILN_REDUCE_(any) KILN_REDUCE_(all)
/** @} */
/** @name Reductions over dims
 * @{ */
/** sum, mean, prod, max, min, any (bool), all (bool) over the listed dims.
 * @at
 * @param t the tensor
 * @param ndims,dims the dims reduced, negative ones counting from the end (KILN_DIMS(0, -1))
 * @param keepdim nonzero keeps each reduced dim with size 1
 * @handle errors as over every element; KILN_ERR_ARG for a dim out of range
 * or listed twice. */
KILN_REDUCE_DIMS_(sum) KILN_REDUCE_DIMS_(mean) KILN_REDUCE_DIMS_(prod) KILN_REDUCE_DIMS_(max)
KILN_REDUCE_DIMS_(min) KILN_REDUCE_DIMS_(any) KILN_REDUCE_DIMS_(all)
/** @} */
#undef KILN_REDUCE_
#undef KILN_REDUCE_DIMS_
/** int64 index (into the flattened tensor) of the first largest element.
 * @at
 * @param t the tensor
 * @handle t's error, KILN_ERR_ARG for NULL, KILN_ERR_SHAPE when empty. */
KILN_API kiln_tensor *kiln_argmax_at(const char *f, int l, kiln_tensor *t);
/** int64 index (into the flattened tensor) of the first smallest element.
 * @at
 * @param t the tensor
 * @handle errors as kiln_argmax_at. */
KILN_API kiln_tensor *kiln_argmin_at(const char *f, int l, kiln_tensor *t);
/** int64 indices of the first largest element along dim.
 * @at
 * @param t the tensor
 * @param dim the dim
 * @param keepdim nonzero keeps dim with size 1
 * @handle errors as kiln_argmax_at; KILN_ERR_ARG for a dim out of range. */
KILN_API kiln_tensor *kiln_argmax_dim_at(const char *f, int l, kiln_tensor *t, int64_t dim, int keepdim);
/** int64 indices of the first smallest element along dim.
 * @at
 * @param t the tensor
 * @param dim the dim
 * @param keepdim nonzero keeps dim with size 1
 * @handle errors as kiln_argmax_dim_at. */
KILN_API kiln_tensor *kiln_argmin_dim_at(const char *f, int l, kiln_tensor *t, int64_t dim, int keepdim);
/** The variance of every element.
 * @at
 * @param t a floating tensor
 * @param unbiased 1 divides by n - 1, 0 by n (other corrections: kiln_var_correction_at)
 * @handle KILN_ERR_DTYPE for an integer tensor; KILN_ERR_ARG for unbiased other than 0 or 1. */
KILN_API kiln_tensor *kiln_var_at(const char *f, int l, kiln_tensor *t, int unbiased);
/** The standard deviation of every element.
 * @at
 * @param t a floating tensor
 * @param unbiased 1 divides by n - 1, 0 by n (other corrections: kiln_std_correction_at)
 * @handle KILN_ERR_DTYPE for an integer tensor; KILN_ERR_ARG for unbiased other than 0 or 1. */
KILN_API kiln_tensor *kiln_std_at(const char *f, int l, kiln_tensor *t, int unbiased);
/** The variance over the listed dims.
 * @at
 * @param t a floating tensor
 * @param ndims,dims the dims reduced
 * @param unbiased 1 divides by n - 1, 0 by n
 * @param keepdim nonzero keeps the reduced dims with size 1
 * @handle errors as kiln_var_at and the reductions. */
KILN_API kiln_tensor *kiln_var_dims_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, int unbiased, int keepdim);
/** The standard deviation over the listed dims.
 * @at
 * @param t a floating tensor
 * @param ndims,dims the dims reduced
 * @param unbiased 1 divides by n - 1, 0 by n
 * @param keepdim nonzero keeps the reduced dims with size 1
 * @handle errors as kiln_var_at and the reductions. */
KILN_API kiln_tensor *kiln_std_dims_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, int unbiased, int keepdim);
/* Compositions the fuser turns into row-wise kernels. weight and bias of
 * layer_norm may be NULL; it normalizes the last nlast dims. */
/** torch.softmax along dim (a composition the fuser makes one row-wise kernel).
 * @at
 * @param t a floating tensor
 * @param dim the dim
 * @handle KILN_ERR_DTYPE for an integer tensor, KILN_ERR_ARG for a bad dim. */
KILN_API kiln_tensor *kiln_softmax_at(const char *f, int l, kiln_tensor *t, int64_t dim);
/** torch.log_softmax along dim.
 * @at
 * @param t a floating tensor
 * @param dim the dim
 * @handle errors as kiln_softmax_at. */
KILN_API kiln_tensor *kiln_log_softmax_at(const char *f, int l, kiln_tensor *t, int64_t dim);
/** F.layer_norm over the last nlast dims, then * weight + bias.
 * @at
 * @param x a floating tensor
 * @param nlast how many trailing dims are normalized together
 * @param weight,bias of those dims' shape, or NULL
 * @param eps added to the variance
 * @handle KILN_ERR_ARG when x has fewer than nlast dims, KILN_ERR_SHAPE for a
 * weight or bias that does not broadcast; errors as kiln_softmax_at. */
KILN_API kiln_tensor *kiln_layer_norm_at(const char *f, int l, kiln_tensor *x, int nlast, kiln_tensor *weight,
                                kiln_tensor *bias, double eps);
/** @} */

/** @name Reduction macros
 * @{ */
/** @macros */

#define kiln_sum(...) kiln_sum_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_mean(...) kiln_mean_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_prod(...) kiln_prod_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_max(...) kiln_max_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_min(...) kiln_min_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_any(...) kiln_any_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_all(...) kiln_all_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_sum_dims(...) kiln_sum_dims_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_mean_dims(...) kiln_mean_dims_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_prod_dims(...) kiln_prod_dims_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_max_dims(...) kiln_max_dims_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_min_dims(...) kiln_min_dims_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_any_dims(...) kiln_any_dims_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_all_dims(...) kiln_all_dims_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_argmax(...) kiln_argmax_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_argmin(...) kiln_argmin_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_argmax_dim(...) kiln_argmax_dim_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_argmin_dim(...) kiln_argmin_dim_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_var(...) kiln_var_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_std(...) kiln_std_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_var_dims(...) kiln_var_dims_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_std_dims(...) kiln_std_dims_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_softmax(...) kiln_softmax_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_log_softmax(...) kiln_log_softmax_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_layer_norm(...) kiln_layer_norm_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- scans (PyTorch's cumulative ops) ------------------------------------ */
/** @name Scans
 * Inclusive scans along one dim (negative counts from the end; a 0-dim
 * tensor takes 0 or -1 and scans its one element). The result has the
 * input's shape. Integer and bool cumsum/cumprod give int64, as PyTorch.
 * A scan fuses with the elementwise ops that feed it and that read it:
 * cumsum(x * 2) + 1 is one kernel.
 * @{ */
/** torch.cumsum: element i along dim is the sum of elements 0..i.
 * @at
 * @param t the tensor (any dtype; bool and integers sum to int64)
 * @param dim the dim scanned
 * @handle t's error, KILN_ERR_ARG for NULL or a dim out of range. */
KILN_API kiln_tensor *kiln_cumsum_at(const char *f, int l, kiln_tensor *t, int64_t dim);
/** torch.cumprod: element i along dim is the product of elements 0..i.
 * @at
 * @param t the tensor (any dtype; bool and integers multiply to int64)
 * @param dim the dim scanned
 * @handle errors as kiln_cumsum_at. */
KILN_API kiln_tensor *kiln_cumprod_at(const char *f, int l, kiln_tensor *t, int64_t dim);
/** torch.logcumsumexp: log of the running sum of exp along dim, computed
 * stably (max + log(1 + exp(min - max)) at each step, accumulated in f64
 * as PyTorch's CPU kernel does); nan propagates.
 * @at
 * @param t a floating tensor
 * @param dim the dim scanned
 * @handle errors as kiln_cumsum_at; KILN_ERR_DTYPE for integer or bool input. */
KILN_API kiln_tensor *kiln_logcumsumexp_at(const char *f, int l, kiln_tensor *t, int64_t dim);
/** torch.cummax: the running maximum along dim and the int64 position it
 * was found at. On ties the position is the latest; a nan, once met, is the
 * value from there on, at the latest nan's position.
 * @at
 * @param t the tensor (any dtype)
 * @param dim the dim scanned
 * @param values where the maxima go (t's dtype), or NULL to skip them
 * @param indices where the positions go (int64), or NULL to skip them
 * Each result is a new handle (see @ref handles); bad arguments (as for
 * kiln_cumsum_at) make both error nodes (see @ref errors). */
KILN_API void kiln_cummax_at(const char *f, int l, kiln_tensor *t, int64_t dim, kiln_tensor **values,
                             kiln_tensor **indices);
/** torch.cummin: the running minimum along dim and its int64 position, with
 * kiln_cummax_at's rules for ties and nan.
 * @at
 * @param t the tensor (any dtype)
 * @param dim the dim scanned
 * @param values where the minima go (t's dtype), or NULL to skip them
 * @param indices where the positions go (int64), or NULL to skip them
 * Results and errors as kiln_cummax_at. */
KILN_API void kiln_cummin_at(const char *f, int l, kiln_tensor *t, int64_t dim, kiln_tensor **values,
                             kiln_tensor **indices);
/** @} */

/** @name Scan macros
 * @{ */
/** @macros */
#define kiln_cumsum(...) kiln_cumsum_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_cumprod(...) kiln_cumprod_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_logcumsumexp(...) kiln_logcumsumexp_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_cummax(...) kiln_cummax_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_cummin(...) kiln_cummin_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- sorting ------------------------------------------------------------- */
/** @name Sorting
 * Along one dim (negative counts from the end; a 0-dim tensor takes 0 or -1).
 * nan sorts as the largest value, -0 equals +0, and equal elements keep
 * their input order (every sort is stable). Positions are int64. Each call
 * is one row kernel; a call's values and positions share it.
 * @{ */
/** torch.sort: the sorted values and the positions they came from.
 * @at
 * @param t the tensor (any dtype)
 * @param dim the dim sorted
 * @param descending nonzero sorts the largest first (equal elements still in input order)
 * @param stable accepted for PyTorch's signature: every sort is stable
 * @param values where the sorted values go (t's dtype), or NULL to skip them
 * @param indices where their positions go (int64), or NULL to skip them
 * Each result is a new handle (see @ref handles); t's error, or
 * KILN_ERR_ARG for NULL or a dim out of range, makes both error nodes (see
 * @ref errors). */
KILN_API void kiln_sort_at(const char *f, int l, kiln_tensor *t, int64_t dim, int descending, int stable,
                           kiln_tensor **values, kiln_tensor **indices);
/** torch.argsort: the positions of kiln_sort_at's values.
 * @at
 * @param t the tensor (any dtype)
 * @param dim the dim sorted
 * @param descending nonzero sorts the largest first
 * @param stable accepted for PyTorch's signature: every sort is stable
 * @handle t's error, KILN_ERR_ARG for NULL or a dim out of range. */
KILN_API kiln_tensor *kiln_argsort_at(const char *f, int l, kiln_tensor *t, int64_t dim, int descending, int stable);
/** torch.topk: the k largest (or smallest) elements along dim and their
 * positions, in order (largest first for largest), without sorting the
 * whole line: a bounded heap of k.
 * @at
 * @param t the tensor (not bool)
 * @param k how many, 0 to the dim's size
 * @param dim the dim searched
 * @param largest nonzero: the largest, else the smallest
 * @param sorted accepted for PyTorch's signature: the k are always in order
 * @param values where the values go (t's dtype), or NULL to skip them
 * @param indices where their positions go (int64), or NULL to skip them
 * Results and errors as kiln_sort_at, and KILN_ERR_ARG for k out of range,
 * KILN_ERR_DTYPE for bool. */
KILN_API void kiln_topk_at(const char *f, int l, kiln_tensor *t, int64_t k, int64_t dim, int largest, int sorted,
                           kiln_tensor **values, kiln_tensor **indices);
/** @} */

/** @name Sorting macros
 * @{ */
/** @macros */
#define kiln_sort(...) kiln_sort_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_argsort(...) kiln_argsort_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_topk(...) kiln_topk_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- matrix products (PyTorch's matmul rules) ---------------------------- */
/** @name Matrix products
 * matmul: 1-D x 1-D is a dot product, a 1-D operand is promoted to a matrix
 * and the added dim removed afterwards, batch dims broadcast. Both operands
 * must have the same dtype, floating or integer: an integer product is one
 * fused multiply-and-sum kernel and wraps in its dtype, as PyTorch's does
 * (bool is refused). mm: 2-D only; dot: 1-D only;
 * linear(x, W, b) = x @ W^T + b (b may be NULL).
 * @{ */
/** torch.matmul.
 * @at
 * @param a,b tensors of one floating or integer dtype
 * @handle KILN_ERR_SHAPE when the inner sizes differ, batch dims cannot
 * broadcast or an operand is 0-dim; KILN_ERR_DTYPE for dtypes that differ or
 * are bool. */
KILN_API kiln_tensor *kiln_matmul_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b);
/** torch.mm: kiln_matmul_at of two matrices.
 * @at
 * @param a,b 2-D tensors of one floating or integer dtype
 * @handle errors as kiln_matmul_at (KILN_ERR_SHAPE when not 2-D). */
KILN_API kiln_tensor *kiln_mm_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b);
/** torch.dot: the 0-dim dot product of two vectors.
 * @at
 * @param a,b 1-D tensors of one floating or integer dtype and one size
 * @handle errors as kiln_matmul_at (KILN_ERR_SHAPE when not 1-D). */
KILN_API kiln_tensor *kiln_dot_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b);
/** F.linear: x @ w^T + b, one fused matrix product.
 * @at
 * @param x the input, (..., in)
 * @param w the weight, (out, in)
 * @param b the bias, (out), or NULL
 * @handle errors as kiln_matmul_at; KILN_ERR_SHAPE for a bias of another size. */
KILN_API kiln_tensor *kiln_linear_at(const char *f, int l, kiln_tensor *x, kiln_tensor *w, kiln_tensor *b);
/** @} */
/** @name Matrix product macros
 * @{ */
/** @macros */
#define kiln_matmul(...) kiln_matmul_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_mm(...) kiln_mm_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_dot(...) kiln_dot_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_linear(...) kiln_linear_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- convolution (torch.nn.functional) ------------------------------------- */
/** @name Convolution
 * F.conv1d and F.conv2d (cross-correlation, as torch) with stride, padding,
 * dilation and groups (depthwise: groups = channels); bias may be NULL. Each
 * (n, values) argument takes n = 1 (both spatial dims) or n = 2 for conv2d,
 * n = 1 for conv1d, and n = 0 for the default (stride 1, padding 0,
 * dilation 1). A convolution is an implicit GEMM: one batched GEMM (per
 * group) of the weight and the input's windows, whose packing on the CPU
 * reads the input directly (no im2col buffer exists), with the bias and the
 * elementwise ops that follow (relu, gelu, a residual add, a batch norm's
 * scale and shift) in its epilogue: conv2d + bias + relu is one kernel. On
 * CUDA the windows are stored by an NVRTC-compiled im2col kernel and the
 * product runs in cuBLASLt.
 * @{ */
/** F.conv2d.
 * @at
 * @param x a floating (N, C, H, W) or (C, H, W) input
 * @param w the weight (O, C / groups, kh, kw), of x's dtype
 * @param b the bias (O,), or NULL
 * @param nstride,stride,npadding,padding,ndilation,dilation the window
 * @param groups divides C and O
 * @handle KILN_ERR_SHAPE for shapes that do not fit (the message names them
 * and the rule); KILN_ERR_ARG for a bad stride, padding or dilation;
 * KILN_ERR_DTYPE for integer or mixed dtypes. */
KILN_API kiln_tensor *kiln_conv2d_at(const char *f, int l, kiln_tensor *x, kiln_tensor *w, kiln_tensor *b, int nstride,
                                     const int64_t *stride, int npadding, const int64_t *padding, int ndilation,
                                     const int64_t *dilation, int64_t groups);
/** F.conv1d: kiln_conv2d_at over a height of 1.
 * @at
 * @param x a floating (N, C, L) or (C, L) input
 * @param w the weight (O, C / groups, k)
 * @param b the bias (O,), or NULL
 * @param nstride,stride,npadding,padding,ndilation,dilation one value each (or n = 0)
 * @param groups divides C and O
 * @handle errors as kiln_conv2d_at. */
KILN_API kiln_tensor *kiln_conv1d_at(const char *f, int l, kiln_tensor *x, kiln_tensor *w, kiln_tensor *b, int nstride,
                                     const int64_t *stride, int npadding, const int64_t *padding, int ndilation,
                                     const int64_t *dilation, int64_t groups);
/** F.conv_transpose2d (argument order as OPS-API: output_padding, groups,
 * then dilation). Computed in the gradient-style, scatter-free form: the
 * convolution, stride 1, of the input spread stride apart (zeros between
 * its elements, never stored: the window skips them), padded by
 * dilation * (k - 1) - padding (output_padding more at the end), with the
 * weight flipped along kh and kw and transposed to (O, C / groups, kh, kw)
 * per group; so it is the same implicit GEMM as kiln_conv2d_at, with the
 * bias and what follows in its epilogue (the flipped weight is rearranged
 * by one small kernel of its own).
 * @at
 * @param x a floating (N, C, H, W) or (C, H, W) input
 * @param w the weight (C, O / groups, kh, kw), of x's dtype
 * @param b the bias (O,), or NULL
 * @param nstride,stride,npadding,padding the transposed window (n = 0: stride 1, padding 0)
 * @param noutput_padding,output_padding added to the output's end (each smaller than the stride or the dilation)
 * @param groups divides C and O
 * @param ndilation,dilation the dilation (n = 0: 1)
 * @return (N, O, (H - 1) * stride - 2 * padding + dilation * (kh - 1) + output_padding + 1, likewise along W)
 * @handle KILN_ERR_SHAPE for shapes that do not fit; KILN_ERR_ARG for a bad
 * stride, padding, output_padding or dilation; KILN_ERR_DTYPE for integer
 * or mixed dtypes. */
KILN_API kiln_tensor *kiln_conv_transpose2d_at(const char *f, int l, kiln_tensor *x, kiln_tensor *w, kiln_tensor *b,
                                               int nstride, const int64_t *stride, int npadding, const int64_t *padding,
                                               int noutput_padding, const int64_t *output_padding, int64_t groups,
                                               int ndilation, const int64_t *dilation);
/** @macros */
#define kiln_conv_transpose2d(...) kiln_conv_transpose2d_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_conv2d(...) kiln_conv2d_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_conv1d(...) kiln_conv1d_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- pooling and resampling (torch.nn.functional) -------------------------- */
/** @name Pooling and resampling
 * torch.nn.functional's max_pool2d (with indices), avg_pool2d and
 * adaptive_avg_pool2d over the last two dims of a (C, H, W) or (N, C, H, W)
 * input. Each (n, values) argument takes n = 1 (the same for both dims,
 * torch's int) or n = 2; a stride of n = 0 is the kernel size (torch's
 * stride=None). A window op fuses into one kernel that reads the input in
 * place: each tap of the window is a strided view of the padded input.
 * @{ */
/** F.max_pool2d: the maximum of each window (NaN if the window holds one);
 * padding counts as the dtype's lowest value.
 * @at
 * @param x a (C, H, W) or (N, C, H, W) tensor, not bool
 * @param nkernel,kernel_size the window
 * @param nstride,stride the step (n = 0: the window)
 * @param npadding,padding added on both sides, at most half the window
 * @param ndilation,dilation the spacing of the taps (n = 0: 1)
 * @param ceil_mode nonzero rounds the output size up (a last window must start inside)
 * @handle KILN_ERR_SHAPE for another rank or an output smaller than 1;
 * KILN_ERR_ARG for a bad kernel, stride, padding or dilation (named);
 * KILN_ERR_DTYPE for bool. */
KILN_API kiln_tensor *kiln_max_pool2d_at(const char *f, int l, kiln_tensor *x, int nkernel, const int64_t *kernel_size,
                                         int nstride, const int64_t *stride, int npadding, const int64_t *padding,
                                         int ndilation, const int64_t *dilation, int ceil_mode);
/** F.max_pool2d(return_indices=True): the values and, as int64, the index
 * of each maximum in its flattened H*W input plane (the first one, or the
 * last NaN, as torch scans).
 * @at
 * @param x,nkernel,kernel_size,nstride,stride,npadding,padding,ndilation,dilation,ceil_mode as kiln_max_pool2d_at
 * @param values,indices receive new handles (NULL: not wanted), never NULL:
 * on bad arguments both are the error node, with errors as kiln_max_pool2d_at. */
KILN_API void kiln_max_pool2d_with_indices_at(const char *f, int l, kiln_tensor *x, int nkernel,
                                              const int64_t *kernel_size, int nstride, const int64_t *stride,
                                              int npadding, const int64_t *padding, int ndilation,
                                              const int64_t *dilation, int ceil_mode, kiln_tensor **values,
                                              kiln_tensor **indices);
/** F.avg_pool2d: the mean of each window.
 * @at
 * @param x a floating (C, H, W) or (N, C, H, W) tensor
 * @param nkernel,kernel_size,nstride,stride,npadding,padding,ceil_mode as kiln_max_pool2d_at
 * @param count_include_pad nonzero divides by the window's size within the
 * padded input, zero by the taps inside the input
 * @handle errors as kiln_max_pool2d_at; KILN_ERR_DTYPE for an integer tensor. */
KILN_API kiln_tensor *kiln_avg_pool2d_at(const char *f, int l, kiln_tensor *x, int nkernel, const int64_t *kernel_size,
                                         int nstride, const int64_t *stride, int npadding, const int64_t *padding,
                                         int ceil_mode, int count_include_pad);
/** F.adaptive_avg_pool2d: output cell (i, j) averages input rows
 * [floor(i H / OH), ceil((i + 1) H / OH)) and the columns likewise, one
 * dim after the other: a mean where the windows are equal (OH divides H),
 * else a weighted sum of index_select taps, fused with what produces x
 * and what reads the result.
 * @at
 * @param x a floating (C, H, W) or (N, C, H, W) tensor
 * @param noutput_size,output_size (OH, OW), or one value for both
 * @handle KILN_ERR_ARG for a size that is not 1 or 2 positive values;
 * errors as kiln_avg_pool2d_at. */
KILN_API kiln_tensor *kiln_adaptive_avg_pool2d_at(const char *f, int l, kiln_tensor *x, int noutput_size,
                                                  const int64_t *output_size);
/** F.interpolate to an explicit size: nearest and nearest-exact (torch's
 * index rules, computed in float as torch does), linear (3-D input),
 * bilinear and bicubic (4-D; bicubic with A = -0.75 and edges repeated) and
 * trilinear (5-D), align_corners as torch. Each spatial dim is resampled
 * by 1 (nearest), 2 (linear) or 4 (bicubic) taps: index_select loads by
 * positions and weights computed on the host, fused with what produces x
 * and what reads the result (one kernel in all).
 * @at
 * @param x a floating (N, C, ...) input with 1 to 3 spatial dims
 * @param nsize,size the output's spatial sizes (one value: all of them)
 * @param mode one of the modes above
 * @param align_corners nonzero maps the corner pixels' centres onto each
 * other (linear modes only)
 * @handle KILN_ERR_ARG for an unknown mode (the message lists them), a bad
 * size or align_corners with a nearest mode; KILN_ERR_SHAPE for a rank the
 * mode does not take; KILN_ERR_DTYPE for an integer tensor. */
KILN_API kiln_tensor *kiln_interpolate_at(const char *f, int l, kiln_tensor *x, int nsize, const int64_t *size,
                                          const char *mode, int align_corners);
/** @macros */
#define kiln_interpolate(...) kiln_interpolate_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_max_pool2d(...) kiln_max_pool2d_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_max_pool2d_with_indices(...) kiln_max_pool2d_with_indices_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_avg_pool2d(...) kiln_avg_pool2d_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_adaptive_avg_pool2d(...) kiln_adaptive_avg_pool2d_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- normalizations, attention and losses (torch.nn.functional) ---------- */
/** @name Normalizations, attention and losses
 * torch.nn.functional's rms_norm, batch_norm (inference form: running
 * statistics), group_norm, scaled_dot_product_attention and the losses mse_loss, l1_loss,
 * binary_cross_entropy and binary_cross_entropy_with_logits, as
 * compositions the fuser turns into one row-wise kernel per normalization
 * and an elementwise kernel plus one reduction per loss. Errors name the
 * function called. Channels are dim 1 (N, C, ...). A loss's reduction is
 * "mean" (also for NULL), "sum" or "none".
 * @{ */
/** F.rms_norm: x / sqrt(mean(x^2) + eps) over the last nlast dims, * weight.
 * @at
 * @param x a floating tensor
 * @param nlast how many trailing dims are normalized together
 * @param weight of those dims' shape, or NULL
 * @param eps added to the mean square (torch's default eps=None is the
 * dtype's machine epsilon: pass FLT_EPSILON for float32)
 * @handle KILN_ERR_ARG when x has fewer than nlast dims; KILN_ERR_DTYPE for
 * an integer tensor; KILN_ERR_SHAPE for a weight that does not broadcast. */
KILN_API kiln_tensor *kiln_rms_norm_at(const char *f, int l, kiln_tensor *x, int nlast, kiln_tensor *weight, double eps);
/** F.batch_norm with training=False: (x - running_mean) / sqrt(running_var
 * + eps) * weight + bias, per channel.
 * @at
 * @param x a floating tensor (N, C, ...)
 * @param running_mean,running_var (C,) statistics
 * @param weight,bias (C,), or NULL
 * @param eps added to the variance
 * @handle KILN_ERR_SHAPE for x of fewer than 2 dims or a vector that is not
 * (C,); KILN_ERR_DTYPE for an integer tensor; KILN_ERR_ARG for NULL statistics. */
KILN_API kiln_tensor *kiln_batch_norm_at(const char *f, int l, kiln_tensor *x, kiln_tensor *running_mean,
                                         kiln_tensor *running_var, kiln_tensor *weight, kiln_tensor *bias, double eps);
/** F.group_norm: the channels split into num_groups groups, each group (with
 * every dim after the channels) normalized by its mean and biased variance,
 * then * weight + bias per channel.
 * @at
 * @param x a floating tensor (N, C, ...)
 * @param num_groups a divisor of C
 * @param weight,bias (C,), or NULL
 * @param eps added to the variance
 * @handle KILN_ERR_SHAPE when num_groups does not divide C or a vector is not
 * (C,); errors as kiln_batch_norm_at. */
KILN_API kiln_tensor *kiln_group_norm_at(const char *f, int l, kiln_tensor *x, int64_t num_groups, kiln_tensor *weight,
                                         kiln_tensor *bias, double eps);
/** F.scaled_dot_product_attention: softmax(q k^T * scale + mask) v over the
 * last two dims. On the CPU, for float32 or float64 q, k, v of one dtype
 * whose batch dims match (k and v with Hq / Hkv times fewer heads under
 * enable_gqa) and a mask of their dtype or bool, it is one kernel: blocks
 * of 48 query rows of each (batch, head) run on the thread pool against
 * blocks of 64 keys with an online softmax (the FlashAttention recurrence),
 * so the L x S scores never exist and the memory it allocates is its
 * output. Otherwise (float16/bfloat16, mixed dtypes, CUDA tensors, batch
 * dims that broadcast, an empty q, k or v, kiln_fn placeholders) it is the
 * plain composition: a GEMM whose epilogue scales and masks, a row softmax
 * and a second GEMM, storing the scores. Either way a row whose every
 * position is masked is NaN, as in torch's math backend (0/0: no key has
 * any weight).
 * @at
 * @param q queries (..., L, E)
 * @param k keys (..., S, E)
 * @param v values (..., S, Ev)
 * @param attn_mask NULL, bool (true = attend) or floating (added), broadcast to (..., L, S)
 * @param is_causal nonzero masks key j > query i (torch's ones(L, S).tril()); not with attn_mask
 * @param scale the factor of q k^T, or 0 for 1/sqrt(E)
 * @param enable_gqa nonzero lets k and v have fewer heads (dim -3) than q: query
 * head h reads key/value head h / (Hq / Hkv)
 * @handle KILN_ERR_SHAPE for shapes that do not fit (the message names them
 * and why), a mask together with is_causal, or a mask of another dtype;
 * KILN_ERR_DTYPE for integer q, k or v. */
KILN_API kiln_tensor *kiln_scaled_dot_product_attention_at(const char *f, int l, kiln_tensor *q, kiln_tensor *k,
                                                           kiln_tensor *v, kiln_tensor *attn_mask, int is_causal,
                                                           double scale, int enable_gqa);
/** F.nll_loss: -weight[t] * input[row, t] for each row's class t (input
 * holds log-probabilities), 0 where t is ignore_index; "mean" divides by
 * the weights of the rows counted, as torch. A class out of range is
 * KILN_ERR_VALUE at realize, naming the row.
 * @at
 * @param input (N, C, d1, ...) or (C,) log-probabilities
 * @param target int64 classes, input's shape without dim 1 (0-dim for a (C,) input)
 * @param weight (C,) class weights, or NULL
 * @param reduction "mean", "sum" or "none"
 * @param ignore_index the class that counts for nothing (torch's default: -100)
 * @handle KILN_ERR_SHAPE for a target or weight that does not fit; errors as kiln_mse_loss_at. */
KILN_API kiln_tensor *kiln_nll_loss_at(const char *f, int l, kiln_tensor *input, kiln_tensor *target,
                                       kiln_tensor *weight, const char *reduction, int64_t ignore_index);
/** F.cross_entropy: log_softmax over the classes (dim 1, or dim 0 of a (C,)
 * input), then kiln_nll_loss_at for int64 class targets, or -sum_c weight_c
 * target_c logp_c per row for floating targets of input's shape (class
 * probabilities); label smoothing as torch.
 * @at
 * @param input (N, C, d1, ...) or (C,) logits
 * @param target int64 classes or floating probabilities
 * @param weight (C,) class weights, or NULL
 * @param reduction "mean", "sum" or "none"
 * @param ignore_index as kiln_nll_loss_at (class targets only)
 * @param label_smoothing in [0, 1]
 * @handle errors as kiln_nll_loss_at; KILN_ERR_ARG for a label_smoothing outside [0, 1]. */
KILN_API kiln_tensor *kiln_cross_entropy_at(const char *f, int l, kiln_tensor *input, kiln_tensor *target,
                                            kiln_tensor *weight, const char *reduction, int64_t ignore_index,
                                            double label_smoothing);
/** F.mse_loss: (input - target)^2, reduced.
 * @at
 * @param input,target floating tensors that broadcast together
 * @param reduction "mean", "sum" or "none"
 * @handle KILN_ERR_ARG for another reduction (the message lists the valid
 * ones); KILN_ERR_DTYPE for an integer tensor; KILN_ERR_SHAPE for shapes that
 * do not broadcast. */
KILN_API kiln_tensor *kiln_mse_loss_at(const char *f, int l, kiln_tensor *input, kiln_tensor *target,
                                       const char *reduction);
/** F.l1_loss: |input - target|, reduced.
 * @at
 * @param input,target floating tensors that broadcast together
 * @param reduction "mean", "sum" or "none"
 * @handle errors as kiln_mse_loss_at. */
KILN_API kiln_tensor *kiln_l1_loss_at(const char *f, int l, kiln_tensor *input, kiln_tensor *target,
                                      const char *reduction);
/** F.binary_cross_entropy: -(target log(input) + (1 - target) log(1 -
 * input)) * weight, each log clamped at -100 as torch does. torch checks at
 * run time that input lies in [0, 1]; kiln does not, and an input outside
 * gives NaN.
 * @at
 * @param input probabilities
 * @param target of input's shape
 * @param weight broadcast to input's shape, or NULL
 * @param reduction "mean", "sum" or "none"
 * @handle KILN_ERR_SHAPE for a target of another shape; errors as kiln_mse_loss_at. */
KILN_API kiln_tensor *kiln_binary_cross_entropy_at(const char *f, int l, kiln_tensor *input, kiln_tensor *target,
                                                   kiln_tensor *weight, const char *reduction);
/** F.binary_cross_entropy_with_logits in torch's stable form: (1 - target)
 * input + (1 + (pos_weight - 1) target) log(1 + e^-input), * weight.
 * @at
 * @param input logits
 * @param target of input's shape
 * @param weight broadcast to input's shape, or NULL
 * @param pos_weight the positive class weight broadcast along the last dim, or NULL
 * @param reduction "mean", "sum" or "none"
 * @handle errors as kiln_binary_cross_entropy_at. */
KILN_API kiln_tensor *kiln_binary_cross_entropy_with_logits_at(const char *f, int l, kiln_tensor *input,
                                                               kiln_tensor *target, kiln_tensor *weight,
                                                               kiln_tensor *pos_weight, const char *reduction);
/** @macros */
#define kiln_rms_norm(...) kiln_rms_norm_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_batch_norm(...) kiln_batch_norm_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_group_norm(...) kiln_group_norm_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_scaled_dot_product_attention(...) kiln_scaled_dot_product_attention_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_nll_loss(...) kiln_nll_loss_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_cross_entropy(...) kiln_cross_entropy_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_mse_loss(...) kiln_mse_loss_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_l1_loss(...) kiln_l1_loss_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_binary_cross_entropy(...) kiln_binary_cross_entropy_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_binary_cross_entropy_with_logits(...) kiln_binary_cross_entropy_with_logits_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- more reductions, shape ops and products (PyTorch semantics) -------- */
/** @name Statistics and norms
 * Compositions of the reductions that the fuser runs in the kernels reading
 * the rows. dims lists the reduced dims (ndims 0: every dim, torch's
 * dim=None); correction is torch's (the sum of squares is divided by
 * max(0, N - correction)). Multi-output ops write their results to the
 * out-parameters that are not NULL; on an error both get the error node.
 * @{ */
/** torch.var(t, dims, correction=, keepdim=).
 * @at
 * @param t a floating tensor
 * @param ndims,dims the dims reduced
 * @param correction subtracted from the count (1: unbiased, 0: biased)
 * @param keepdim nonzero keeps the reduced dims with size 1
 * @handle errors as kiln_var_dims_at. */
KILN_API kiln_tensor *kiln_var_correction_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, double correction, int keepdim);
/** torch.std(t, dims, correction=, keepdim=): the square root of kiln_var_correction_at.
 * @at
 * @param t a floating tensor
 * @param ndims,dims the dims reduced
 * @param correction subtracted from the count
 * @param keepdim nonzero keeps the reduced dims with size 1
 * @handle errors as kiln_var_dims_at. */
KILN_API kiln_tensor *kiln_std_correction_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, double correction, int keepdim);
/** torch.std_mean: both from one graph (one pass over t).
 * @at
 * @param t a floating tensor
 * @param ndims,dims the dims reduced
 * @param correction subtracted from the count
 * @param keepdim nonzero keeps the reduced dims with size 1
 * @param std,mean where the new handles go (NULL: not wanted) */
KILN_API void kiln_std_mean_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, double correction, int keepdim, kiln_tensor **std, kiln_tensor **mean);
/** torch.var_mean: both from one graph (one pass over t).
 * @at
 * @param t a floating tensor
 * @param ndims,dims the dims reduced
 * @param correction subtracted from the count
 * @param keepdim nonzero keeps the reduced dims with size 1
 * @param var,mean where the new handles go (NULL: not wanted) */
KILN_API void kiln_var_mean_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, double correction, int keepdim, kiln_tensor **var, kiln_tensor **mean);
/** torch.logsumexp: log(sum(exp(x - m))) + m with m the max over the dims
 * (a max and a sum per row: one kernel). Integer and bool inputs give float32.
 * @at
 * @param t the tensor
 * @param ndims,dims the dims reduced
 * @param keepdim nonzero keeps the reduced dims with size 1
 * @handle errors as the reductions. */
KILN_API kiln_tensor *kiln_logsumexp_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, int keepdim);
/** torch.aminmax over every element: two 0-dim results.
 * @at
 * @param t the tensor, not empty
 * @param min,max where the new handles go (NULL: not wanted) */
KILN_API void kiln_aminmax_at(const char *f, int l, kiln_tensor *t, kiln_tensor **min, kiln_tensor **max);
/** torch.aminmax(t, dim=, keepdim=).
 * @at
 * @param t the tensor
 * @param dim the dim reduced
 * @param keepdim nonzero keeps it with size 1
 * @param min,max where the new handles go (NULL: not wanted) */
KILN_API void kiln_aminmax_dim_at(const char *f, int l, kiln_tensor *t, int64_t dim, int keepdim, kiln_tensor **min, kiln_tensor **max);
/** torch.linalg.vector_norm: sum(|x|^ord)^(1/ord) over the dims; ord 0
 * counts the nonzeros, INFINITY / -INFINITY give the largest / smallest
 * |x|. torch.norm(x, p, dim) is this ('fro' is 2).
 * @at
 * @param t a floating tensor
 * @param ord the order (not NaN)
 * @param ndims,dims the dims reduced
 * @param keepdim nonzero keeps the reduced dims with size 1
 * @handle KILN_ERR_DTYPE for an integer tensor; errors as the reductions. */
KILN_API kiln_tensor *kiln_vector_norm_at(const char *f, int l, kiln_tensor *t, double ord, int ndims, const int64_t *dims, int keepdim);
/** torch.linalg.matrix_norm over the matrices of dims (dim0, dim1): "fro",
 * "1" / "-1" (largest / smallest absolute column sum), "inf" / "-inf"
 * (row sums). "nuc", "2" and "-2" need singular values, which kiln does not
 * compute: they are an error that says so.
 * @at
 * @param t a floating tensor of at least 2 dims
 * @param ord the norm's name (NULL: "fro")
 * @param dim0,dim1 the matrix dims, distinct
 * @param keepdim nonzero keeps them with size 1
 * @handle KILN_ERR_ARG for a bad or unsupported ord (the message lists the
 * valid ones) or bad dims; KILN_ERR_DTYPE for an integer tensor. */
KILN_API kiln_tensor *kiln_matrix_norm_at(const char *f, int l, kiln_tensor *t, const char *ord, int dim0, int dim1, int keepdim);
/** F.normalize: t / max(vector_norm(t, p, dim), eps).
 * @at
 * @param t a floating tensor
 * @param p the norm's order (F.normalize's default is 2)
 * @param dim the dim normalized
 * @param eps the smallest divisor (1e-12 in torch)
 * @handle errors as kiln_vector_norm_at. */
KILN_API kiln_tensor *kiln_normalize_at(const char *f, int l, kiln_tensor *t, double p, int64_t dim, double eps);
/** F.cosine_similarity: sum(a / max(|a|, eps) * b / max(|b|, eps)) along
 * dim, after broadcasting a and b; dim is removed.
 * @at
 * @param a,b floating tensors that broadcast
 * @param dim the dim of the vectors
 * @param eps the smallest norm (1e-8 in torch)
 * @handle KILN_ERR_SHAPE when a and b do not broadcast; errors as kiln_normalize_at. */
KILN_API kiln_tensor *kiln_cosine_similarity_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b, int64_t dim, double eps);
/** torch.trace: the sum of a matrix's main diagonal (a sum over a strided
 * view; integers sum to int64).
 * @at
 * @param t a 2-D tensor
 * @handle KILN_ERR_ARG for a tensor that is not 2-D. */
KILN_API kiln_tensor *kiln_trace_at(const char *f, int l, kiln_tensor *t);
/** @} */

/** @name Shape ops
 * Views made of slices, flips, cats, expands and reshapes, or a select on
 * an index comparison: none copies; each becomes index arithmetic in the
 * kernel that reads it. Dims may be negative. split, split_sizes, chunk and
 * unbind return how many pieces there are and write the first max_out of
 * them to out (like snprintf, the count may exceed max_out); on an error
 * they return -1 and every one of the max_out slots holds the error node.
 * @{ */
/** torch.tril: elements with column - row > diagonal become 0 (last two dims).
 * @at
 * @param t a tensor of at least 2 dims
 * @param diagonal 0 the main diagonal, > 0 above it, < 0 below
 * @handle KILN_ERR_ARG for fewer than 2 dims. */
KILN_API kiln_tensor *kiln_tril_at(const char *f, int l, kiln_tensor *t, int64_t diagonal);
/** torch.triu: elements with column - row < diagonal become 0.
 * @at
 * @param t a tensor of at least 2 dims
 * @param diagonal 0 the main diagonal, > 0 above it, < 0 below
 * @handle KILN_ERR_ARG for fewer than 2 dims. */
KILN_API kiln_tensor *kiln_triu_at(const char *f, int l, kiln_tensor *t, int64_t diagonal);
/** F.pad(mode='reflect'): the mirror image without the edge element.
 * kiln takes any number of padded dims (torch only the last 1-3).
 * @at
 * @param t the tensor
 * @param npads,pads (before, after) pairs, last dim first; each < the dim's size; negative amounts crop
 * @handle KILN_ERR_ARG for an odd count, more pairs than dims or a pad too large. */
KILN_API kiln_tensor *kiln_pad_reflect_at(const char *f, int l, kiln_tensor *t, int npads, const int64_t *pads);
/** F.pad(mode='replicate'): the edge element repeated.
 * @at
 * @param t the tensor
 * @param npads,pads (before, after) pairs, last dim first; a padded dim must not be empty
 * @handle errors as kiln_pad_reflect_at. */
KILN_API kiln_tensor *kiln_pad_replicate_at(const char *f, int l, kiln_tensor *t, int npads, const int64_t *pads);
/** F.pad(mode='circular'): the elements of the other end.
 * @at
 * @param t the tensor
 * @param npads,pads (before, after) pairs, last dim first; each <= the dim's size
 * @handle errors as kiln_pad_reflect_at. */
KILN_API kiln_tensor *kiln_pad_circular_at(const char *f, int l, kiln_tensor *t, int npads, const int64_t *pads);
/** torch.split(t, split_size, dim): pieces of split_size, the last shorter.
 * @at
 * @param t a tensor of at least 1 dim
 * @param split_size > 0 (0 only for an empty dim)
 * @param dim the dim
 * @param max_out,out room for the pieces' handles
 * @return the number of pieces, -1 on an error. */
KILN_API int kiln_split_at(const char *f, int l, kiln_tensor *t, int64_t split_size, int dim, int max_out, kiln_tensor **out);
/** torch.split(t, [sizes], dim) (split_with_sizes).
 * @at
 * @param t a tensor of at least 1 dim
 * @param nsizes,sizes the pieces' sizes, summing to the dim's size
 * @param dim the dim
 * @param max_out,out room for the pieces' handles
 * @return nsizes, -1 on an error. */
KILN_API int kiln_split_sizes_at(const char *f, int l, kiln_tensor *t, int nsizes, const int64_t *sizes, int dim, int max_out, kiln_tensor **out);
/** torch.chunk: pieces of ceil(size / chunks) (so there may be fewer than chunks).
 * @at
 * @param t a tensor of at least 1 dim
 * @param chunks > 0
 * @param dim the dim
 * @param max_out,out room for the pieces' handles
 * @return the number of pieces, -1 on an error. */
KILN_API int kiln_chunk_at(const char *f, int l, kiln_tensor *t, int64_t chunks, int dim, int max_out, kiln_tensor **out);
/** torch.unbind: every index of dim, the dim removed.
 * @at
 * @param t a tensor of at least 1 dim
 * @param dim the dim
 * @param max_out,out room for the pieces' handles
 * @return the dim's size, -1 on an error. */
KILN_API int kiln_unbind_at(const char *f, int l, kiln_tensor *t, int dim, int max_out, kiln_tensor **out);
/** Tensor.repeat: t tiled repeats[d] times along each dim (t gains leading
 * size-1 dims when repeats is longer).
 * @at
 * @param t the tensor
 * @param nrepeats,repeats counts >= 0, at least one per dim of t
 * @handle KILN_ERR_ARG for fewer counts than dims or a negative count. */
KILN_API kiln_tensor *kiln_repeat_at(const char *f, int l, kiln_tensor *t, int nrepeats, const int64_t *repeats);
/** torch.tile: kiln_repeat_at with ones prepended to the shorter of dims and t's shape.
 * @at
 * @param t the tensor
 * @param ndims,dims counts >= 0
 * @handle KILN_ERR_ARG for a negative count. */
KILN_API kiln_tensor *kiln_tile_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims);
/** torch.repeat_interleave(t, repeats): every element of the flattened t repeats times.
 * @at
 * @param t the tensor
 * @param repeats >= 0
 * @handle KILN_ERR_ARG for a negative count. */
KILN_API kiln_tensor *kiln_repeat_interleave_at(const char *f, int l, kiln_tensor *t, int64_t repeats);
/** torch.repeat_interleave(t, repeats, dim): every index of dim repeats times.
 * @at
 * @param t the tensor
 * @param repeats >= 0
 * @param dim the dim
 * @handle KILN_ERR_ARG for a negative count or a bad dim. */
KILN_API kiln_tensor *kiln_repeat_interleave_dim_at(const char *f, int l, kiln_tensor *t, int64_t repeats, int dim);
/** torch.roll: elements shifted along dims, wrapping around; ndims 0 rolls
 * the flattened tensor (torch's dims=None).
 * @at
 * @param t the tensor
 * @param nshifts,shifts the shifts (one when ndims is 0)
 * @param ndims,dims the dims, as many as shifts
 * @handle KILN_ERR_ARG when the counts differ or a dim is bad. */
KILN_API kiln_tensor *kiln_roll_at(const char *f, int l, kiln_tensor *t, int nshifts, const int64_t *shifts, int ndims, const int64_t *dims);
/** torch.diag: a 1-D t becomes the square matrix with t on diagonal k; a
 * 2-D t gives its diagonal k.
 * @at
 * @param t a 1-D or 2-D tensor
 * @param diagonal 0 the main diagonal, > 0 above it, < 0 below
 * @handle KILN_ERR_ARG for other ranks. */
KILN_API kiln_tensor *kiln_diag_at(const char *f, int l, kiln_tensor *t, int64_t diagonal);
/** torch.diagonal: the diagonal of the (dim1, dim2) matrices, as the last
 * dim; the others keep their order.
 * @at
 * @param t a tensor of at least 2 dims
 * @param offset 0 the main diagonal, > 0 above it, < 0 below
 * @param dim1,dim2 distinct dims
 * @handle KILN_ERR_ARG for identical or bad dims. */
KILN_API kiln_tensor *kiln_diagonal_at(const char *f, int l, kiln_tensor *t, int64_t offset, int dim1, int dim2);
/** F.one_hot: int64, t's shape plus a last dim of num_classes, 1 where it
 * equals t's value (a comparison with an index: no copy). With num_classes
 * given, t stays lazy and values outside [0, num_classes) give rows of
 * zeros (torch raises); num_classes -1 means max(t) + 1, which realizes t
 * at once to read its min and max (negative values are then an error).
 * @at
 * @param t an int64 tensor of class indices
 * @param num_classes the classes, or -1
 * @handle KILN_ERR_DTYPE for another dtype; KILN_ERR_ARG for num_classes < -1,
 * -1 with an empty or negative t. */
KILN_API kiln_tensor *kiln_one_hot_at(const char *f, int l, kiln_tensor *t, int64_t num_classes);
/** @} */

/** @name Products
 * @{ */
/** torch.outer: the (n, m) products of two vectors (a broadcast multiply,
 * any dtypes, promoted).
 * @at
 * @param a,b 1-D tensors
 * @handle KILN_ERR_SHAPE when not 1-D. */
KILN_API kiln_tensor *kiln_outer_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b);
/** torch.einsum with its equation syntax: "bij,bjk->bik", implicit outputs
 * ("ij,jk": the subscripts used once, sorted, after the "..." dims),
 * "..." broadcasting, spaces anywhere, repeated subscripts for diagonals
 * ("ii->i"), size-1 dims broadcasting. The operands contract left to right,
 * each pair as one matmul of its permuted and flattened dims when the two
 * share a floating dtype (so "bij,bjk->bik" is kiln_matmul_at's own GEMM)
 * and as a broadcast multiply and a sum otherwise; "ii" is a sum over a
 * strided view.
 * @at
 * @param equation the equation
 * @param n,operands the tensors (1 to 64)
 * @handle KILN_ERR_ARG for a malformed equation or one that does not fit
 * the operands (the message quotes it and gives the position of the
 * problem); KILN_ERR_SHAPE for sizes of one subscript that differ. */
KILN_API kiln_tensor *kiln_einsum_at(const char *f, int l, const char *equation, int n, kiln_tensor *const *operands);
/** torch.linalg.cross: the cross product of 3-vectors along dim, after broadcasting.
 * @at
 * @param a,b tensors that broadcast, both of size 3 along dim
 * @param dim the dim (torch.linalg.cross's default is -1)
 * @handle KILN_ERR_SHAPE for sizes other than 3 or shapes that do not broadcast. */
KILN_API kiln_tensor *kiln_cross_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b, int dim);
/** @} */

/** @name Macros of the statistics, norms, shape ops and products
 * @{ */
/** @macros */
#define kiln_var_correction(...) kiln_var_correction_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_std_correction(...) kiln_std_correction_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_std_mean(...) kiln_std_mean_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_var_mean(...) kiln_var_mean_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_logsumexp(...) kiln_logsumexp_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_aminmax(...) kiln_aminmax_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_aminmax_dim(...) kiln_aminmax_dim_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_vector_norm(...) kiln_vector_norm_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_matrix_norm(...) kiln_matrix_norm_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_normalize(...) kiln_normalize_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_cosine_similarity(...) kiln_cosine_similarity_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_trace(...) kiln_trace_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_tril(...) kiln_tril_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_triu(...) kiln_triu_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_pad_reflect(...) kiln_pad_reflect_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_pad_replicate(...) kiln_pad_replicate_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_pad_circular(...) kiln_pad_circular_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_split(...) kiln_split_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_split_sizes(...) kiln_split_sizes_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_chunk(...) kiln_chunk_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_unbind(...) kiln_unbind_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_repeat(...) kiln_repeat_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_tile(...) kiln_tile_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_repeat_interleave(...) kiln_repeat_interleave_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_repeat_interleave_dim(...) kiln_repeat_interleave_dim_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_roll(...) kiln_roll_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_diag(...) kiln_diag_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_diagonal(...) kiln_diagonal_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_one_hot(...) kiln_one_hot_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_outer(...) kiln_outer_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_einsum(...) kiln_einsum_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_cross(...) kiln_cross_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- results and info ---------------------------------------------------- */
/** Computes t: checks, fuses, compiles and runs its pending graph; t then
 * holds a buffer. A realized tensor costs nothing.
 * @at
 * @param t the tensor
 * @return KILN_OK; t's status for an error node (the first error below it,
 * whose message becomes kiln_last_error()); KILN_ERR_ARG for NULL;
 * KILN_ERR_MEMORY, KILN_ERR_DEVICE or KILN_ERR_COMPILE when running fails. */
KILN_API kiln_status kiln_realize_at(const char *f, int l, kiln_tensor *t);
/** Realizes n tensors together, sharing what their graphs share.
 * @at
 * @param n,ts the tensors
 * @return as kiln_realize_at; KILN_ERR_ARG for a NULL entry or list. */
KILN_API kiln_status kiln_realize_n_at(const char *f, int l, int n, kiln_tensor *const *ts);
/** Realizes t and copies it into dst as contiguous row-major values of its dtype.
 * @at
 * @param t a CPU tensor (copy a GPU one with kiln_cpu first)
 * @param dst the destination
 * @param dst_bytes its size: at least numel * dtype size
 * @return as kiln_realize_at; KILN_ERR_ARG when dst is too small;
 * KILN_ERR_DEVICE for a tensor not on the CPU. */
KILN_API kiln_status kiln_copy_to_host_at(const char *f, int l, kiln_tensor *t, void *dst, size_t dst_bytes);
/** The value of a one-element CPU tensor.
 * @at
 * @param t the tensor
 * @return the value as a double; NaN with an error set (kiln_last_error) for
 * more or fewer elements or a failed realize. */
KILN_API double kiln_item_at(const char *f, int l, kiln_tensor *t);
/** Realizes t and returns its contiguous host data (a strided t gets a dense
 * copy as its buffer; its value is unchanged).
 * @at
 * @param t a CPU tensor (copy a GPU one with kiln_cpu first)
 * @return t's memory, kiln's, valid while t lives; NULL with an error set
 * on failure. */
KILN_API const void *kiln_data_at(const char *f, int l, kiln_tensor *t);
/** PyTorch's repr of t under the print options: tensor([[1., 2.],\n        [3., 4.]]).
 * @at
 * @param t a CPU tensor (copy a GPU one with kiln_cpu first), realized first
 * @return a malloc'd string the caller frees; NULL with an error set on failure. */
KILN_API char *kiln_to_string_at(const char *f, int l, kiln_tensor *t);
/** Prints kiln_to_string_at's text and a newline to stdout.
 * @at
 * @param t the tensor
 * @return as kiln_realize_at. */
KILN_API kiln_status kiln_print_at(const char *f, int l, kiln_tensor *t);

/** @name Print options
 * PyTorch's torch.set_printoptions: digits after the point
 * (precision, default 4); tensors of more than threshold elements (1000)
 * are summarized to edgeitems (3) at each end of every dim around "...";
 * lines wrap at linewidth characters (80); sci_mode forces scientific
 * notation on or off for floats, KILN_SCI_AUTO (PyTorch's None, the
 * default) picks it from the values. A negative precision, threshold,
 * edgeitems or linewidth keeps the current value (PyTorch's None);
 * sci_mode is always set, as in PyTorch. KILN_ERR_ARG (nothing changed) for
 * a precision above 100 or an unknown sci_mode. The options are global and
 * apply to kiln_print and kiln_to_string from then on.
 * @{ */
/** Scientific notation for floats: PyTorch's sci_mode None, False, True. */
typedef enum {
  KILN_SCI_AUTO = -1,   /**< chosen from the values (the default) */
  KILN_SCI_OFF = 0,     /**< never */
  KILN_SCI_ON = 1       /**< always */
} kiln_sci_mode;
/** The print options (kiln_get_printoptions). */
typedef struct {
  int precision;        /**< digits after the point, 4 */
  int64_t threshold;    /**< more elements than this are summarized, 1000 */
  int edgeitems;        /**< items shown at each end of a summarized dim, 3 */
  int linewidth;        /**< characters per line before wrapping, 80 */
  kiln_sci_mode sci_mode; /**< KILN_SCI_AUTO */
} kiln_printoptions;
/** Sets the print options, as torch.set_printoptions does.
 * @at
 * @param precision digits after the point, 0..100; negative keeps it
 * @param threshold summarize beyond this many elements; negative keeps it
 * @param edgeitems items at each end of a summarized dim; negative keeps it
 * @param linewidth characters per line; negative keeps it
 * @param sci_mode always set
 * @return KILN_OK; KILN_ERR_ARG (nothing changed) for a precision above 100
 * or an unknown sci_mode. */
KILN_API kiln_status kiln_set_printoptions_at(const char *f, int l, int precision, int64_t threshold, int edgeitems,
                                     int linewidth, kiln_sci_mode sci_mode);
/** @return the print options in force. */
KILN_API kiln_printoptions kiln_get_printoptions(void);
/** @} */

/** @name Result macros
 * @{ */
/** @macros */
#define kiln_realize(...) kiln_realize_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_realize_n(...) kiln_realize_n_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_copy_to_host(...) kiln_copy_to_host_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_item(...) kiln_item_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_data(...) kiln_data_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_to_string(...) kiln_to_string_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_print(...) kiln_print_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_set_printoptions(...) kiln_set_printoptions_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/** The formats of kiln_dump_graph_at. */
typedef enum {
  KILN_FMT_TEXT,        /**< the graph as KILN_DEBUG=4 prints it, then one line per kernel */
  KILN_FMT_DOT          /**< a Graphviz digraph, a cluster per kernel */
} kiln_graph_format;
/** Draws t's pending graph as kiln_realize would compile it: after the graph
 * passes, partitioned into the kernels realize would launch (in launch
 * order, named as KILN_DEBUG=1 names them). Nothing is compiled or run and
 * t stays pending. KILN_FMT_TEXT: the graph as KILN_DEBUG=4 prints it, then
 * one line per kernel with the nodes it stores and those it inlines.
 * KILN_FMT_DOT: a Graphviz digraph (`dot -Tsvg`) with each kernel a cluster
 * of the nodes it computes, buffers and sources outside, edges from source
 * to consumer, nodes labelled "op dtype(shape)" and the file:line that built
 * them. A realized tensor is one buffer node. KILN_ERR_ARG for a NULL t or
 * out, an unknown format or a failed write; an error tensor gives its status.
 * @at
 * @param t the tensor
 * @param out where the text goes
 * @param fmt KILN_FMT_TEXT or KILN_FMT_DOT
 * @return KILN_OK or the error above. */
KILN_API kiln_status kiln_dump_graph_at(const char *f, int l, kiln_tensor *t, FILE *out, kiln_graph_format fmt);
/** @macros */
#define kiln_dump_graph(...) kiln_dump_graph_at(__FILE__, __LINE__, __VA_ARGS__)

/* ---- gradients ------------------------------------------------------------- */
/** @name Gradients
 * Reverse-mode differentiation as a graph transform (JAX's vjp, tinygrad's
 * gradient): kiln_grad walks the graph y was built from back to the tensors
 * asked for and returns their gradients as new lazy tensors, built of
 * kiln's own ops. They are ordinary tensors: realized together with y
 * (kiln_realize_n) forward and backward fuse into as few kernels as the
 * passes can make; they compile with kiln_compile over placeholders; they
 * can be differentiated again (a Hessian-vector product is the gradient of
 * sum(grad * v)).
 * @code
 * kiln_tensor *loss = kiln_mse_loss(kiln_linear(x, w, b), target, "mean");
 * kiln_tensor *g[2];
 * kiln_grad(loss, NULL, 2, (kiln_tensor *[]){w, b}, g);   // lazy: nothing runs yet
 * kiln_realize_n(3, (kiln_tensor *[]){loss, g[0], g[1]});  // one plan for all three
 * @endcode
 * What the backward reads of the forward (a softmax's output, an
 * activation) is the forward's own node, shared; the fuser stores it or
 * computes it again where that is cheaper. A realized tensor keeps what it
 * was computed from (its history), so y, or tensors between y and wrt, may
 * be realized before kiln_grad: an eager program (KILN_EAGER=1) is
 * differentiated the same way. A history reaches back over at most
 * KILN_GRAD_HISTORY_MB (default 1024) of data realized since (a loop
 * x = f(x) must not keep every x alive); kiln_grad reports a tensor whose
 * history was dropped instead of guessing.
 *
 * Conventions (PyTorch's where there is a choice): relu's derivative at 0
 * is 0, abs's at 0 is 0, sqrt's at 0 is inf; maximum and minimum split the
 * gradient evenly on ties; max, min, kiln_max_dims and kiln_min_dims (and
 * so amax-style reductions) split it evenly among tied elements, and max
 * pooling among the taps tied at the maximum of a window; sort, topk,
 * cummax and cummin send it to the positions their values came from; clamp
 * passes it inside the bounds and at them; where routes it by the
 * condition; floor, ceil, round, trunc, sign and the rounding divisions
 * have derivative 0; f16 and bf16 gradients are summed in f32 and rounded
 * once; nothing flows through integer or bool values (indices,
 * comparisons, casts to integers).
 * @{ */
/** Reverse-mode gradients of y with respect to wrt[0..n-1]: grads[i] is
 * the gradient of sum(y * dy) with respect to wrt[i], a new lazy tensor of
 * wrt[i]'s shape, dtype and device (the caller's handle). It is zeros where
 * y does not depend on wrt[i] (JAX's rule).
 * @at
 * @param y a floating tensor, pending or realized
 * @param dy the cotangent: y's shape, dtype and device; NULL when y has
 *        one element (then 1)
 * @param n the number of tensors in wrt
 * @param wrt floating tensors y was built from: leaves (weights, data) or
 *        intermediate tensors, pending or realized (one may appear twice)
 * @param grads receives n handles (NULL each on failure)
 * @return KILN_OK; KILN_ERR_ARG for NULL arguments, a NULL dy for a y of
 * more than one element, or a y computed from a tensor whose history was
 * dropped; KILN_ERR_DTYPE when y or a wrt is not floating; KILN_ERR_SHAPE
 * for a dy of another shape, dtype or device; an error tensor's own status
 * (errors are sticky); KILN_ERR_MEMORY. The message names the tensor. */
KILN_API kiln_status kiln_grad_at(const char *f, int l, kiln_tensor *y, kiln_tensor *dy, int n,
                                  kiln_tensor *const *wrt, kiln_tensor **grads);
/** The same value with no gradient flowing through it (torch's detach,
 * JAX's stop_gradient): kiln_grad treats it as a constant. A view: it costs
 * nothing.
 * @at
 * @param t the tensor
 * @return a new handle; an error tensor for a NULL or error t */
KILN_API kiln_tensor *kiln_detach_at(const char *f, int l, kiln_tensor *t);
/** @macros */
#define kiln_grad(...) kiln_grad_at(__FILE__, __LINE__, __VA_ARGS__)
/** @macros */
#define kiln_detach(...) kiln_detach_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- in-place updates ------------------------------------------------------ */
/** @name In-place updates
 * Training updates weights and optimizer state in place, step after step,
 * without growing memory; kiln keeps the semantics of values while doing so.
 * @{ */
/** Writes value into dst's storage: value is broadcast to dst's shape and
 * cast to its dtype (torch's copy_), computed first, then written.
 *
 * What sees what: a view of dst (realized, sharing its storage) sees the
 * new value, as in PyTorch, and so does the memory a kiln_from_buffer
 * tensor borrows. A pending tensor built on dst since dst was first
 * assigned (or made a parameter of an optimizer) keeps the value it was
 * built on: such tensors read dst through a snapshot, which is given a copy
 * of the old contents when something still holds it at the assignment
 * (release or realize what you no longer need before assigning, and no copy
 * is made). dst becomes data: kiln_grad sees no history behind it.
 *
 * A value over placeholders is not computed now: the assignment becomes
 * part of the function the next kiln_compile on this thread makes, which
 * performs it at every kiln_fn_run (dst's storage donated to the function,
 * as JAX's donate_argnums): the run computes its outputs and every
 * assigned value from the tensors as they are when the run starts, then
 * writes the values, in the order the assignments were made; nothing else
 * is written.
 * @at
 * @param dst a tensor with storage (a pending one is realized first); not a placeholder
 * @param value the new value, on dst's device; it may read dst
 * @return KILN_OK; the status of a value that cannot be computed;
 * KILN_ERR_SHAPE when value does not broadcast to dst; KILN_ERR_DEVICE for
 * two devices; KILN_ERR_ARG for NULL or placeholders; KILN_ERR_MEMORY. */
KILN_API kiln_status kiln_assign_at(const char *f, int l, kiln_tensor *dst, kiln_tensor *value);
/** @macros */
#define kiln_assign(...) kiln_assign_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- optimizers -------------------------------------------------------------- */
/** @name Optimizers
 * torch.optim's SGD, Adam and AdamW, with their semantics and the same
 * arithmetic (PyTorch 1.13's single-tensor forms). An optimizer holds its
 * parameters (they must have storage: a pending one is realized) and its
 * state (momentum buffers, Adam's first and second moments, made at the
 * first step); each kiln_optim_step updates them in place with kiln_assign.
 * @code
 * kiln_optim *opt = kiln_adamw(2, (kiln_tensor *[]){w, b}, 1e-3, 0.9, 0.999, 1e-8, 1e-2);
 * for (int step = 0; step < 100; step++) {
 *   kiln_scope_begin();
 *   kiln_tensor *loss = kiln_mse_loss(kiln_linear(x, w, b), y, "mean"), *g[2];
 *   kiln_grad(loss, NULL, 2, (kiln_tensor *[]){w, b}, g);
 *   kiln_realize_n(3, (kiln_tensor *[]){loss, g[0], g[1]});   // or let the step realize the gradients
 *   kiln_optim_step(opt, g);
 *   kiln_scope_end();
 * }
 * kiln_optim_free(opt);
 * @endcode
 * A step builds every update from the gradients (pending or realized),
 * realizes them all in one plan (the gradients' pending graphs with them:
 * backward and update fuse), then writes each parameter and state tensor.
 * The learning rate and the bias corrections are numbers in the update's
 * graph, launch arguments of its kernels: kiln_optim_set_lr each step (a
 * schedule) compiles nothing. Tensors built on a parameter before a step
 * keep the value they read (kiln_assign): realize or release them first,
 * or the step keeps a copy of the old parameters for them.
 * @{ */
typedef struct kiln_optim kiln_optim;   /**< an optimizer over a list of parameters */
/** torch.optim.SGD: g += weight_decay p; with momentum, buf = g at the
 * first step, else momentum buf + (1 - dampening) g, and g = buf (or
 * g + momentum buf with nesterov); p -= lr g.
 * @at
 * @param n,params the parameters: distinct floating tensors with storage (held by the optimizer)
 * @param lr,momentum,dampening,weight_decay,nesterov as torch.optim.SGD (its defaults: momentum 0, dampening 0,
 * weight_decay 0, nesterov 0; lr has none)
 * @return the optimizer, or NULL with kiln_last_error() naming the bad argument */
KILN_API kiln_optim *kiln_sgd_at(const char *f, int l, int n, kiln_tensor *const *params, double lr, double momentum,
                                 double dampening, double weight_decay, int nesterov);
/** torch.optim.Adam (L2 penalty: weight_decay p added to the gradient); torch's defaults are lr 1e-3, beta1 0.9,
 * beta2 0.999, eps 1e-8, weight_decay 0.
 * @at
 * @param n,params the parameters, as kiln_sgd_at
 * @param lr,beta1,beta2,eps,weight_decay as torch.optim.Adam
 * @return the optimizer, or NULL with kiln_last_error() naming the bad argument */
KILN_API kiln_optim *kiln_adam_at(const char *f, int l, int n, kiln_tensor *const *params, double lr, double beta1,
                                  double beta2, double eps, double weight_decay);
/** torch.optim.AdamW (decoupled weight decay: p *= 1 - lr weight_decay before Adam's update); torch's default
 * weight_decay is 1e-2.
 * @at
 * @param n,params the parameters, as kiln_sgd_at
 * @param lr,beta1,beta2,eps,weight_decay as torch.optim.AdamW
 * @return the optimizer, or NULL with kiln_last_error() naming the bad argument */
KILN_API kiln_optim *kiln_adamw_at(const char *f, int l, int n, kiln_tensor *const *params, double lr, double beta1,
                                   double beta2, double eps, double weight_decay);
/** One step: each parameter updated from its gradient (grads[i] for params[i], its shape and device; NULL leaves
 * that parameter as it is, as torch does a parameter without .grad). The gradients are read, not released.
 * @at
 * @param o the optimizer
 * @param grads one per parameter
 * @return KILN_OK; KILN_ERR_SHAPE for a gradient of another shape or device; a gradient's own status; KILN_ERR_ARG
 * for NULL; KILN_ERR_MEMORY (the parameters are then as before the step, or some updated) */
KILN_API kiln_status kiln_optim_step_at(const char *f, int l, kiln_optim *o, kiln_tensor *const *grads);
/** The learning rate of the next steps (a schedule): data the updates read, so a compiled step follows it too.
 * @param o the optimizer; NULL is fine
 * @param lr the new learning rate */
KILN_API void kiln_optim_set_lr(kiln_optim *o, double lr);
/** Frees o and its state; the parameters stay the caller's.
 * @param o the optimizer; NULL is fine */
KILN_API void kiln_optim_free(kiln_optim *o);
/** torch.nn.utils.clip_grad_norm_: the total norm of the gradients (the norm_type norm of their norms; inf: the
 * largest magnitude), and each gradient scaled by min(1, max_norm / (total + 1e-6)). grads[i] is replaced by the
 * scaled gradient, a new handle (the old one is released); all lazy.
 * @at
 * @param n,grads the gradients
 * @param max_norm the largest total norm kept
 * @param norm_type the norm's order (2 in torch's default)
 * @return the total norm (0-dim float32), or an error tensor */
KILN_API kiln_tensor *kiln_clip_grad_norm_at(const char *f, int l, int n, kiln_tensor **grads, double max_norm,
                                             double norm_type);
/** @macros */
#define kiln_sgd(...) kiln_sgd_at(__FILE__, __LINE__, __VA_ARGS__)
/** @macros */
#define kiln_adam(...) kiln_adam_at(__FILE__, __LINE__, __VA_ARGS__)
/** @macros */
#define kiln_adamw(...) kiln_adamw_at(__FILE__, __LINE__, __VA_ARGS__)
/** @macros */
#define kiln_optim_step(...) kiln_optim_step_at(__FILE__, __LINE__, __VA_ARGS__)
/** @macros */
#define kiln_clip_grad_norm(...) kiln_clip_grad_norm_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- compiled functions --------------------------------------------------- */
/** @name Compiled functions
 * The fast path for loops (like jax.jit or tinygrad's TinyJit): build a graph
 * over placeholders once, compile it once, then run it with new data.
 * @code
 * kiln_tensor *x = kiln_placeholder(KILN_F32, KILN_SHAPE(64, 784));
 * kiln_tensor *y = kiln_softmax(kiln_relu(kiln_linear(x, w, b)), -1);
 * kiln_fn *f = kiln_compile(1, &x, 1, &y);          // passes, fusion, compiling: once
 * kiln_fn_run(f, (kiln_tensor *[]){batch}, (kiln_tensor *[]){out});
 * kiln_fn_free(f);
 * @endcode
 * A run builds no graph and runs no pass: it checks the arguments, binds
 * their buffers and launches the kernels planned at compile time. Several
 * threads may run one function at once with different buffers.
 * @{ */
/** A compiled function: the plan of a graph over placeholders. */
typedef struct kiln_fn kiln_fn;
/** An input of a compiled function: a CPU tensor with a dtype and shape but
 * no data. Any op reading it builds a graph that only kiln_compile plans:
 * realizing such a graph, or reading its data, is KILN_ERR_ARG.
 * @at
 * @param dt the dtype
 * @param ndim,shape the shape; a dim of -1 is dynamic (KILN_DYN)
 * @handle KILN_ERR_ARG for a bad dtype or shape. */
KILN_API kiln_tensor *kiln_placeholder_at(const char *f, int l, kiln_dtype dt, int ndim, const int64_t *shape);
/** kiln_placeholder for an input on device dev: kiln_fn_run takes a tensor
 * on dev there, and the function's kernels run on dev with no copy (its
 * launches queue on the device's stream).
 * @at
 * @param dt the dtype
 * @param dev the device (cuda:0, ...)
 * @param ndim,shape the shape; a dim of -1 is dynamic (KILN_DYN)
 * @handle KILN_ERR_ARG for a bad dtype, shape or device; KILN_ERR_DEVICE
 * when CUDA cannot be used (the reason, as for kiln_to). */
KILN_API kiln_tensor *kiln_placeholder_on_at(const char *f, int l, kiln_dtype dt, kiln_device dev, int ndim,
                                             const int64_t *shape);
/** The size a dim given as -1 to kiln_placeholder reads as while the graph
 * is built. Such a dim is dynamic: it may change from call to call, and
 * every dynamic dim of one function has one size per call (a batch size).
 * A function with dynamic dims is planned for each size on the first call
 * with it. */
#define KILN_DYN 1000003
/** Plans the graph of outputs over the placeholders inputs, once: graph
 * passes, fusion, lowering and compiling of every kernel, and the buffers
 * of its intermediates. Tensors the graph captured that do not read a
 * placeholder (weights) are realized now and become constants of the
 * function. The handles stay the caller's.
 * @at
 * @param nin,inputs the placeholders, in the order kiln_fn_run takes them
 * @param nout,outputs what the function computes (at least one)
 * @return the function (free it with kiln_fn_free), or NULL with
 * kiln_last_error() set: an input that is not a placeholder (or given
 * twice), an output that reads a placeholder that is not an input, or an
 * op of the graph that failed (its own message and file:line, as at
 * realize). */
KILN_API kiln_fn *kiln_compile_at(const char *f, int l, int nin, kiln_tensor *const *inputs, int nout,
                         kiln_tensor *const *outputs);
/** Runs fn on new data.
 * @at
 * @param fn the function
 * @param inputs one tensor per placeholder, of its dtype, shape and device,
 * dense (an offset is fine); pending ones are realized first
 * @param outputs one slot per output: NULL receives a new handle (owned by
 * the current scope, like any op's result); a given realized tensor of the
 * output's dtype, shape and device receives the values, written in place
 * by the kernels when it is the value's own storage (a loop over
 * kiln_from_buffer outputs allocates nothing) and copied into otherwise
 * (CPU tensors)
 * @return KILN_OK; KILN_ERR_ARG naming the function (where it was
 * compiled), the argument and the mismatch; the status of a failed kernel
 * or allocation. */
KILN_API kiln_status kiln_fn_run_at(const char *f, int l, kiln_fn *fn, kiln_tensor *const *inputs, kiln_tensor **outputs);
/** Writes fn's plan: its steps (kernels, copies) with the slots each reads,
 * writes and frees, and for a device kernel its launch (grid, block and
 * range) at the planned size.
 * @param fn the function
 * @param out where the text goes
 * @param fmt KILN_FMT_TEXT or KILN_FMT_DOT (a Graphviz digraph)
 * @return KILN_OK, or KILN_ERR_ARG for a NULL fn or out. */
KILN_API kiln_status kiln_fn_dump(kiln_fn *fn, FILE *out, kiln_graph_format fmt);
/** Frees fn and what it holds (its constants, its kernels' plan).
 * @param fn the function; NULL is fine */
KILN_API void kiln_fn_free(kiln_fn *fn);
/** @macros */
#define kiln_placeholder(...) kiln_placeholder_at(__FILE__, __LINE__, __VA_ARGS__)
/** @macros */
#define kiln_placeholder_on(...) kiln_placeholder_on_at(__FILE__, __LINE__, __VA_ARGS__)
/** @macros */
#define kiln_compile(...) kiln_compile_at(__FILE__, __LINE__, __VA_ARGS__)
/** @macros */
#define kiln_fn_run(...) kiln_fn_run_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- devices ------------------------------------------------------------- */
/** t's value on dev, a lazy node like any op: realize copies it (host <->
 * GPU) where the graph needs it, and ops on the result run on dev. To t's
 * own device it is t (a new handle).
 * @at
 * @param t the tensor
 * @param dev the destination
 * @handle KILN_ERR_DEVICE ("to: CUDA not available: <reason>") for a CUDA
 * device that cannot be used, KILN_ERR_ARG for an invalid device. */
KILN_API kiln_tensor *kiln_to_at(const char *f, int l, kiln_tensor *t, kiln_device dev);
/** kiln_to_at(f, l, t, cpu): the way back before kiln_data.
 * @at
 * @param t the tensor
 * @handle as kiln_to_at. */
KILN_API kiln_tensor *kiln_cpu_at(const char *f, int l, kiln_tensor *t);
/** @name Device macros
 * @{ */
/** @macros */
#define kiln_to(...) kiln_to_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_cpu(...) kiln_cpu_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* ---- files and exchange --------------------------------------------------- */
/** @name NumPy's .npy files
 * kiln_save_npy writes t (realized; copied to the host from any device) to
 * path in NumPy's .npy format: a version 1.0 header, C order,
 * little-endian. bool, uint8, int8, int16, int32, int64, float16, float32
 * and float64 are NumPy's b1 u1 i1 i2 i4 i8 f2 f4 f8; bfloat16 has no NumPy
 * dtype and is refused (KILN_ERR_DTYPE): cast it first. The file is
 * written beside path and renamed over it, so tensors still mapping an old
 * file of that name keep their values. KILN_ERR_IO when it cannot be
 * written (nothing is left behind).
 * kiln_load_npy reads a .npy file (versions 1.0 to 3.0) as a CPU tensor.
 * C-ordered little-endian data is mapped and used in place, not copied: the
 * file must not be truncated or rewritten while a tensor reads it (as with
 * numpy.load(mmap_mode='r')). Fortran order and big-endian data are copied.
 * A bad file gives an error node (KILN_ERR_IO) whose message names the file
 * and what is wrong: not an npy file, unsupported version or dtype, header
 * too long, shape overflow, truncated data.
 * @{ */
/** Writes t to a .npy file.
 * @at
 * @param t the tensor, on any device
 * @param path the file, replaced if it exists
 * @return KILN_OK; t's status for an error node; KILN_ERR_ARG for NULL t or
 * path; KILN_ERR_DTYPE for bfloat16; KILN_ERR_IO when writing fails. */
KILN_API kiln_status kiln_save_npy_at(const char *f, int l, kiln_tensor *t, const char *path);
/** Reads a .npy file as a CPU tensor.
 * @at
 * @param path the file
 * @handle KILN_ERR_IO naming the file and the problem; KILN_ERR_ARG for a
 * NULL path; KILN_ERR_MEMORY. */
KILN_API kiln_tensor *kiln_load_npy_at(const char *f, int l, const char *path);
/** @} */
/** @name File macros
 * @{ */
/** @macros */
#define kiln_save_npy(...) kiln_save_npy_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_load_npy(...) kiln_load_npy_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/** @name DLPack
 * DLPack (the legacy DLManagedTensor of DLPack 0.6, which NumPy's
 * from_dlpack and torch.utils.dlpack accept; include <dlpack/dlpack.h> to
 * look inside one). kiln.h only declares the struct, so code that does not
 * use DLPack compiles without its header.
 * kiln_to_dlpack realizes t and returns a DLManagedTensor over its memory,
 * no copy: CPU or CUDA (after the device's queued work is done), kiln's
 * strides and byte offset, bool as DLPack 0.8's kDLBool (code 6, 8 bits),
 * bfloat16 as kDLBfloat. The caller owns it and must call its deleter once,
 * which drops kiln's hold on the memory (t may be released before). NULL
 * and the last error when t cannot be realized.
 * kiln_from_dlpack wraps m without a copy as a tensor on its device (CPU,
 * pinned host memory, CUDA), with any strides and byte offset: the memory
 * must stay unchanged while kiln may read it (writes show, as with
 * kiln_from_buffer). On success kiln owns m and calls its deleter once, when
 * its last reference to the memory goes. On error (an error node: NULL m,
 * more than KILN_MAX_DIMS dims, an unsupported dtype or device, misaligned
 * data) m stays the caller's.
 * @{ */
struct DLManagedTensor;
/** Lends t to another framework through DLPack.
 * @at
 * @param t the tensor, on the CPU or a CUDA device
 * @return a DLManagedTensor the caller owns until it calls its deleter;
 * NULL and the last error for a NULL t or one that cannot be realized. */
KILN_API struct DLManagedTensor *kiln_to_dlpack_at(const char *f, int l, kiln_tensor *t);
/** Wraps another framework's tensor without a copy.
 * @at
 * @param m the managed tensor; kiln's on success, still the caller's on error
 * @handle KILN_ERR_ARG for NULL m or data, a bad shape or misaligned data;
 * KILN_ERR_DTYPE for a dtype kiln lacks (complex, vector lanes, ...);
 * KILN_ERR_DEVICE for a device other than CPU, pinned host memory and a
 * usable CUDA device; KILN_ERR_SHAPE for strides that overflow. */
KILN_API kiln_tensor *kiln_from_dlpack_at(const char *f, int l, struct DLManagedTensor *m);
/** @} */
/** @name DLPack macros
 * @{ */
/** @macros */
#define kiln_to_dlpack(...) kiln_to_dlpack_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_from_dlpack(...) kiln_from_dlpack_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/** @name Checkpoints: safetensors files
 * The safetensors format (Hugging Face's; PyTorch, JAX and most model hubs
 * read and write it): an 8-byte little-endian header length, a JSON header
 * giving each tensor's dtype, shape and data_offsets (and an optional
 * "__metadata__" object of strings), then the tensors' raw little-endian
 * bytes. Every kiln dtype is one of the format's: BOOL U8 I8 I16 I32 I64 F16
 * BF16 F32 F64.
 *
 * kiln_save_safetensors realizes the tensors together, copies those on a
 * GPU to the host and writes them (a strided view in its own C order, as
 * its values read) to a new file beside path, flushed to the disk and then
 * renamed over path: a reader sees the old file or the new one, never a
 * part; a failed save leaves path as it was and nothing else behind;
 * tensors still mapping an old file of that name keep their values. The
 * header is padded to 8 bytes and the widest elements come first, so every
 * tensor's data is aligned to its element size.
 *
 * kiln_load_safetensors checks the whole header, then maps the file and
 * gives its tensors as CPU tensors that read the mapping in place (no copy;
 * a tensor whose data is not aligned to its element size, which neither
 * kiln nor the safetensors package writes, is copied). The mapping stays
 * while any tensor (or a view of one) reads it: the tensors may outlive
 * the kiln_safetensors that listed them, and the file may be deleted or
 * replaced meanwhile, but not truncated or rewritten in place. Writing into
 * a loaded tensor's storage changes private copies of its pages, never the
 * file. A bad file gives KILN_ERR_IO and a message naming the file and what
 * is wrong: a truncated file or header, a header length past the file or
 * over 100 MB, malformed JSON or an unexpected key, an unsupported dtype
 * (U16, U32, F8_E4M3, ...), more than KILN_MAX_DIMS dims, a shape whose size
 * overflows, offsets that do not hold the shape's bytes or run past the
 * data, overlapping tensors, data bytes no tensor covers, a name twice.
 * @{ */
/** A loaded file: its tensors and its metadata (kiln_load_safetensors).
 * The lists and strings are kiln's, valid until kiln_safetensors_free; the
 * tensors are handles of their own (see kiln_load_safetensors_at). */
typedef struct {
  int n;                       /**< the number of tensors */
  const char *const *names;    /**< n names (UTF-8), in the header's order */
  kiln_tensor *const *tensors; /**< n CPU tensors, tensors[i] named names[i] */
  int nmeta;                   /**< the number of __metadata__ entries */
  const char *const *meta;     /**< 2 * nmeta strings: a key, its value, the next key, ... */
  void *storage_;              /**< kiln's: the block that holds the lists and strings */
} kiln_safetensors;
/** Writes tensors to a safetensors file.
 * @at
 * @param path the file, replaced if it exists
 * @param n,names,tensors n tensors (any device and dtype) and their names:
 * distinct, UTF-8, none "__metadata__"
 * @param nmeta,meta nmeta entries of the header's __metadata__: meta holds
 * 2 * nmeta UTF-8 strings (a key, its value, the next key, ...); 0 and NULL
 * for none
 * @return KILN_OK; the status of a tensor that cannot be computed (its
 * op's message); KILN_ERR_ARG for a NULL path, list, name or tensor, a
 * negative count, a name or key given twice, a name "__metadata__", a
 * string that is not UTF-8; KILN_ERR_IO naming the file when it cannot be
 * written; KILN_ERR_MEMORY. */
KILN_API kiln_status kiln_save_safetensors_at(const char *f, int l, const char *path, int n, const char *const *names,
                                              kiln_tensor *const *tensors, int nmeta, const char *const *meta);
/** Reads a safetensors file.
 * @at
 * @param path the file
 * @param out where the file's tensors and metadata go; zeroed on failure.
 * Free its lists and strings with kiln_safetensors_free. Each tensor is a
 * new handle like any op's result: the current scope's, or outside a scope
 * the caller's to kiln_release; kiln_safetensors_free leaves them be.
 * @return KILN_OK; KILN_ERR_IO naming the file and the problem (and no
 * tensor made); KILN_ERR_ARG for a NULL path or out; KILN_ERR_MEMORY. */
KILN_API kiln_status kiln_load_safetensors_at(const char *f, int l, const char *path, kiln_safetensors *out);
/** A loaded tensor by its name (a linear search).
 * @at
 * @param st a loaded file
 * @param name the name
 * @return the handle st->tensors holds (not a new one); NULL with an error
 * set (kiln_last_error) when no tensor has that name or an argument is NULL. */
KILN_API kiln_tensor *kiln_safetensors_get_at(const char *f, int l, const kiln_safetensors *st, const char *name);
/** Frees st's lists and strings (not its tensors) and zeroes it.
 * @param st a loaded file, or one a failed load zeroed; NULL is fine */
KILN_API void kiln_safetensors_free(kiln_safetensors *st);
/** @} */
/** @name Checkpoint macros
 * @{ */
/** @macros */
#define kiln_save_safetensors(...) kiln_save_safetensors_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_load_safetensors(...) kiln_load_safetensors_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_safetensors_get(...) kiln_safetensors_get_at(__FILE__, __LINE__, __VA_ARGS__)
/** @} */

/* Info: valid on any non-error handle without realizing it. */
/** @name Info
 * Valid on any non-error handle without realizing it. On NULL they set an
 * error and return 0, NULL, -1, float32 or the CPU; an error node has a
 * shape but no meaningful one.
 * @{ */
/** @param t the tensor
 * @return its number of dims */
KILN_API int kiln_ndim(kiln_tensor *t);
/** @param t the tensor
 * @return its kiln_ndim sizes, valid while t lives */
KILN_API const int64_t *kiln_shape(kiln_tensor *t);
/** @param t the tensor
 * @param dim a dim; negative dims count from the end
 * @return its size, -1 (and an error set) for a dim out of range */
KILN_API int64_t kiln_size(kiln_tensor *t, int dim);   /* negative dims count from the end */
/** @param t the tensor
 * @return its number of elements */
KILN_API int64_t kiln_numel(kiln_tensor *t);
/** @param t the tensor
 * @return its dtype */
KILN_API kiln_dtype kiln_dtype_of(kiln_tensor *t);
/** @param t the tensor
 * @return the device it lives on (or will, once realized) */
KILN_API kiln_device kiln_device_of(kiln_tensor *t);
/** @} */

#ifdef __cplusplus
}
#endif
#endif
