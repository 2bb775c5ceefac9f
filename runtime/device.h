/* device.h: the interface a device other than the host implements, and what
 * realize() and the rest of the runtime call it through
 * (docs/architecture.md). The CPU is not behind it: its buffers are host memory
 * (buffer.c) that realize runs kernels on directly, and a transfer between
 * the host and a device is the device's copy_in or copy_out.
 *
 * Work a device queues runs in the order it was queued (one stream per
 * device); only copy_out and sync wait for it. Buffers of a device are
 * rt_buffers whose data is the device address and device is the device; they
 * go back to the device's allocator through free when their count drops to
 * zero (rt_buffer_release). */
#ifndef KILN_DEVICE_H
#define KILN_DEVICE_H

#include "codegen_cuda/cuda.h"
#include "ir/kernel.h"
#include "runtime/rt.h"
#include "runtime/rt_internal.h"

typedef struct rt_device_kernel rt_device_kernel;  /* a kernel loaded on a device */

typedef struct {
  const char *name;     /* "cuda" */
  /* NULL with the last error set when the device cannot give the memory. */
  rt_buffer *(*alloc)(int index, size_t bytes);
  void (*free)(rt_buffer *b);
  /* Host -> device: queued; src may be reused as soon as it returns. */
  kiln_status (*copy_in)(rt_buffer *dst, const void *src, size_t bytes);
  /* Device -> host, bytes from byte offset off of src: returns when they are
   * in dst (after the work queued before it). */
  kiln_status (*copy_out)(void *dst, const rt_buffer *src, size_t off, size_t bytes);
  /* The device's code for k, loaded and cached by k's key, and how to
   * launch it for the sizes k was lowered with (*geom: a shape-generic
   * kernel's code serves every shape of its structure, its grid follows
   * each one); *origin says whether it was loaded before, came from the
   * disk cache or was compiled. KILN_ERR_COMPILE (the compiler's log in the
   * last error) when k cannot be compiled for the device. */
  kiln_status (*compile)(int index, kernel *k, int debug, rt_device_kernel **out, cuda_launch *geom,
                         rt_origin *origin);
  /* Queues k over its whole parallel range as geom (compile's) says; bufs
   * as for a CPU kernel (device addresses; the args param's entry points
   * at this launch's arguments, k->args or values bound in their place). */
  kiln_status (*launch)(int index, rt_device_kernel *dk, kernel *k, void *const *bufs, const cuda_launch *geom,
                        int debug);
  kiln_status (*sync)(int index);
} rt_device;

/* The interface of dev's kind; NULL for the CPU. */
const rt_device *rt_device_of(kiln_device dev);
/* Tests only (not in kiln.h), like ir_alloc's failure hook: d serves cuda:0
 * in place of the GPU, and cuda:0 counts as usable, so that the runtime's
 * CUDA paths (plans, bound values, shape-generic kernels, compiled
 * functions) run on machines without one (tests/test_cuda_loop.c runs the
 * kernels on the host); NULL puts the GPU back. Set it while no realize runs. */
void rt_cuda_stand_in(const rt_device *d);

/* ---- the CUDA device (cuda_device.c) -------------------------------------- */
/* Whether cuda:index can run kiln's kernels; if not, why ("libcuda.so.1 not
 * found (no NVIDIA driver)", "cuda:3 requested, the driver reports 1
 * device", "kiln was built without the CUDA toolkit"). */
bool rt_cuda_usable(int index, char *why, size_t why_len);
/* Bytes of device memory kiln holds on cuda:index (zeros before first use). */
rt_alloc_stats rt_cuda_memory(int index);
void rt_cuda_reset_peak(void);
/* Waits for every device's queued work, then gives its cached blocks back to
 * the driver. Blocks of live tensors stay. */
void rt_cuda_empty_cache(void);
/* Releases contexts, streams, modules and memory (kiln_shutdown). Buffers
 * still alive afterwards are dropped without a driver call: the memory went
 * with the context. */
void rt_cuda_device_shutdown(void);
/* cuda:index's stream (a CUstream), with the device's context current on
 * this thread, for libraries that queue work of their own (cuBLASLt); NULL
 * with the last error set when the device cannot be used. */
void *rt_cuda_stream(int index);
/* cuda_compile through the disk cache (diskcache.c), keyed by the source's
 * text, arch and NVRTC's version. *log (if not NULL) receives NVRTC's log as
 * cuda_compile gives it, NULL on a disk hit (NVRTC did not run). Built only
 * with the CUDA toolkit. */
bool rt_cuda_compile_cached(const char *src, const char *arch, ir_str *out, rt_disk_info *info, char **log,
                            char **err);

/* ---- matrix products on a CUDA device: cuBLASLt (cublas.c) ----------------- */
/* Loads cuBLASLt (dlopen of $KILN_CUBLASLT, default libcublasLt.so.13, then
 * that name in the toolkit's library directory) once. KILN_OK, or
 * KILN_ERR_DEVICE with "CUDA not available: libcublasLt.so.13 not found"
 * (or "... lacks <function>") as the last error. */
kiln_status rt_cublas_load(void);
/* A function of cuBLASLt ("cublasLtGetVersion"), loading it as above, for
 * callers that call it directly (bench/gpu.c); NULL when it cannot be
 * loaded (the last error says why) or lacks name. */
void *rt_cublas_sym(const char *name);
/* Queues g's calls (codegen_cuda/gemm.c) on cuda:index's stream. bufs are
 * the device addresses of the split kernel's parameters; temp holds D when
 * g->temp > 0. Errors: "cuBLASLt error <status> in <call>". */
kiln_status rt_cublas_matmul(int index, const cuda_gemm *g, void *const *bufs, void *temp, int debug);
/* Destroys the handles and workspaces and closes the library (kiln_shutdown,
 * before the devices' contexts go). */
void rt_cublas_shutdown(void);

#endif
