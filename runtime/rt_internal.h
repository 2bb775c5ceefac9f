/* rt_internal.h: declarations shared between runtime files only. */
#ifndef KILN_RT_INTERNAL_H
#define KILN_RT_INTERNAL_H

#include "codegen_cpu/cpu.h"
#include "ir/kernel.h"
#include "passes/pass.h"
#include "runtime/rt.h"

/* ---- the in-memory kernel cache (cache.c) ----
 * Compiled CPU kernels are kept by key (k_key's bytes; the JIT's target is
 * constant per process) within a budget of code bytes (KILN_KERNEL_CACHE_MB,
 * measured as the kernels' object file sizes); past it the least recently
 * used kernels are evicted, which unmaps their code. A kernel is only
 * evicted while nobody holds it: rt_kernel_get returns it held once, and
 * whoever keeps the code beyond one launch (a compiled function that replays
 * its kernels, say) takes a hold of its own with rt_kernel_retain and gives
 * it back with rt_kernel_release. The entry point of a held kernel stays
 * valid until its last release; a release may evict it (and others) when
 * the cache is over budget. kiln_shutdown frees every kernel, held or not:
 * holders must let go before it. All of these lock the cache briefly; a
 * miss compiles with it unlocked (misses wait for each other, not hits). */
typedef struct rt_kernel rt_kernel;
/* The compiled kernel for k (whose k_key is `key`), held once: found in
 * memory, loaded from the disk cache or compiled (*origin says which). NULL
 * with the last error set (KILN_ERR_COMPILE: the kernel's name and LLVM's
 * message) when compiling fails; the cache stays usable. */
rt_kernel *rt_kernel_get(kernel *k, const ir_str *key, int debug, rt_origin *origin);
cpu_kernel_fn rt_kernel_fn(const rt_kernel *e);
size_t rt_kernel_bytes(const rt_kernel *e);   /* its object code's size */
void rt_kernel_retain(rt_kernel *e);
void rt_kernel_release(rt_kernel *e);   /* NULL is fine */
/* Object bytes of the kernels held in memory now (kiln_stats().code_bytes). */
uint64_t rt_kernel_cache_bytes(void);
/* How a compiled kernel's range is cut for the thread pool: decided once
 * per plan (rt_split_of walks the kernel), not on every launch. */
typedef struct {
  int64_t extent;      /* of the parallel loop; 0: the kernel runs as one piece */
  int64_t min_chunk;   /* iterations per chunk at least */
} rt_split;
rt_split rt_split_of(const kernel *k);
/* Runs a compiled kernel over its whole range, cut as sp says (exec.c). */
void rt_execute(rt_split sp, cpu_kernel_fn fn, void *const *bufs);

/* ---- KILN_VALIDATE (validate.c) ---- */
/* After device kernel k ran with launch arguments args (k->args, or the
 * values a plan bound): k run again by the CPU back end on host copies of
 * its inputs with the same arguments, and each output compared with the
 * device's. KILN_OK when
 * they agree; KILN_ERR_COMPILE (a miscompile) with the kernel, the output,
 * the first differing element and both values in the last error. out and
 * inputs as a plan binds them (outputs, then the inputs' buffers in param order). */
kiln_status rt_validate(kernel *k, const int64_t *args, rt_buffer **out, rt_buffer **inputs, int debug);
/* The first of n elements of dtype dt where got and want differ beyond
 * validation's tolerance, -1 when none: integers and bool exactly; floats
 * within a few units of their precision (relative, with an absolute floor
 * near zero), infinities exactly, nan matching nan. */
int64_t rt_validate_diff(kiln_dtype dt, const void *got, const void *want, int64_t n);
void rt_cache_shutdown(void);

/* ---- executables (exec.c): what a realize launches, decided once ---- */
typedef struct rt_exec rt_exec;
/* Where a target's value is after a run: a view of slot's buffer (slot -1:
 * an empty tensor without one). */
typedef struct {
  int slot;
  int64_t strides[KILN_MAX_DIMS];
  int64_t offset;
} rt_exec_view;
/* Plans the pending graph nodes[0..n) (sources first, as ir_graph_collect
 * gives it) for the targets at positions tpos[0..nt): the passes run on a
 * copy, so the graph itself never changes, and every group is lowered and
 * compiled in launch order with nothing run. Slots 0..nleaves-1 are the
 * given leaves (BUFFER nodes of the graph, bound at run time). NULL with *st
 * and the last error set when the graph is invalid or a kernel cannot be
 * compiled. */
rt_exec *rt_exec_build(int n, ir_node *const *nodes, int nt, const int *tpos, int nleaves, ir_node *const *leaves,
                       const pass_config *cfg, kiln_status *st);
void rt_exec_free(rt_exec *p);
/* Runs p: slots[0..nleaves) hold the leaves' buffers (NULL for an empty
 * tensor without one), the rest NULL or a buffer the caller gives for that
 * output. On KILN_OK the targets' slots, and those hold[] marks (NULL: none),
 * hold their buffers (references for the caller) and every other non-leaf
 * slot is NULL; on failure all non-leaf slots are NULL. fresh: the first
 * run after planning (its compiles are not cache hits). values: a graph of
 * the planned structure whose values the launch arguments take (positions
 * as planned; rt_exec_values_match must hold), NULL: the planned ones. */
kiln_status rt_exec_run(const rt_exec *p, rt_buffer **slots, const bool *hold, bool fresh, int debug,
                        ir_node *const *values);
/* Whether p serves nodes (a graph of its structure, positions as planned):
 * values p binds as launch arguments may differ, the others (those passes
 * decided on, those a step cannot bind) must equal the planned ones. */
bool rt_exec_values_match(const rt_exec *p, ir_node *const *nodes);
/* Where the value of the planned graph's node i is after a run (slot -1:
 * no step stores it; it stays pending). */
const rt_exec_view *rt_exec_node(const rt_exec *p, int i);
/* The steps and slots of p, as text or a Graphviz digraph (kiln_fn_dump). */
void rt_exec_print(ir_str *b, const rt_exec *p, bool dot, const char *where);
/* Bytes of compiled CPU code p holds (its kernels stay in memory while it lives). */
size_t rt_exec_code_bytes(const rt_exec *p);
int rt_exec_nslots(const rt_exec *p);
/* KILN_DEBUG=2's line on stderr for p, the plan for `where` ("softmax at
 * demo.c:14"): made in made_ms (passes, lowering, compiles), or, with
 * made_ms < 0, found among the plans made before. */
void rt_exec_debug(const rt_exec *p, const char *where, double made_ms);
/* CLOCK_MONOTONIC in milliseconds. */
double rt_now_ms(void);

/* ---- automatic dynamic shapes (dynamic.c) ---- */
/* Whether the structure whose shape-generic key hash is `structure` runs its
 * generic variant, given the key hash of its shape-specialised kernel this
 * time (`shape`; 0 when the caller has not lowered one). The first shape a
 * structure is seen with runs specialised; from the second on, generic. */
bool rt_dynamic_generic(uint64_t structure, uint64_t shape);
void rt_dynamic_shutdown(void);

/* ---- the disk cache (diskcache.c), shared by the back ends ----
 * Entries are keyed by an opaque byte string the back end builds (for the
 * CPU: kiln's and LLVM's versions, the target, k_key; for CUDA: NVRTC's
 * version, the arch, the source), stored whole in the entry and compared on
 * load. kind names the back end's entries ("cpu", "cuda-sm_90-13.0"): the
 * file is <dir>/<kind>-<hash of key>.bin. KILN_CACHE=0 turns loads and
 * stores off. */
typedef struct {
  bool hit;             /* loaded from the disk cache */
  bool dropped;         /* an entry was found but failed verification: recompiled */
  int warnings;         /* cache problems (printed on stderr at KILN_DEBUG>=1; never failures) */
} rt_disk_info;
/* $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln, in buf
 * (n > 3999); false ("") when none is set, or when the directory is longer
 * than 3,999 bytes (refused with a warning: no disk cache). */
bool rt_disk_dir(char *buf, size_t n);
/* Appends the payload of (kind, key) to out and sets info->hit: true on a
 * hit. An entry that is not a regular file, larger than any entry, or fails
 * verification is reported (info->dropped, a warning) and not used; so is
 * one that cannot be read for want of memory. A failed key (out of memory
 * while it was built) finds nothing. */
bool rt_disk_load(const char *kind, const ir_str *key, ir_str *out, rt_disk_info *info);
/* Stores the payload atomically; problems (no directory, unwritable) are
 * warnings. A failed key stores nothing. */
void rt_disk_store(const char *kind, const ir_str *key, const void *data, size_t len, rt_disk_info *info);
/* Reports a cache problem about path (counted; printed at KILN_DEBUG>=1). */
void rt_disk_warn(rt_disk_info *info, const char *path, const char *what);

#endif
