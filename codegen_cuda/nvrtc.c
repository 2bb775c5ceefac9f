/* nvrtc.c: CUDA C -> CUBIN (-arch=sm_XX: NVRTC runs ptxas) or PTX
 * (compute_XX) through NVRTC, which needs no GPU and no driver. NVRTC is
 * dlopened on first use (ir_dl_load), so no binary needs it to start. Kernels
 * are compiled without FMA contraction so they round like the CPU back end. */
#include "codegen_cuda/cuda.h"
#include "ir/dynlib.h"

#include <dlfcn.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef KILN_NVRTC_SONAME
#define KILN_NVRTC_SONAME "libnvrtc.so.13"  /* CMake passes the toolkit's */
#endif

#define NVRTC_FUNCTIONS(X)                                                                       \
  X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcCompileProgram)            \
  X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog) X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN)           \
  X(nvrtcGetPTXSize) X(nvrtcGetPTX) X(nvrtcDestroyProgram)

/* A field per function, typed by nvrtc.h's own prototype. */
#define NV_FIELD(fn) __typeof__(&fn) fn;
static struct { NVRTC_FUNCTIONS(NV_FIELD) } nv;
static ir_dl_lib nv_lib = IR_DL_LIB_INIT;

/* $KILN_NVRTC as given, or the soname of the toolkit kiln was built with,
 * then that file in the toolkit's directory. */
bool cuda_nvrtc_load(char *why, size_t why_len) {
#define NV_SYM(fn) {#fn, &nv.fn},
  static const ir_dl_sym syms[] = {NVRTC_FUNCTIONS(NV_SYM)};
#undef NV_SYM
  const char *user = getenv("KILN_NVRTC");
  if (user && !*user) user = NULL;
  return ir_dl_once(&nv_lib, user ? user : KILN_NVRTC_SONAME, user ? NULL : KILN_CUDA_LIBDIR, syms,
                    sizeof syms / sizeof *syms, why, why_len);
}

void cuda_nvrtc_shutdown(void) { ir_dl_forget(&nv_lib); }

#ifndef KILN_CUDA_INCLUDE
#define KILN_CUDA_INCLUDE "/usr/local/cuda/include"  /* cuda_fp16.h; CMake passes the toolkit's */
#endif

static bool has_fp16_header(const char *dir) {
  char path[4300];
  return snprintf(path, sizeof path, "%s/cuda_fp16.h", dir) < (int)sizeof path && access(path, R_OK) == 0;
}

void cuda_include_dir_for(const char *built, const char *nvrtc_path, char *out, size_t n) {
  snprintf(out, n, "%s", built);
  const char *slash = nvrtc_path ? strrchr(nvrtc_path, '/') : NULL;
  if (has_fp16_header(built) || !slash) return;
  char beside[4200];
  snprintf(beside, sizeof beside, "%.*s/../include", (int)(slash - nvrtc_path), nvrtc_path);
  if (has_fp16_header(beside)) snprintf(out, n, "%s", beside);
}

/* Found once, after NVRTC has loaded: where the loader found it is known then. */
static char include_dir[4200];
static pthread_once_t include_once = PTHREAD_ONCE_INIT;

static void find_include_dir(void) {
  Dl_info info = {0};
  void *fn;
  memcpy(&fn, &nv.nvrtcVersion, sizeof fn);
  cuda_include_dir_for(KILN_CUDA_INCLUDE, dladdr(fn, &info) ? info.dli_fname : NULL, include_dir,
                       sizeof include_dir);
}

const char *cuda_include_dir(void) {
  char why[256];
  if (!cuda_nvrtc_load(why, sizeof why)) return KILN_CUDA_INCLUDE;
  pthread_once(&include_once, find_include_dir);
  return include_dir;
}

const char *cuda_arch(int device_cc, char *buf) {
  const char *env = getenv("KILN_CUDA_ARCH");
  if (env && *env) snprintf(buf, 32, "%s", env);
  else snprintf(buf, 32, "sm_%d", device_cc > 0 ? device_cc : 90);
  return buf;
}

const char *cuda_nvrtc_version(void) {
  static char v[32];
  char why[256];
  int major = 0, minor = 0;
  if (v[0]) return v;
  if (!cuda_nvrtc_load(why, sizeof why)) return "none";
  nv.nvrtcVersion(&major, &minor);
  snprintf(v, sizeof v, "%d.%d", major, minor);
  return v;
}

static char *program_log(nvrtcProgram prog) {
  size_t n = 0;
  char *log = NULL;
  if (nv.nvrtcGetProgramLogSize(prog, &n) == NVRTC_SUCCESS && (log = ir_malloc(n + 1))) {
    if (nv.nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) n = 0;
    log[n] = '\0';
  }
  return log ? log : ir_strdup("");   /* NULL when even that fails */
}

/* Appends the CUBIN (sm_) or PTX (compute_) of a compiled program. */
static nvrtcResult append_binary(nvrtcProgram prog, bool cubin, ir_str *out) {
  size_t n = 0;
  nvrtcResult r = cubin ? nv.nvrtcGetCUBINSize(prog, &n) : nv.nvrtcGetPTXSize(prog, &n);
  char *buf = r == NVRTC_SUCCESS ? ir_malloc(n ? n : 1) : NULL;
  if (r == NVRTC_SUCCESS && !buf) r = NVRTC_ERROR_OUT_OF_MEMORY;
  if (buf) r = cubin ? nv.nvrtcGetCUBIN(prog, buf) : nv.nvrtcGetPTX(prog, buf);
  if (r == NVRTC_SUCCESS) ir_str_append(out, buf, n);
  free(buf);
  return r;
}

bool cuda_compile(const char *src, const char *arch, ir_str *out, char **log, char **err) {
  char arch_opt[48], include_opt[4300];
  snprintf(arch_opt, sizeof arch_opt, "-arch=%s", arch);
  char why[256];
  if (!cuda_nvrtc_load(why, sizeof why)) {
    *err = ir_strprintf("CUDA not available: %s", why);
    return false;
  }
  snprintf(include_opt, sizeof include_opt, "-I%s", cuda_include_dir());
  const char *opts[] = {arch_opt, "--fmad=false", "--std=c++17", include_opt};
  nvrtcProgram prog;
  nvrtcResult r = nv.nvrtcCreateProgram(&prog, src, "kiln.cu", 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) {
    *err = ir_strprintf("nvrtcCreateProgram: %s", nv.nvrtcGetErrorString(r));
    return false;
  }
  r = nv.nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof *opts), opts);
  char *text = program_log(prog);
  if (r == NVRTC_SUCCESS) r = append_binary(prog, strncmp(arch, "sm_", 3) == 0, out);
  if (r != NVRTC_SUCCESS)
    *err = ir_strprintf("NVRTC (%s, %s): %s\n%s", arch, cuda_nvrtc_version(), nv.nvrtcGetErrorString(r), text ? text : "");
  if (log) *log = text;
  else free(text);
  nv.nvrtcDestroyProgram(&prog);
  return r == NVRTC_SUCCESS;
}
