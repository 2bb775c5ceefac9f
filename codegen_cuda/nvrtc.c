/* nvrtc.c: CUDA C -> CUBIN (-arch=sm_XX: NVRTC runs ptxas) or PTX
 * (compute_XX) through NVRTC, which needs no GPU and no driver. Kernels are
 * compiled without FMA contraction so they round like the CPU back end. */
#include "codegen_cuda/cuda.h"

#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef KILN_CUDA_INCLUDE
#define KILN_CUDA_INCLUDE "/usr/local/cuda/include"  /* cuda_fp16.h; CMake passes the toolkit's */
#endif

const char *cuda_arch(int device_cc, char *buf) {
  const char *env = getenv("KILN_CUDA_ARCH");
  if (env && *env) snprintf(buf, 32, "%s", env);
  else snprintf(buf, 32, "sm_%d", device_cc > 0 ? device_cc : 90);
  return buf;
}

const char *cuda_nvrtc_version(void) {
  static char v[32];
  int major = 0, minor = 0;
  if (!v[0]) {
    nvrtcVersion(&major, &minor);
    snprintf(v, sizeof v, "%d.%d", major, minor);
  }
  return v;
}

static char *program_log(nvrtcProgram prog) {
  size_t n = 0;
  char *log = NULL;
  if (nvrtcGetProgramLogSize(prog, &n) == NVRTC_SUCCESS && (log = malloc(n + 1))) {
    if (nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) n = 0;
    log[n] = '\0';
  }
  return log ? log : strdup("");
}

/* Appends the CUBIN (sm_) or PTX (compute_) of a compiled program. */
static nvrtcResult append_binary(nvrtcProgram prog, bool cubin, ir_str *out) {
  size_t n = 0;
  nvrtcResult r = cubin ? nvrtcGetCUBINSize(prog, &n) : nvrtcGetPTXSize(prog, &n);
  char *buf = r == NVRTC_SUCCESS ? malloc(n ? n : 1) : NULL;
  if (r == NVRTC_SUCCESS && !buf) r = NVRTC_ERROR_OUT_OF_MEMORY;
  if (buf) r = cubin ? nvrtcGetCUBIN(prog, buf) : nvrtcGetPTX(prog, buf);
  if (r == NVRTC_SUCCESS) ir_str_append(out, buf, n);
  free(buf);
  return r;
}

bool cuda_compile(const char *src, const char *arch, ir_str *out, char **log, char **err) {
  char arch_opt[48];
  snprintf(arch_opt, sizeof arch_opt, "-arch=%s", arch);
  const char *opts[] = {arch_opt, "--fmad=false", "--std=c++17", "-I" KILN_CUDA_INCLUDE};
  nvrtcProgram prog;
  nvrtcResult r = nvrtcCreateProgram(&prog, src, "kiln.cu", 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) {
    if (asprintf(err, "nvrtcCreateProgram: %s", nvrtcGetErrorString(r)) < 0) *err = NULL;
    return false;
  }
  r = nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof *opts), opts);
  char *text = program_log(prog);
  if (r == NVRTC_SUCCESS) r = append_binary(prog, strncmp(arch, "sm_", 3) == 0, out);
  if (r != NVRTC_SUCCESS && asprintf(err, "NVRTC (%s, %s): %s\n%s", arch, cuda_nvrtc_version(),
                                     nvrtcGetErrorString(r), text) < 0)
    *err = NULL;
  if (log) *log = text;
  else free(text);
  nvrtcDestroyProgram(&prog);
  return r == NVRTC_SUCCESS;
}
