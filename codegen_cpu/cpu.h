/* cpu.h: the CPU back end: kernel IR -> LLVM IR (LLVM-C) -> O3 -> ORC LLJIT. */
#ifndef KILN_CPU_H
#define KILN_CPU_H

#include "ir/kernel.h"

typedef void (*cpu_kernel_fn)(void *const *bufs, int64_t lo, int64_t hi);
typedef struct cpu_jit cpu_jit;

/* One JIT per process (owned by the runtime). NULL and *err (malloc'd) on failure. */
cpu_jit *cpu_jit_new(char **err);
void cpu_jit_free(cpu_jit *j);
/* "x86_64-pc-linux-gnu sapphirerapids +avx512f,..." : part of cache keys. */
const char *cpu_jit_target(cpu_jit *j);
/* Compiles k; returns its entry point, valid until cpu_jit_free. When llvm_ir
 * is not NULL the optimised LLVM IR text is appended to it. NULL and *err
 * (malloc'd) on failure. Thread-compatible: the runtime serialises calls. */
cpu_kernel_fn cpu_jit_compile(cpu_jit *j, kernel *k, ir_str *llvm_ir, char **err);

#endif
