/* rt.h: the runtime: one state object (options, allocator, thread pool,
 * JIT, kernel cache, statistics, random generator), buffers, and realize(),
 * the one function that walks frontend DAG -> passes -> codegen -> execution. */
#ifndef KILN_RT_H
#define KILN_RT_H

#include "ir/graph.h"

/* ---- options, read once from the environment ---------------------------- */
typedef struct {
  int debug;            /* KILN_DEBUG: 0 quiet, 1 kernels, 3 + kernel/LLVM IR, 4 + IR after each pass */
  int eager;            /* KILN_EAGER=1 or kiln_set_eager; read it with kiln_get_eager (atomic) */
  int num_threads;      /* KILN_NUM_THREADS, default: all cores */
  const char *passes;   /* KILN_PASSES: "-fuse,-simplify" switches passes off */
  int64_t max_pending;  /* nodes a pending graph may hold before it is realized (KILN_MAX_PENDING) */
  bool allow_tf32;      /* KILN_ALLOW_TF32=1: f32 matmuls on a GPU may round their inputs to TF32 */
  const char *cublaslt; /* KILN_CUBLASLT: the cuBLASLt library to dlopen, NULL for the default */
  bool validate;        /* KILN_VALIDATE=1: every device kernel is checked against the CPU back end */
  kiln_printoptions print;  /* kiln_set_printoptions; PyTorch's defaults; under print.c's lock */
  int dynamic;          /* KILN_DYNAMIC / kiln_set_dynamic: KILN_DYNAMIC_OFF, _ON or _AUTO (default); atomic */
  bool check_handles;   /* KILN_CHECK_HANDLES=1 (default in Debug builds): freed nodes are quarantined */
  int64_t kernel_cache_bytes;  /* KILN_KERNEL_CACHE_MB: compiled CPU code kept in memory */
  bool disk_cache;      /* KILN_CACHE (default 1): compiled kernels kept in the disk cache */
  int64_t disk_cache_bytes;    /* KILN_CACHE_MAX_MB: the disk cache's size budget */
  int64_t grad_history_bytes;  /* KILN_GRAD_HISTORY_MB: how far back a realized tensor's history reaches */
} rt_options;
rt_options *rt_opts(void);

/* ---- buffers ------------------------------------------------------------ */
struct rt_buffer {
  int refs;
  void *data;
  size_t bytes;
  kiln_device device;
  bool borrowed;        /* memory kiln did not allocate (kiln_from_buffer, a mapped
                           .npy file, a DLPack tensor): never freed by kiln */
  void (*on_release)(void *ctx);  /* borrowed: tells the owner kiln is done with it */
  void *release_ctx;
  struct rt_buffer *snapshot;     /* the one rt_buffer_snapshot gives now (not a reference) */
};
/* 64-byte aligned; freed blocks are kept by size class and reused, so a
 * fresh output does not pay page faults again. NULL when out of memory. */
rt_buffer *rt_buffer_alloc(size_t bytes);
/* The size classes of the caching allocators (host and device): 2^k and
 * 1.5 * 2^k bytes, at least 64. rt_size_class: the smallest class that
 * holds bytes, -1 when none does. */
#define RT_NUM_CLASSES 128
int rt_size_class(size_t bytes);
size_t rt_class_size(int cls);
rt_buffer *rt_buffer_borrow(void *data, size_t bytes);
/* Borrowed memory on dev whose owner must hear when kiln is done with it:
 * on_release(ctx) runs once, when the last reference goes, after the
 * device's queued work (which may still read it). NULL when out of memory. */
rt_buffer *rt_buffer_lend(void *data, size_t bytes, kiln_device dev, void (*on_release)(void *ctx), void *ctx);
void rt_buffer_retain(rt_buffer *b);
void rt_buffer_release(rt_buffer *b);
/* Value semantics for storage kiln_assign overwrites: a pending graph that
 * reads an assignable tensor reads it through a snapshot of its storage,
 * one shared by every such reader since the last assignment, which reads
 * b's memory (the caller's reference). Before b is overwritten,
 * rt_buffer_preserve gives that snapshot a copy of the old contents when
 * anything still holds it; the next readers get a new one. NULL / false
 * when out of memory. */
rt_buffer *rt_buffer_snapshot(rt_buffer *b);
kiln_status rt_buffer_preserve(rt_buffer *b);
/* Copies a view of src into a view of dst (element strides and offsets,
 * es bytes an element), on the host, or on a device through the host (its
 * views contiguous); views of one buffer go through a dense copy. A
 * device's error, or KILN_ERR_MEMORY, with the last error set. */
kiln_status rt_copy_view(rt_buffer *dst, const int64_t *dst_strides, int64_t dst_offset, rt_buffer *src,
                         const int64_t *src_strides, int64_t src_offset, size_t es, int ndim, const int64_t *shape);
/* The storage a realized view of b shares: b's origin while b is a
 * snapshot not yet preserved (a view shares its tensor's storage and sees
 * its assignments), else b. A new reference. */
rt_buffer *rt_buffer_shared(rt_buffer *b);
/* Frees every cached block (kiln_shutdown). Live buffers are untouched. */
void rt_buffer_cache_free(void);
typedef struct {
  size_t live_bytes;    /* bytes of blocks handed out and not yet released */
  size_t cached_bytes;  /* bytes of released blocks kept for reuse */
  size_t peak_bytes;    /* highest live_bytes seen */
} rt_alloc_stats;
rt_alloc_stats rt_buffer_stats(void);
void rt_buffer_reset_peak(void);   /* peak = what is live now */

/* ---- thread pool -------------------------------------------------------- */
typedef void (*rt_task_fn)(void *ctx, int64_t lo, int64_t hi);
/* Runs fn over [0, n) split into at most num_threads contiguous chunks of at
 * least min_chunk; the caller works too; returns when all chunks are done.
 * Work of one chunk runs on the caller with no synchronisation. Not
 * reentrant: a nested call, or one from a second thread while the pool is
 * busy, runs serially on its caller. */
void rt_parallel_for(int64_t n, int64_t min_chunk, rt_task_fn fn, void *ctx);
/* Joins the workers (kiln_shutdown); a later rt_parallel_for restarts them. */
void rt_pool_shutdown(void);

/* ---- statistics and random state ---------------------------------------- */
/* The counters; every thread adds to them with rt_count (atomic). */
kiln_stats_t *rt_stats_mut(void);
static inline void rt_count(uint64_t *counter, uint64_t n) { __atomic_add_fetch(counter, n, __ATOMIC_RELAXED); }
/* Reserves n counters of the global Philox stream: returns the seed and the
 * offset of the first. */
void rt_rng_take(uint64_t n, uint64_t *seed, uint64_t *offset);
void rt_rng_seed(uint64_t seed);

/* ---- CUDA presence (dlopen of libcuda.so.1; never linked) --------------- */
/* Number of CUDA devices; 0 with a reason in why when none can be used. */
int rt_cuda_count(char *why, size_t why_len);
/* A driver API symbol ("cuLaunchKernel"), NULL when no driver is loaded. */
void *rt_cuda_sym(const char *name);
void rt_cuda_shutdown(void);   /* dlcloses the driver (kiln_shutdown) */

/* ---- realize ------------------------------------------------------------ */
/* Where a launch's code came from (statistics, KILN_DEBUG=1). */
typedef enum { RT_COMPILED, RT_MEMORY, RT_DISK } rt_origin;
/* Computes every node in nodes (they become BUFFERs). On failure returns the
 * status and sets the thread's last error (ir_error_set). */
kiln_status rt_realize(int n, ir_node *const *nodes);
/* Drops every plan realize keeps (their kernels stay cached): the next
 * realize of any graph plans it again (shutdown; tests of the planning path). */
void rt_plans_forget(void);
void rt_shutdown(void);

#endif
