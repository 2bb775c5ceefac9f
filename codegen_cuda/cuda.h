/* cuda.h: the CUDA back end: kernel IR -> CUDA C source (emit.c) -> NVRTC
 * -> CUBIN or PTX (nvrtc.c); the runtime keeps the binaries in its disk
 * cache (runtime/diskcache.c).
 *
 * ABI of a generated kernel (extern "C" __global__, named k->name):
 *   void name(T0 *p0, const T1 *p1, ..., name_args pA, long long lo, long long hi,
 *             void *scratch)
 * pN is parameter N's device pointer (storage dtype elements: bool is a byte,
 * f16/bf16 are unsigned short); a parameter marked args is passed by value as
 * the struct name_args { long long v[nargs]; } (k->args, no device copy).
 * Each iteration of the kernel's parallel loop (or the whole body, for a
 * kernel without one) runs in a grid-stride loop over lo..hi, so any grid
 * computes the same result; launch it with cuda_launch's grid and block.
 * scratch is NULL unless cuda_launch.scratch > 0: then it is that many bytes
 * of device memory, zeroed before the kernel's first launch and reused by
 * every later one (each launch leaves it zeroed again), one per kernel.
 * Only a grid-wide reduction uses it: an unsigned counter of finished blocks
 * at byte 0, then 8-byte slots of the blocks' partial results, slot s of
 * block b at byte 16 + 8 * (s * gridDim.x + b) (prelude.cuh).
 * A shape-generic kernel (k->generic: sizes, strides and offsets are launch
 * arguments, ir/kernel.h) has one source for every shape of its structure:
 * its loops run to their arguments and its block size and mapping follow
 * the structure alone. Only cuda_launch's range and grid follow the sizes k
 * was lowered with, so each launch takes them from its own lowering. */
#ifndef KILN_CUDA_H
#define KILN_CUDA_H

#include "ir/kernel.h"

/* Most blocks an emitted kernel asks for (about 16 per SM of a 132-SM
 * H100); the grid-stride loops cover the rest. */
#define CUDA_MAX_GRID 2048

/* How to launch an emitted kernel. */
typedef struct {
  int64_t range;        /* lo..hi to launch: 0..range covers the whole kernel */
  int block;            /* threads per block it was written for */
  int grid;             /* blocks to launch, 1..CUDA_MAX_GRID */
  int64_t scratch;      /* bytes of the scratch argument (enough for any grid
                           up to CUDA_MAX_GRID); 0: none, pass NULL */
} cuda_launch;

/* The device functions every kernel uses; put it once in front of the
 * kernels of a translation unit. */
const char *cuda_prelude(void);
/* Appends k's __global__ function (and its args struct) to src and fills
 * *launch. False with *err (malloc'd) for what the back end cannot emit
 * (KS_GEMM: matrix products go to cuBLAS). Out of memory src->failed is
 * set (the source is incomplete). */
bool cuda_emit(kernel *k, ir_str *src, cuda_launch *launch, char **err);

/* ---- nvrtc.c ---- */
/* "sm_90": KILN_CUDA_ARCH when set, else sm_<cc> for a device of compute
 * capability cc (major*10+minor), else sm_90. buf needs 32 bytes. */
const char *cuda_arch(int device_cc, char *buf);
/* Loads NVRTC once: dlopen of $KILN_NVRTC, default the toolkit's soname
 * (libnvrtc.so.13), then that name in the toolkit's library directory. True,
 * or false with why: "libnvrtc.so.13 not found" ("... lacks <function>"). */
bool cuda_nvrtc_load(char *why, size_t why_len);
/* Forgets the loaded NVRTC (kiln_shutdown); the next use loads it again. */
void cuda_nvrtc_shutdown(void);
/* NVRTC's version, "13.0"; part of cache keys. "none" when NVRTC cannot be
 * loaded. */
const char *cuda_nvrtc_version(void);
/* The toolkit headers kernels include (cuda_fp16.h), given to NVRTC as -I:
 * the directory of the toolkit kiln was built with, or, on a machine whose
 * toolkit lives elsewhere (a GPU bundle, scripts/gpu-bundle.sh), the include
 * directory beside the NVRTC the loader found. cuda_include_dir_for is the
 * rule: built when it holds cuda_fp16.h, else <dir of nvrtc_path>/../include
 * when that does (<toolkit>/lib64/libnvrtc.so.13 -> <toolkit>/include), else
 * built; nvrtc_path may be NULL. */
const char *cuda_include_dir(void);
void cuda_include_dir_for(const char *built, const char *nvrtc_path, char *out, size_t n);
/* Compiles the translation unit src for arch: "sm_XX" gives a CUBIN (NVRTC
 * runs ptxas), "compute_XX" PTX. The binary is appended to out. False with
 * *err (malloc'd) holding NVRTC's log on failure ("CUDA not available:
 * libnvrtc.so.13 not found" without NVRTC); *log (if not NULL)
 * receives the log either way (malloc'd, possibly empty). */
bool cuda_compile(const char *src, const char *arch, ir_str *out, char **log, char **err);

/* ---- gemm.c: a matrix product as a cuBLASLt call ---------------------------
 * A kernel whose body is batch loops around one KS_GEMM (passes/lower.c) is
 * split into one cuBLASLt matmul and, when its epilogue holds more than
 * cuBLASLt can apply, an elementwise "rest" kernel that cuda_emit compiles
 * like any other. Names follow cuBLASLt, which is column-major: kiln's
 * row-major C = A B is cuBLASLt's C^T = B^T A^T, so cuBLASLt's A is kiln's
 * B, its B is kiln's A, its m is kiln's n (columns) and its n kiln's m. */
typedef enum { CUDA_ACT_NONE, CUDA_ACT_RELU, CUDA_ACT_GELU_TANH } cuda_act;

/* One matrix of the call: element (r, c) of product p is at
 * off + r + c*ld + p*batch_stride of the parameter (column-major, rows x
 * cols as stored); with trans the product reads its transpose. */
typedef struct {
  int param;            /* the kernel parameter holding it; -1 for D in the temp */
  kiln_dtype dtype;     /* storage dtype */
  bool trans;
  int64_t rows, cols, ld;
  int64_t off, batch_stride;
} cuda_gemm_matrix;

typedef struct {
  kiln_dtype compute;   /* f32 or f64: accumulation and scale type (f16/bf16 operands compute in f32) */
  int64_t m, n, k;      /* D (m x n) = op(A) (m x k) op(B) (k x n) */
  bool call;            /* false when there is nothing to multiply (k or a size is 0): D is all zeros */
  cuda_gemm_matrix a, b, d;
  int64_t batch;        /* products per call (a strided batch) */
  int nouter;           /* batch dims that do not fold into one stride: one call per index */
  int64_t outer[KILN_MAX_DIMS];            /* their extents, outermost first */
  int64_t outer_stride[3][KILN_MAX_DIMS];  /* elements between indices, of a, b and d */
  int bias;             /* parameter of the bias (m elements of D's dtype, added to each column), -1: none */
  cuda_act act;         /* applied after the bias */
  int64_t temp;         /* elements of the temp D (dtype compute, contiguous) when the rest reads it, else 0 */
  kernel *rest;         /* the rest of the epilogue (reads D from the temp), or NULL: D is an output */
  int *rest_src;        /* per rest parameter: the kernel's parameter bound to it, -1 for the temp */
  bool oom;             /* the split failed for want of memory (no *err) */
} cuda_gemm;

/* The call and the rest for kernel k. False with *err (malloc'd) when k is
 * not a KS_GEMM nest or an operand's strides are not a transpose with a
 * leading dimension (a flip, a step along a matrix dim, a broadcast row);
 * false with g->oom when out of memory. */
bool cuda_gemm_split(const kernel *k, cuda_gemm *g, char **err);
void cuda_gemm_free(cuda_gemm *g);
/* Calls to make (the product of the outer extents), and the element
 * offsets of a, b and d in call c (added to their off). */
int64_t cuda_gemm_calls(const cuda_gemm *g);
void cuda_gemm_offsets(const cuda_gemm *g, int64_t c, int64_t off[3]);

#endif
