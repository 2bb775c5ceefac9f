/* cpu.h: the CPU back end: kernel IR -> LLVM IR (LLVM-C) -> O3 -> an object
 * file -> ORC LLJIT, each kernel's code under its own resource tracker. */
#ifndef KILN_CPU_H
#define KILN_CPU_H

#include "ir/kernel.h"

typedef void (*cpu_kernel_fn)(void *const *bufs, int64_t lo, int64_t hi);
typedef struct cpu_jit cpu_jit;
typedef struct cpu_code cpu_code;  /* one loaded kernel: its code and memory maps */

/* One JIT per process (owned by the runtime). NULL and *err (malloc'd) on
 * failure. The first call installs LLVM's fatal-error handler for the
 * process: LLVM still exits after a fatal error, but the message says it was
 * kiln compiling kernel k_... */
cpu_jit *cpu_jit_new(char **err);
/* Frees the JIT and every cpu_code still loaded in it. */
void cpu_jit_free(cpu_jit *j);
/* "x86_64-pc-linux-gnu sapphirerapids +avx512f,..." : part of cache keys. */
const char *cpu_jit_target(cpu_jit *j);
/* Compiles k (O3, then an object file for the host) and loads it. When obj
 * is not NULL the object file is appended to it (what cpu_jit_load takes
 * back); when llvm_ir is not NULL the optimised LLVM IR text. NULL and *err
 * (malloc'd: LLVM's message) on any failure, leaving the JIT usable. Two
 * loaded kernels may not share a name. Thread-compatible: the runtime
 * serialises calls. */
cpu_code *cpu_jit_compile(cpu_jit *j, kernel *k, ir_str *obj, ir_str *llvm_ir, char **err);
/* Loads an object file made by cpu_jit_compile for k in a JIT of the same
 * target (the GEMM drivers k calls are compiled first if the JIT has none);
 * name is its kernel's. NULL and *err (malloc'd) when the JIT rejects it. */
cpu_code *cpu_jit_load(cpu_jit *j, const kernel *k, const char *name, const void *obj, size_t len, char **err);
cpu_kernel_fn cpu_code_fn(const cpu_code *c);
size_t cpu_code_bytes(const cpu_code *c);   /* the size of its object file */
/* Removes c's code from its JIT and unmaps its memory. */
void cpu_code_free(cpu_code *c);

#endif
