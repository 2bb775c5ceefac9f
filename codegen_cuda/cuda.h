/* cuda.h: the CUDA back end: kernel IR -> CUDA C source (emit.c) -> NVRTC
 * -> CUBIN or PTX (nvrtc.c), with a disk cache of the binaries (cache.c).
 *
 * ABI of a generated kernel (extern "C" __global__, named k->name):
 *   void name(T0 *p0, const T1 *p1, ..., name_args pA, long long lo, long long hi)
 * pN is parameter N's device pointer (storage dtype elements: bool is a byte,
 * f16/bf16 are unsigned short); a parameter marked args is passed by value as
 * the struct name_args { long long v[nargs]; } (k->args, no device copy).
 * Each iteration of the kernel's parallel loop (or the whole body, for a
 * kernel without one) runs in a grid-stride loop over lo..hi. */
#ifndef KILN_CUDA_H
#define KILN_CUDA_H

#include "ir/kernel.h"

/* How to launch an emitted kernel. */
typedef struct {
  int64_t range;        /* lo..hi to launch: 0..range covers the whole kernel */
  int block;            /* threads per block it was written for */
} cuda_launch;

/* The device functions every kernel uses; put it once in front of the
 * kernels of a translation unit. */
const char *cuda_prelude(void);
/* Appends k's __global__ function (and its args struct) to src and fills
 * *launch. False with *err (malloc'd) for what the back end cannot emit
 * (KS_GEMM: matrix products go to cuBLAS). */
bool cuda_emit(kernel *k, ir_str *src, cuda_launch *launch, char **err);

/* ---- nvrtc.c ---- */
/* "sm_90": KILN_CUDA_ARCH when set, else sm_<cc> for a device of compute
 * capability cc (major*10+minor), else sm_90. buf needs 32 bytes. */
const char *cuda_arch(int device_cc, char *buf);
/* NVRTC's version, "13.0"; part of cache keys. */
const char *cuda_nvrtc_version(void);
/* Compiles the translation unit src for arch: "sm_XX" gives a CUBIN (NVRTC
 * runs ptxas), "compute_XX" PTX. The binary is appended to out. False with
 * *err (malloc'd) holding NVRTC's log on failure; *log (if not NULL)
 * receives the log either way (malloc'd, possibly empty). */
bool cuda_compile(const char *src, const char *arch, ir_str *out, char **log, char **err);

/* ---- cache.c ---- */
typedef struct {
  bool hit;             /* loaded from the disk cache */
  bool dropped;         /* an entry was found but corrupt or truncated: recompiled */
  int warnings;         /* cache problems reported on stderr (never failures) */
} cuda_cache_info;
/* $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln. */
void cuda_cache_dir(char *buf, size_t n);
/* cuda_compile through the disk cache, keyed by the source's hash, arch and
 * NVRTC's version. Entries are written atomically and verified on load. */
bool cuda_compile_cached(const char *src, const char *arch, ir_str *out, cuda_cache_info *info,
                         char **err);

#endif
