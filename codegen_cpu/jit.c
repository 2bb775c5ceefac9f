/* jit.c: the CPU JIT. One ORC LLJIT per process (host target, libm and the
 * process's symbols resolvable), one target machine for the O3 pipeline, and
 * per kernel: emit a module (emit.c), verify, optimise, add, look up. */
#include "codegen_cpu/cpu.h"
#include "codegen_cpu/cpu_impl.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char name[32];
  cpu_kernel_fn fn;
} jit_kernel;

struct cpu_jit {
  LLVMOrcLLJITRef jit;
  LLVMTargetMachineRef tm;   /* the O3 pipeline's cost models (the LLJIT has its own for codegen) */
  char *cpu, *features;      /* LLVM-allocated host CPU name and feature string */
  char *target;              /* "triple cpu features", part of cache keys */
  jit_kernel *kernels;       /* names already added (kernels and GEMM drivers): equal names are equal code */
  int nkernels, cap;
};

static char *dup_str(const char *s) {
  char *d = malloc(strlen(s) + 1);
  IR_ASSERT(d);
  return strcpy(d, s);
}

/* Consumes e; returns a malloc'd "what: message". */
static char *error_text(const char *what, LLVMErrorRef e) {
  char *msg = LLVMGetErrorMessage(e);
  ir_str b = {0};
  ir_str_printf(&b, "%s: %s", what, msg);
  LLVMDisposeErrorMessage(msg);
  return b.s;
}

static cpu_jit *jit_fail(cpu_jit *j, char **err, char *msg) {
  if (err) *err = msg;
  else free(msg);
  cpu_jit_free(j);
  return NULL;
}

/* libm for the f64 paths as absolute symbols (so it resolves even if the
 * linker dropped libm), then the whole process for what LLVM itself emits
 * (memset, memcpy, sincos, ...). */
static LLVMErrorRef add_symbols(cpu_jit *j) {
  LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(j->jit);
  LLVMOrcCSymbolMapPair pairs[32];
  size_t n = 0;
  for (const cpu_libm_sym *s = cpu_libm_syms; s->name; s++) {
    IR_ASSERT(n < 32);
    pairs[n].Name = LLVMOrcLLJITMangleAndIntern(j->jit, s->name);
    pairs[n].Sym = (LLVMJITEvaluatedSymbol){
        (LLVMOrcExecutorAddress)(uintptr_t)s->addr,
        {LLVMJITSymbolGenericFlagsExported | LLVMJITSymbolGenericFlagsCallable, 0}};
    n++;
  }
  LLVMErrorRef e = LLVMOrcJITDylibDefine(jd, LLVMOrcAbsoluteSymbols(pairs, n));
  if (e) return e;
  LLVMOrcDefinitionGeneratorRef gen;
  e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(j->jit),
                                                           NULL, NULL);
  if (e) return e;
  LLVMOrcJITDylibAddGenerator(jd, gen);
  return NULL;
}

static char *make_target_machine(cpu_jit *j) {
  const char *triple = LLVMOrcLLJITGetTripleString(j->jit);
  LLVMTargetRef t;
  char *msg = NULL;
  if (LLVMGetTargetFromTriple(triple, &t, &msg)) {
    char *r = dup_str(msg ? msg : "no target");
    LLVMDisposeMessage(msg);
    return r;
  }
  j->cpu = LLVMGetHostCPUName();
  j->features = LLVMGetHostCPUFeatures();
  j->tm = LLVMCreateTargetMachine(t, triple, j->cpu, j->features, LLVMCodeGenLevelAggressive,
                                  LLVMRelocDefault, LLVMCodeModelJITDefault);
  ir_str b = {0};
  ir_str_printf(&b, "%s %s %s", triple, j->cpu, j->features);
  j->target = b.s;
  return NULL;
}

cpu_jit *cpu_jit_new(char **err) {
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  cpu_jit *j = calloc(1, sizeof *j);
  IR_ASSERT(j);
  LLVMOrcJITTargetMachineBuilderRef jtmb;
  LLVMErrorRef e = LLVMOrcJITTargetMachineBuilderDetectHost(&jtmb);
  if (e) return jit_fail(j, err, error_text("detecting the host", e));
  LLVMOrcLLJITBuilderRef lb = LLVMOrcCreateLLJITBuilder();
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(lb, jtmb);
  e = LLVMOrcCreateLLJIT(&j->jit, lb);
  if (e) return jit_fail(j, err, error_text("creating the LLJIT", e));
  e = add_symbols(j);
  if (e) return jit_fail(j, err, error_text("adding symbols", e));
  char *msg = make_target_machine(j);
  if (msg) return jit_fail(j, err, msg);
  return j;
}

void cpu_jit_free(cpu_jit *j) {
  if (!j) return;
  if (j->jit) {
    LLVMErrorRef e = LLVMOrcDisposeLLJIT(j->jit);
    if (e) LLVMConsumeError(e);
  }
  if (j->tm) LLVMDisposeTargetMachine(j->tm);
  LLVMDisposeMessage(j->cpu);
  LLVMDisposeMessage(j->features);
  free(j->target);
  free(j->kernels);
  free(j);
}

const char *cpu_jit_target(cpu_jit *j) { return j->target; }

static cpu_kernel_fn find_kernel(cpu_jit *j, const char *name) {
  for (int i = 0; i < j->nkernels; i++)
    if (!strcmp(j->kernels[i].name, name)) return j->kernels[i].fn;
  return NULL;
}

static void remember_kernel(cpu_jit *j, const char *name, cpu_kernel_fn fn) {
  if (j->nkernels == j->cap) {
    j->cap = j->cap ? 2 * j->cap : 16;
    j->kernels = realloc(j->kernels, (size_t)j->cap * sizeof *j->kernels);
    IR_ASSERT(j->kernels);
  }
  jit_kernel *r = &j->kernels[j->nkernels++];
  snprintf(r->name, sizeof r->name, "%s", name);
  r->fn = fn;
}

/* Verify, then the O3 pipeline with both vectorizers. NULL or a malloc'd message. */
static char *optimise(cpu_jit *j, LLVMModuleRef m) {
  char *msg = NULL;
  if (LLVMVerifyModule(m, LLVMReturnStatusAction, &msg)) {
    ir_str b = {0};
    ir_str_printf(&b, "cpu codegen produced invalid LLVM IR: %s", msg);
    LLVMDisposeMessage(msg);
    return b.s;
  }
  LLVMDisposeMessage(msg);  /* allocated even on success */
  LLVMPassBuilderOptionsRef o = LLVMCreatePassBuilderOptions();
  LLVMPassBuilderOptionsSetLoopVectorization(o, 1);
  LLVMPassBuilderOptionsSetSLPVectorization(o, 1);
  LLVMPassBuilderOptionsSetLoopInterleaving(o, 1);
  LLVMPassBuilderOptionsSetLoopUnrolling(o, 1);
  LLVMErrorRef e = LLVMRunPasses(m, "default<O3>", j->tm, o);
  LLVMDisposePassBuilderOptions(o);
  return e ? error_text("LLVM optimisation", e) : NULL;
}

static void append_ir(ir_str *b, LLVMModuleRef m) {
  char *s = LLVMPrintModuleToString(m);
  ir_str_printf(b, "%s", s);
  LLVMDisposeMessage(s);
}

static cpu_kernel_fn add_and_lookup(cpu_jit *j, LLVMOrcThreadSafeModuleRef tsm, const char *name,
                                    char **err) {
  LLVMErrorRef e = LLVMOrcLLJITAddLLVMIRModule(j->jit, LLVMOrcLLJITGetMainJITDylib(j->jit), tsm);
  if (e) {
    *err = error_text("adding a kernel to the JIT", e);
    return NULL;
  }
  LLVMOrcExecutorAddress addr = 0;
  e = LLVMOrcLLJITLookup(j->jit, &addr, name);
  if (e) {
    *err = error_text("compiling a kernel", e);
    return NULL;
  }
  cpu_kernel_fn fn = (cpu_kernel_fn)(uintptr_t)addr;
  remember_kernel(j, name, fn);
  return fn;
}

/* Optimises m (tsc's), appends its IR to llvm_ir (when not NULL) and adds
 * it, returning the address of `name`; when the JIT already has it (known),
 * only the IR text was wanted and known is returned. */
static cpu_kernel_fn add_module(cpu_jit *j, LLVMOrcThreadSafeContextRef tsc, LLVMModuleRef m, const char *name,
                                ir_str *llvm_ir, cpu_kernel_fn known, char **err) {
  char *msg = optimise(j, m);
  if (!msg && llvm_ir) append_ir(llvm_ir, m);
  if (msg || known) {
    LLVMDisposeModule(m);
    LLVMOrcDisposeThreadSafeContext(tsc);
    if (msg) *err = msg;
    return msg ? NULL : known;
  }
  LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(m, tsc);
  LLVMOrcDisposeThreadSafeContext(tsc);  /* the module keeps its context alive */
  return add_and_lookup(j, tsm, name, err);
}

typedef struct {
  cpu_jit *j;
  ir_str *llvm_ir;
} driver_job;

/* A GEMM driver (gemm.c) the JIT does not hold yet: compiled once and kept
 * for the JIT's life, so every later GEMM of its dtypes, whatever its
 * shape, only links against it. (Its address is never called as a kernel.) */
static char *add_driver(void *job, const cpu_gemm_driver *d) {
  driver_job *b = job;
  cpu_jit *j = b->j;
  if (find_kernel(j, d->name)) return NULL;
  LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
  LLVMModuleRef m = cpu_gemm_driver_module(LLVMOrcThreadSafeContextGetContext(tsc), d,
                                           LLVMOrcLLJITGetTripleString(j->jit),
                                           LLVMOrcLLJITGetDataLayoutStr(j->jit), j->cpu, j->features);
  char *err = NULL;
  return add_module(j, tsc, m, d->name, b->llvm_ir, NULL, &err) ? NULL : err;
}

cpu_kernel_fn cpu_jit_compile(cpu_jit *j, kernel *k, ir_str *llvm_ir, char **err) {
  if (!k->name[0]) {  /* k_print names the kernel */
    ir_str text = {0};
    k_print(&text, k);
    ir_str_free(&text);
  }
  cpu_kernel_fn fn = find_kernel(j, k->name);
  if (fn && !llvm_ir) return fn;
  char *msg = fn ? NULL : cpu_gemm_each_driver(k, add_driver, &(driver_job){j, llvm_ir});
  if (msg) {
    *err = msg;
    return NULL;
  }
  LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
  LLVMModuleRef m = cpu_emit_module(LLVMOrcThreadSafeContextGetContext(tsc), k,
                                    LLVMOrcLLJITGetTripleString(j->jit),
                                    LLVMOrcLLJITGetDataLayoutStr(j->jit), j->cpu, j->features);
  return add_module(j, tsc, m, k->name, llvm_ir, fn, err);
}
