/* hostplan.h: running a plan (runtime/inspect.h) on the host, kernel by
 * kernel in launch order, through the CPU back end. This is how the tests
 * check what a plan made for another target (rt_plan_graph(KILN_CUDA, ...))
 * computes without that device. */
#ifndef KILN_TEST_HOSTPLAN_H
#define KILN_TEST_HOSTPLAN_H

#include <stdbool.h>

#include "codegen_cpu/cpu.h"
#include "runtime/inspect.h"

/* Host storage of the nodes the plan's kernels stored. */
typedef struct {
  int n, cap;
  ir_node **node;
  void **data;
} tu_stored;

/* Runs a kernel some other way (a KS_GEMM through a model of cuBLASLt);
 * false: let the CPU back end run it. */
typedef bool (*tu_kernel_hook)(kernel *k, void **bufs, void *ctx);

/* Whether k is a matrix product (a KS_GEMM, possibly in batch loops). */
bool tu_has_gemm(const kernel *k);
/* Compiles k with the tests' own JIT and runs all of it. */
void tu_run_cpu(kernel *k, void *const *bufs);
/* Runs p's kernels in order; buffers they store land in *st (zeroed by the
 * caller, freed with tu_stored_free). */
void tu_run_plan(rt_graph_plan *p, tu_stored *st, tu_kernel_hook hook, void *ctx);
/* The data of node n: a buffer's own or what a kernel stored (aborts the
 * test when n was not stored yet). */
void *tu_stored_data(const tu_stored *st, ir_node *n);
void tu_stored_free(tu_stored *st);

#endif
