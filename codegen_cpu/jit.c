/* jit.c: the CPU JIT. One ORC LLJIT per process (host target, libm and the
 * process's symbols resolvable) and its target machines; per kernel: emit a
 * module (emit.c), verify, optimise, emit an object file, and load it under
 * its own resource tracker, so that freeing the kernel frees its code.
 * Threads: one compile or load at a time (build_mu: the target machines
 * and the drivers are shared), and ORC's adds, lookups and removals under
 * mu, so that code is freed on any thread while another thread compiles. */
#include "codegen_cpu/cpu.h"
#include "codegen_cpu/cpu_impl.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Error.h>
#include <llvm-c/ErrorHandling.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cpu_code {
  cpu_code *prev, *next;     /* the JIT's loaded code (cpu_jit_free frees what is left) */
  cpu_jit *jit;
  LLVMOrcResourceTrackerRef rt;
  cpu_kernel_fn fn;
  size_t bytes;              /* size of the object file it was loaded from */
};

struct cpu_jit {
  pthread_mutex_t build_mu;  /* cpu_jit_compile, cpu_jit_load */
  pthread_mutex_t mu;        /* ORC's dylib, the list of loaded code, session_err */
  LLVMOrcLLJITRef jit;
  LLVMTargetMachineRef tm;   /* the O3 pipeline's cost models */
  /* Emits the object files: what the LLJIT itself would generate code with
   * (host CPU and features, the default codegen level, PIC and the small
   * code model that JITLink links), so that loading an object is loading
   * what adding the IR would have compiled. */
  LLVMTargetMachineRef emit_tm;
  char *cpu, *features;      /* LLVM-allocated host CPU name and feature string */
  char *target;              /* "triple cpu features", part of cache keys */
  ir_str session_err;        /* what ORC reported since the last compile (materialisation failures) */
  cpu_code live;             /* sentinel of the list of loaded code */
  struct { char name[40]; cpu_code *code; } *drivers;   /* GEMM drivers (gemm.c): kept for the JIT's life */
  int ndrivers;
};

/* The kernel this thread is compiling, for LLVM's fatal-error handler. */
static _Thread_local const char *compiling;

/* LLVM exits the process after a fatal error; the handler cannot return to
 * kiln, but it can say that it was kiln's JIT and which kernel. */
static void fatal_handler(const char *reason) {
  fprintf(stderr, "kiln: LLVM fatal error while compiling kernel %s: %s\n", compiling ? compiling : "(none)",
          reason);
}

static void install_fatal_handler(void) { LLVMInstallFatalErrorHandler(fatal_handler); }

/* Consumes e; returns a malloc'd "what: message". */
static char *error_text(const char *what, LLVMErrorRef e) {
  char *msg = LLVMGetErrorMessage(e);
  ir_str b = {0};
  ir_str_printf(&b, "%s: %s", what, msg);
  LLVMDisposeErrorMessage(msg);
  return b.s;
}

/* ORC's session errors (a failed link, "Cannot allocate memory") would go to
 * stderr; kept instead for the failing compile's message. */
static void report_session_error(void *ctx, LLVMErrorRef e) {
  cpu_jit *j = ctx;
  char *msg = LLVMGetErrorMessage(e);
  ir_str_printf(&j->session_err, "%s%s", j->session_err.len ? "; " : "", msg);
  LLVMDisposeErrorMessage(msg);
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

/* False with *msg (malloc'd, or NULL out of memory: the target string is
 * part of every cache key, so a JIT without it is no JIT). */
static bool make_target_machine(cpu_jit *j, char **msg) {
  const char *triple = LLVMOrcLLJITGetTripleString(j->jit);
  LLVMTargetRef t;
  char *why = NULL;
  if (LLVMGetTargetFromTriple(triple, &t, &why)) {
    *msg = ir_strdup(why ? why : "no target");
    LLVMDisposeMessage(why);
    return false;
  }
  j->cpu = LLVMGetHostCPUName();
  j->features = LLVMGetHostCPUFeatures();
  j->tm = LLVMCreateTargetMachine(t, triple, j->cpu, j->features, LLVMCodeGenLevelAggressive,
                                  LLVMRelocDefault, LLVMCodeModelJITDefault);
  j->emit_tm = LLVMCreateTargetMachine(t, triple, j->cpu, j->features, LLVMCodeGenLevelDefault, LLVMRelocPIC,
                                       LLVMCodeModelSmall);
  ir_str b = {0};
  ir_str_printf(&b, "%s %s %s", triple, j->cpu, j->features);
  if (b.failed) ir_str_free(&b);
  j->target = b.s;
  *msg = NULL;
  return j->target != NULL;
}

cpu_jit *cpu_jit_new(char **err) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, install_fatal_handler);
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  cpu_jit *j = ir_calloc(1, sizeof *j);
  if (!j) return jit_fail(NULL, err, NULL);
  pthread_mutex_init(&j->build_mu, NULL);
  pthread_mutex_init(&j->mu, NULL);
  j->live.prev = j->live.next = &j->live;
  LLVMOrcJITTargetMachineBuilderRef jtmb;
  LLVMErrorRef e = LLVMOrcJITTargetMachineBuilderDetectHost(&jtmb);
  if (e) return jit_fail(j, err, error_text("detecting the host", e));
  LLVMOrcLLJITBuilderRef lb = LLVMOrcCreateLLJITBuilder();
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(lb, jtmb);
  e = LLVMOrcCreateLLJIT(&j->jit, lb);
  if (e) return jit_fail(j, err, error_text("creating the LLJIT", e));
  LLVMOrcExecutionSessionSetErrorReporter(LLVMOrcLLJITGetExecutionSession(j->jit), report_session_error, j);
  e = add_symbols(j);
  if (e) return jit_fail(j, err, error_text("adding symbols", e));
  char *msg;
  return make_target_machine(j, &msg) ? j : jit_fail(j, err, msg);
}

/* Removes the code from the JIT: its memory is unmapped. */
static void unload(cpu_code *c) {
  LLVMErrorRef e = LLVMOrcResourceTrackerRemove(c->rt);
  if (e) LLVMConsumeError(e);  /* nothing to report: the code is gone either way */
  LLVMOrcReleaseResourceTracker(c->rt);
  c->prev->next = c->next;
  c->next->prev = c->prev;
  free(c);
}

/* ORC keeps the names of removed symbols in its string pool until asked to
 * drop them (a long run of new kernels measured 68 bytes of RSS growth per
 * kernel without this, 22 with it). */
void cpu_code_free(cpu_code *c) {
  cpu_jit *j = c->jit;
  LLVMOrcExecutionSessionRef es = LLVMOrcLLJITGetExecutionSession(j->jit);
  pthread_mutex_lock(&j->mu);
  unload(c);
  LLVMOrcSymbolStringPoolClearDeadEntries(LLVMOrcExecutionSessionGetSymbolStringPool(es));
  pthread_mutex_unlock(&j->mu);
}

void cpu_jit_free(cpu_jit *j) {
  if (!j) return;
  while (j->live.next != &j->live) unload(j->live.next);
  if (j->jit) {
    LLVMErrorRef e = LLVMOrcDisposeLLJIT(j->jit);
    if (e) LLVMConsumeError(e);
  }
  if (j->tm) LLVMDisposeTargetMachine(j->tm);
  if (j->emit_tm) LLVMDisposeTargetMachine(j->emit_tm);
  LLVMDisposeMessage(j->cpu);
  LLVMDisposeMessage(j->features);
  free(j->target);
  ir_str_free(&j->session_err);
  free(j->drivers);
  pthread_mutex_destroy(&j->build_mu);
  pthread_mutex_destroy(&j->mu);
  free(j);
}

const char *cpu_jit_target(cpu_jit *j) { return j->target; }
cpu_kernel_fn cpu_code_fn(const cpu_code *c) { return c->fn; }
size_t cpu_code_bytes(const cpu_code *c) { return c->bytes; }

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

/* "what: LLVM's error" plus what ORC's session reported meanwhile; consumes e. */
static char *jit_error(cpu_jit *j, const char *what, LLVMErrorRef e) {
  char *msg = error_text(what, e);
  if (!j->session_err.len) return msg;
  ir_str b = {0};
  ir_str_printf(&b, "%s (%s)", msg, j->session_err.s);
  free(msg);
  return b.s;
}

/* Adds the object file (owned from here on) under a new resource tracker and
 * links it by looking up name. A failure removes whatever was added, so the
 * name can be defined again. */
static cpu_code *load_locked(cpu_jit *j, const char *name, LLVMMemoryBufferRef obj, char **err) {
  size_t bytes = LLVMGetBufferSize(obj);
  j->session_err.len = 0;
  LLVMOrcResourceTrackerRef rt = LLVMOrcJITDylibCreateResourceTracker(LLVMOrcLLJITGetMainJITDylib(j->jit));
  LLVMErrorRef e = LLVMOrcLLJITAddObjectFileWithRT(j->jit, rt, obj);
  LLVMOrcExecutorAddress addr = 0;
  if (e) *err = jit_error(j, "adding a kernel to the JIT", e);
  else if ((e = LLVMOrcLLJITLookup(j->jit, &addr, name))) *err = jit_error(j, "linking a kernel", e);
  cpu_code *c = e ? NULL : ir_malloc(sizeof *c);
  if (!c) {
    LLVMErrorRef r = LLVMOrcResourceTrackerRemove(rt);
    if (r) LLVMConsumeError(r);
    LLVMOrcReleaseResourceTracker(rt);
    return NULL;   /* out of memory: *err stays NULL */
  }
  *c = (cpu_code){j->live.prev, &j->live, j, rt, (cpu_kernel_fn)(uintptr_t)addr, bytes};
  c->prev->next = c->next->prev = c;
  return c;
}

static cpu_code *load_object(cpu_jit *j, const char *name, LLVMMemoryBufferRef obj, char **err) {
  pthread_mutex_lock(&j->mu);
  cpu_code *c = load_locked(j, name, obj, err);
  pthread_mutex_unlock(&j->mu);
  return c;
}

/* The optimised module as an object file; NULL with *err set. */
static LLVMMemoryBufferRef emit_object(cpu_jit *j, LLVMModuleRef m, char **err) {
  LLVMMemoryBufferRef buf = NULL;
  char *msg = NULL;
  if (!LLVMTargetMachineEmitToMemoryBuffer(j->emit_tm, m, LLVMObjectFile, &msg, &buf)) return buf;
  ir_str b = {0};
  ir_str_printf(&b, "emitting an object file: %s", msg ? msg : "unknown error");
  LLVMDisposeMessage(msg);
  *err = b.s;
  return NULL;
}

/* Optimises m (ctx's) and emits its object file, appending its IR to llvm_ir
 * and the object's bytes to obj when they are not NULL; frees m and ctx. */
static LLVMMemoryBufferRef build(cpu_jit *j, LLVMContextRef ctx, LLVMModuleRef m, ir_str *obj, ir_str *llvm_ir,
                                 char **err) {
  LLVMMemoryBufferRef buf = NULL;
  char *msg = optimise(j, m);
  if (msg) *err = msg;
  else {
    if (llvm_ir) append_ir(llvm_ir, m);
    buf = emit_object(j, m, err);
  }
  if (buf && obj) ir_str_append(obj, LLVMGetBufferStart(buf), LLVMGetBufferSize(buf));
  LLVMDisposeModule(m);
  LLVMContextDispose(ctx);
  return buf;
}

typedef struct {
  cpu_jit *j;
  ir_str *llvm_ir;
  char *err;            /* why a driver failed; NULL out of memory */
} driver_job;

/* A GEMM driver (gemm.c) or attention block kernel (attn_block.c) the JIT
 * does not hold yet: compiled once and kept for the JIT's life (never
 * evicted), so every later GEMM (attention) of its dtypes,
 * whatever its shape and whether compiled or loaded from the disk cache,
 * only links against it. Its slot is made first: out of memory nothing is
 * compiled. */
static bool add_driver(void *job, const cpu_gemm_driver *d) {
  driver_job *b = job;
  cpu_jit *j = b->j;
  for (int i = 0; i < j->ndrivers; i++)
    if (!strcmp(j->drivers[i].name, d->name)) return true;
  void *grown = ir_realloc(j->drivers, sizeof *j->drivers * (size_t)(j->ndrivers + 1));
  if (!grown) return false;
  j->drivers = grown;
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef m = cpu_gemm_driver_module(ctx, d, LLVMOrcLLJITGetTripleString(j->jit),
                                           LLVMOrcLLJITGetDataLayoutStr(j->jit), j->cpu, j->features);
  LLVMMemoryBufferRef buf = build(j, ctx, m, NULL, b->llvm_ir, &b->err);
  cpu_code *c = buf ? load_object(j, d->name, buf, &b->err) : NULL;
  if (!c) return false;
  snprintf(j->drivers[j->ndrivers].name, sizeof j->drivers[0].name, "%s", d->name);
  j->drivers[j->ndrivers++].code = c;
  return true;
}

/* The drivers k's GEMMs call, loaded before k (compiled or from disk). */
static bool add_drivers(cpu_jit *j, const kernel *k, ir_str *llvm_ir, char **err) {
  driver_job job = {j, llvm_ir, NULL};
  bool ok = cpu_gemm_each_driver(k, add_driver, &job);
  *err = job.err;
  return ok;
}

cpu_code *cpu_jit_compile(cpu_jit *j, kernel *k, ir_str *obj, ir_str *llvm_ir, char **err) {
  if (!k->name[0]) {  /* k_print names the kernel */
    ir_str text = {0};
    k_print(&text, k);
    ir_str_free(&text);
  }
  compiling = k->name;
  cpu_code *c = NULL;
  pthread_mutex_lock(&j->build_mu);
  if (add_drivers(j, k, llvm_ir, err)) {
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef m = cpu_emit_module(ctx, k, LLVMOrcLLJITGetTripleString(j->jit), LLVMOrcLLJITGetDataLayoutStr(j->jit),
                                      j->cpu, j->features);
    LLVMMemoryBufferRef buf = m ? build(j, ctx, m, obj, llvm_ir, err) : NULL;   /* build frees ctx */
    if (!m) LLVMContextDispose(ctx);   /* out of memory: *err stays NULL */
    c = buf ? load_object(j, k->name, buf, err) : NULL;
  }
  pthread_mutex_unlock(&j->build_mu);
  compiling = NULL;
  return c;
}

cpu_code *cpu_jit_load(cpu_jit *j, const kernel *k, const char *name, const void *obj, size_t len, char **err) {
  compiling = name;
  cpu_code *c = NULL;
  pthread_mutex_lock(&j->build_mu);
  if (add_drivers(j, k, NULL, err)) {
    LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(obj, len, name);
    c = load_object(j, name, buf, err);
  }
  pthread_mutex_unlock(&j->build_mu);
  compiling = NULL;
  return c;
}
