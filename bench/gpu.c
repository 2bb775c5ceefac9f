/* gpu.c: kiln_bench's CUDA side (gpu.h). Driver and cuBLASLt functions come
 * through kiln's own loaders (rt_cuda_sym, rt_cublas_sym: dlopened, never
 * linked), typed by the toolkit's headers as in runtime/cuda_device.c; all
 * device work is queued on kiln's own stream of cuda:0 (rt_cuda_stream), so
 * events around kiln's kernels and around the yardsticks time alike. */
#include "gpu.h"

#include <cublasLt.h>
#include <cuda.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <kiln.h>

#include "codegen_cuda/cuda.h"
#include "common.h"
#include "runtime/device.h"

#define XSTR(x) STR(x)
#define STR(x) #x
#define MIB (1024.0 * 1024.0)
#define TRANSFER_BYTES ((size_t)256 << 20)
#define RAND_N ((int64_t)1 << 20)
#define GEMM_WORKSPACE ((size_t)32 << 20)   /* as runtime/cublas.c allows */
/* The fundamentals tutorial's nvidia-smi shows PyTorch holding ~830 MiB on a
 * small card after its first kernel: the figure kiln's is set beside. */
#define PYTORCH_FIRST_KERNEL_MIB 830.0

/* ---- the functions, from kiln's loaders ------------------------------------ */
#define CU_FUNCTIONS(X)                                                                                \
  X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem) \
  X(cuMemGetInfo) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyDtoDAsync) X(cuMemcpyHtoD) X(cuMemcpyDtoH)     \
  X(cuMemHostAlloc) X(cuMemFreeHost) X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize)          \
  X(cuEventElapsedTime) X(cuEventDestroy) X(cuStreamSynchronize) X(cuGetErrorName)
#define LT_FUNCTIONS(X)                                                                                 \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)           \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul) X(cublasLtGetStatusName)
/* cuda.h's macros rename a field and its looked-up symbol alike
 * (cuMemAlloc is cuMemAlloc_v2). */
#define FIELD(fn) __typeof__(&fn) fn;
static struct {
  CU_FUNCTIONS(FIELD)
} cu;
static struct {
  LT_FUNCTIONS(FIELD)
} lt;

/* ---- what the prologue found ---------------------------------------------------- */
static struct {
  char why[256];          /* why cuda:0 cannot be used; "" when it can */
  char cublaslt[256];     /* "13.1.0", or why it did not load */
  char name[256];
  int driver, cc_major, cc_minor, sms;
  size_t total;           /* device memory */
  bool measured;          /* the memory, rand and transfer steps ran */
  size_t ctx_used, first_used;   /* total - free: with kiln's context only; after its first kernel */
  kiln_memory_stats_t first_kiln;
  double h2d[3], d2h[3];  /* GB/s of kiln, the driver from pageable memory, from pinned memory */
  char rand[160];         /* "identical" or where the devices differ */
  bool failed;
  CUevent clock[2];       /* made once; freed with kiln's context at kiln_shutdown */
} g;

static const kiln_device cuda0 = {KILN_CUDA, 0};

/* False, with the call and the driver's name for r printed, on failure. */
static bool cu_ok(CUresult r, const char *call) {
  const char *name = NULL;
  if (r == CUDA_SUCCESS) return true;
  if (!cu.cuGetErrorName || cu.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = "unknown";
  printf("ERROR gpu: %s failed: %s\n", call, name);
  g.failed = true;
  return false;
}

static bool lt_ok(cublasStatus_t s, const char *call) {
  if (s == CUBLAS_STATUS_SUCCESS) return true;
  printf("ERROR gpu: %s failed: %s\n", call, lt.cublasLtGetStatusName(s));
  g.failed = true;
  return false;
}

/* Every driver function, once; false with g.why when one is missing. */
static bool load_driver(void) {
  if (cu.cuGetErrorName) return true;
#define CU_LOAD(fn)                                                                        \
  if (!(cu.fn = (__typeof__(&fn))rt_cuda_sym(XSTR(fn)))) {                                \
    snprintf(g.why, sizeof g.why, "libcuda.so.1 lacks %s (driver too old?)", XSTR(fn));    \
    return false;                                                                          \
  }
  CU_FUNCTIONS(CU_LOAD)
#undef CU_LOAD
  return true;
}

/* cuBLASLt's functions and version, through kiln's loader (it needs no GPU). */
static bool load_cublaslt(void) {
  if (lt.cublasLtGetStatusName) return true;
  size_t (*version)(void) = (size_t (*)(void))rt_cublas_sym("cublasLtGetVersion");
  if (!version) {
    snprintf(g.cublaslt, sizeof g.cublaslt, "not loaded (%s)", kiln_last_error());
    return false;
  }
  size_t v = version();
  snprintf(g.cublaslt, sizeof g.cublaslt, "%zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
#define LT_LOAD(fn) \
  if (!(lt.fn = (__typeof__(&fn))rt_cublas_sym(#fn))) return false;
  LT_FUNCTIONS(LT_LOAD)
#undef LT_LOAD
  return true;
}

/* ---- versions and the device ------------------------------------------------------ */
static bool read_device(void) {
  CUdevice dev;
  if (!cu_ok(cu.cuDriverGetVersion(&g.driver), "cuDriverGetVersion")) return false;
  if (!cu_ok(cu.cuDeviceGet(&dev, 0), "cuDeviceGet")) return false;
  return cu_ok(cu.cuDeviceGetName(g.name, sizeof g.name, dev), "cuDeviceGetName") &&
         cu_ok(cu.cuDeviceGetAttribute(&g.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
               "cuDeviceGetAttribute") &&
         cu_ok(cu.cuDeviceGetAttribute(&g.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
               "cuDeviceGetAttribute") &&
         cu_ok(cu.cuDeviceGetAttribute(&g.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
               "cuDeviceGetAttribute") &&
         cu_ok(cu.cuDeviceTotalMem(&g.total, dev), "cuDeviceTotalMem");
}

/* The versions known without a GPU, then the driver's and the device's. */
bool gpu_info(void) {
  load_cublaslt();
  printf("CUDA toolkit %d.%d, NVRTC %s (headers from %s), cuBLASLt %s\n", CUDA_VERSION / 1000,
         CUDA_VERSION % 1000 / 10, cuda_nvrtc_version(), cuda_include_dir(), g.cublaslt);
  if (!rt_cuda_usable(0, g.why, sizeof g.why) || !load_driver() || !read_device()) {
    if (!g.why[0]) snprintf(g.why, sizeof g.why, "a driver call failed (above)");
    printf("cuda:0 not usable: %s\n", g.why);
    return false;
  }
  printf("driver CUDA %d.%d; cuda:0 %s, compute capability %d.%d, %d SMs, %.0f MiB\n", g.driver / 1000,
         g.driver % 1000 / 10, g.name, g.cc_major, g.cc_minor, g.sms, (double)g.total / MIB);
  return true;
}

/* ---- the clock ------------------------------------------------------------------ */
bool gpu_clock_start(void) {
  CUstream s = rt_cuda_stream(0);
  if (!s) return false;
  for (int i = 0; i < 2; i++)
    if (!g.clock[i] && !cu_ok(cu.cuEventCreate(&g.clock[i], CU_EVENT_DEFAULT), "cuEventCreate")) return false;
  return cu_ok(cu.cuEventRecord(g.clock[0], s), "cuEventRecord");
}

double gpu_clock_ms(void) {
  float ms = 0;
  CUstream s = rt_cuda_stream(0);
  if (!s || !cu_ok(cu.cuEventRecord(g.clock[1], s), "cuEventRecord") ||
      !cu_ok(cu.cuEventSynchronize(g.clock[1]), "cuEventSynchronize") ||
      !cu_ok(cu.cuEventElapsedTime(&ms, g.clock[0], g.clock[1]), "cuEventElapsedTime"))
    return NAN;
  return ms;
}

/* ---- memory after the first kernel ------------------------------------------------ */
static bool device_used(size_t *used) {
  size_t free_bytes = 0, total = 0;
  if (!cu_ok(cu.cuMemGetInfo(&free_bytes, &total), "cuMemGetInfo")) return false;
  *used = total - free_bytes;
  return true;
}

/* The device memory in use (every process's: alone on the GPU, this one's)
 * with only kiln's context, then after 3 * ones(1M) on cuda:0 has run. */
static bool first_kernel_memory(void) {
  if (!rt_cuda_stream(0) || !device_used(&g.ctx_used)) return false;
  kiln_scope_begin();
  kiln_tensor *y = kiln_muls(kiln_to(kiln_ones(KILN_SHAPE(1 << 20), KILN_F32), cuda0), 3);
  bool ok = kiln_realize(y) == KILN_OK && cu_ok(cu.cuStreamSynchronize(rt_cuda_stream(0)), "cuStreamSynchronize") &&
            kiln_memory_stats(cuda0, &g.first_kiln) == KILN_OK && device_used(&g.first_used);
  kiln_scope_end();
  if (!ok) {
    printf("ERROR gpu: first kernel: %s\n", kiln_last_error());
    return false;
  }
  printf("device memory in use: %.0f MiB with kiln's context, %.0f MiB after its first kernel "
         "(kiln's blocks: %.1f MiB allocated, %.1f reserved); PyTorch: ~%.0f MiB\n",
         (double)g.ctx_used / MIB, (double)g.first_used / MIB, (double)g.first_kiln.allocated_bytes / MIB,
         (double)g.first_kiln.reserved_bytes / MIB, PYTORCH_FIRST_KERNEL_MIB);
  return true;
}

/* ---- kiln_rand, same seed, both devices ------------------------------------------ */
/* The first element where a and b (n elements of size bytes) differ, -1 if none. */
static int64_t first_difference(const void *a, const void *b, int64_t n, size_t size) {
  for (int64_t i = 0; i < n; i++)
    if (memcmp((const char *)a + i * size, (const char *)b + i * size, size)) return i;
  return -1;
}

/* False when the devices differ in dt, with where in g.rand. */
static bool rand_same(kiln_dtype dt) {
  kiln_manual_seed(1234);
  kiln_tensor *c = kiln_rand(KILN_SHAPE(RAND_N), dt);
  kiln_manual_seed(1234);
  kiln_tensor *d = kiln_cpu(kiln_rand_like(kiln_to(kiln_zeros(KILN_SHAPE(RAND_N), dt), cuda0)));
  const void *x = kiln_data(c), *y = kiln_data(d);
  if (!x || !y) {
    snprintf(g.rand, sizeof g.rand, "error: %s", kiln_last_error());
    return false;
  }
  int64_t i = first_difference(x, y, RAND_N, kiln_dtype_size(dt));
  if (i >= 0) snprintf(g.rand, sizeof g.rand, "%s differs from element %lld", kiln_dtype_name(dt), (long long)i);
  return i < 0;
}

static void compare_rand(void) {
  static const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
  bool same = true;
  kiln_scope_begin();
  for (int i = 0; i < 4 && same; i++) same = rand_same(dts[i]);
  kiln_scope_end();
  if (same) snprintf(g.rand, sizeof g.rand, "identical");
  else g.failed = true;
  printf("kiln_rand, seed 1234, %lld elements of f32 f64 f16 bf16 on the CPU and cuda:0: %s\n",
         (long long)RAND_N, g.rand);
}

/* ---- host <-> device transfers ---------------------------------------------------- */
typedef struct {
  float *pageable;
  void *pinned;
  CUdeviceptr dev;
} transfer_bufs;

/* One timed transfer of TRANSFER_BYTES: kind 0 kiln (kiln_to and
 * kiln_copy_to_host, from pageable memory), 1 the driver from pageable
 * memory, 2 from pinned; NAN on an error. Wall clock: kiln's staging runs
 * on the host as well as the stream. */
static double transfer_ms(transfer_bufs *b, int kind, bool to_device) {
  void *host = kind == 2 ? b->pinned : (void *)b->pageable;
  double t0 = bench_now_ms();
  bool ok;
  if (kind > 0 && to_device) ok = cu_ok(cu.cuMemcpyHtoD(b->dev, host, TRANSFER_BYTES), "cuMemcpyHtoD");
  else if (kind > 0) ok = cu_ok(cu.cuMemcpyDtoH(host, b->dev, TRANSFER_BYTES), "cuMemcpyDtoH");
  else {
    kiln_scope_begin();
    kiln_tensor *x = kiln_from_buffer(b->pageable, KILN_F32, KILN_SHAPE((int64_t)(TRANSFER_BYTES / 4)));
    kiln_tensor *d = kiln_to(x, cuda0);
    ok = kiln_realize(d) == KILN_OK && cu_ok(cu.cuStreamSynchronize(rt_cuda_stream(0)), "cuStreamSynchronize");
    if (ok && !to_device) {
      t0 = bench_now_ms();
      ok = kiln_copy_to_host(d, b->pageable, TRANSFER_BYTES) == KILN_OK;
    }
    if (!ok) printf("ERROR gpu: kiln transfer: %s\n", kiln_last_error());
    kiln_scope_end();
  }
  return ok ? bench_now_ms() - t0 : NAN;
}

/* GB/s of the median of runs transfers (one warm-up first). */
static double transfer_gbps(transfer_bufs *b, int kind, bool to_device, int runs) {
  double ms[64];
  if (runs > 64) runs = 64;
  transfer_ms(b, kind, to_device);
  for (int i = 0; i < runs; i++) ms[i] = transfer_ms(b, kind, to_device);
  return (double)TRANSFER_BYTES / (bench_median(ms, runs) * 1e-3) / 1e9;
}

static void measure_transfers(int runs) {
  transfer_bufs b = {aligned_alloc(64, TRANSFER_BYTES), NULL, 0};
  bool ok = b.pageable && cu_ok(cu.cuMemHostAlloc(&b.pinned, TRANSFER_BYTES, 0), "cuMemHostAlloc") &&
            cu_ok(cu.cuMemAlloc(&b.dev, TRANSFER_BYTES), "cuMemAlloc");
  for (int kind = 0; ok && kind < 3; kind++) {
    memset(kind == 2 ? b.pinned : (void *)b.pageable, 1, TRANSFER_BYTES);  /* faults the pages in */
    g.h2d[kind] = transfer_gbps(&b, kind, true, runs);
    g.d2h[kind] = transfer_gbps(&b, kind, false, runs);
  }
  if (!ok) g.failed = true;
  else
    printf("transfers of %.0f MiB, GB/s host->device / device->host: kiln (pageable) %.1f / %.1f, "
           "driver pageable %.1f / %.1f, driver pinned %.1f / %.1f\n", TRANSFER_BYTES / MIB, g.h2d[0], g.d2h[0],
           g.h2d[1], g.d2h[1], g.h2d[2], g.d2h[2]);
  if (b.dev) cu.cuMemFree(b.dev);
  if (b.pinned) cu.cuMemFreeHost(b.pinned);
  free(b.pageable);
}

bool gpu_prologue(int runs) {
  if (!gpu_info()) return false;
  g.measured = true;
  if (!first_kernel_memory()) g.failed = true;
  compare_rand();
  measure_transfers(runs);
  return true;
}

bool gpu_failed(void) { return g.failed; }

/* ---- the yardsticks ----------------------------------------------------------------- */
/* Fills ms[0..runs) with the mean device time of reps calls of fn, after
 * one warm-up call. */
static bool time_calls(bool (*fn)(void *ctx), void *ctx, int reps, double *ms, int runs) {
  if (!fn(ctx)) return false;
  for (int r = 0; r < runs; r++) {
    bool ok = gpu_clock_start();
    for (int i = 0; ok && i < reps; i++) ok = fn(ctx);
    ms[r] = ok ? gpu_clock_ms() / reps : NAN;
    if (isnan(ms[r])) return false;
  }
  return true;
}

typedef struct {
  CUdeviceptr src, dst;
  size_t bytes;
} copy_ctx;

static bool copy_once(void *p) {
  copy_ctx *c = p;
  return cu_ok(cu.cuMemcpyDtoDAsync(c->dst, c->src, c->bytes, rt_cuda_stream(0)), "cuMemcpyDtoDAsync");
}

bool gpu_copy_times(double bytes, int reps, double *ms, int runs) {
  copy_ctx c = {0, 0, (size_t)(bytes / 2)};
  bool ok = cu_ok(cu.cuMemAlloc(&c.src, c.bytes), "cuMemAlloc") && cu_ok(cu.cuMemAlloc(&c.dst, c.bytes), "cuMemAlloc") &&
            time_calls(copy_once, &c, reps, ms, runs);
  cu.cuStreamSynchronize(rt_cuda_stream(0));   /* after a failure, copies may still be queued */
  if (c.src) cu.cuMemFree(c.src);
  if (c.dst) cu.cuMemFree(c.dst);
  return ok;
}

/* One cuBLASLt product and what it needs: cuBLASLt is column-major, so
 * kiln's row-major C = A B is its C^T = B^T A^T (runtime/cublas.c does the
 * same): its A is our B, its B our A. */
typedef struct {
  cublasLtHandle_t h;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t lay[3];    /* its A (our B), its B (our A), D */
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulHeuristicResult_t algo;
  CUdeviceptr a, b, d, work;
} gemm_ctx;

static bool gemm_once(void *p) {
  gemm_ctx *c = p;
  float one = 1, zero = 0;
  return lt_ok(lt.cublasLtMatmul(c->h, c->op, &one, (void *)c->b, c->lay[0], (void *)c->a, c->lay[1], &zero,
                                 (void *)c->d, c->lay[2], (void *)c->d, c->lay[2], &c->algo.algo, (void *)c->work,
                                 c->algo.workspaceSize, rt_cuda_stream(0)),
               "cublasLtMatmul");
}

/* Device memory for the operands, A and B uploaded, and the workspace. */
static bool gemm_memory(gemm_ctx *c, const gpu_gemm *m) {
  size_t a = (size_t)(m->m * m->k) * 4, b = (size_t)(m->k * m->n) * 4, d = (size_t)(m->m * m->n) * 4;
  return cu_ok(cu.cuMemAlloc(&c->a, a), "cuMemAlloc") && cu_ok(cu.cuMemAlloc(&c->b, b), "cuMemAlloc") &&
         cu_ok(cu.cuMemAlloc(&c->d, d), "cuMemAlloc") && cu_ok(cu.cuMemAlloc(&c->work, GEMM_WORKSPACE), "cuMemAlloc") &&
         cu_ok(cu.cuMemcpyHtoD(c->a, m->a, a), "cuMemcpyHtoD") && cu_ok(cu.cuMemcpyHtoD(c->b, m->b, b), "cuMemcpyHtoD");
}

static bool gemm_layouts(gemm_ctx *c, const gpu_gemm *m) {
  uint64_t n = (uint64_t)m->n, k = (uint64_t)m->k, rows = m->b_trans ? k : n, cols = m->b_trans ? n : k;
  return lt_ok(lt.cublasLtMatrixLayoutCreate(&c->lay[0], CUDA_R_32F, rows, cols, (int64_t)rows),
               "cublasLtMatrixLayoutCreate") &&
         lt_ok(lt.cublasLtMatrixLayoutCreate(&c->lay[1], CUDA_R_32F, k, (uint64_t)m->m, (int64_t)k),
               "cublasLtMatrixLayoutCreate") &&
         lt_ok(lt.cublasLtMatrixLayoutCreate(&c->lay[2], CUDA_R_32F, n, (uint64_t)m->m, (int64_t)n),
               "cublasLtMatrixLayoutCreate");
}

/* The handle, the descriptors (no epilogue: CUBLASLT_EPILOGUE_DEFAULT) and
 * the heuristic's first algorithm, as runtime/cublas.c picks one. */
static bool gemm_setup(gemm_ctx *c, const gpu_gemm *m) {
  cublasComputeType_t compute = rt_opts()->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  int32_t ta = m->b_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  uint64_t max_work = GEMM_WORKSPACE;
  int found = 0;
  if (!load_cublaslt()) {
    printf("ERROR gpu: cuBLASLt: %s\n", kiln_last_error());
    g.failed = true;
    return false;
  }
  bool ok = rt_cuda_stream(0) && gemm_memory(c, m) && lt_ok(lt.cublasLtCreate(&c->h), "cublasLtCreate") &&
            lt_ok(lt.cublasLtMatmulDescCreate(&c->op, compute, CUDA_R_32F), "cublasLtMatmulDescCreate") &&
            lt_ok(lt.cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
                  "cublasLtMatmulDescSetAttribute") &&
            gemm_layouts(c, m) && lt_ok(lt.cublasLtMatmulPreferenceCreate(&c->pref), "cublasLtMatmulPreferenceCreate") &&
            lt_ok(lt.cublasLtMatmulPreferenceSetAttribute(c->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_work,
                                                          sizeof max_work),
                  "cublasLtMatmulPreferenceSetAttribute") &&
            lt_ok(lt.cublasLtMatmulAlgoGetHeuristic(c->h, c->op, c->lay[0], c->lay[1], c->lay[2], c->lay[2], c->pref, 1,
                                                    &c->algo, &found),
                  "cublasLtMatmulAlgoGetHeuristic");
  if (ok && found == 0) ok = lt_ok(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulAlgoGetHeuristic");
  return ok;
}

static void gemm_teardown(gemm_ctx *c) {
  if (c->pref) lt.cublasLtMatmulPreferenceDestroy(c->pref);
  for (int i = 0; i < 3; i++)
    if (c->lay[i]) lt.cublasLtMatrixLayoutDestroy(c->lay[i]);
  if (c->op) lt.cublasLtMatmulDescDestroy(c->op);
  if (c->h) lt.cublasLtDestroy(c->h);
  CUdeviceptr *p[] = {&c->a, &c->b, &c->d, &c->work};
  cu.cuStreamSynchronize(rt_cuda_stream(0));   /* after a failure, calls may still be queued */
  for (int i = 0; i < 4; i++)
    if (*p[i]) cu.cuMemFree(*p[i]);
}

bool gpu_gemm_times(const gpu_gemm *m, int reps, double *ms, int runs) {
  gemm_ctx c = {0};
  bool ok = gemm_setup(&c, m) && time_calls(gemm_once, &c, reps, ms, runs);
  gemm_teardown(&c);
  return ok;
}

/* ---- JSON ------------------------------------------------------------------------- */
static void json_mib(FILE *f, const char *key, double bytes, bool last) {
  fprintf(f, "\"%s\": ", key);
  bench_json_number(f, bytes / MIB);
  fputs(last ? "}" : ", ", f);
}

static void json_device(FILE *f) {
  fputs(" \"device\": {\"requested\": \"cuda:0\", \"usable\": ", f);
  fputs(g.why[0] ? "false, \"why\": " : "true, \"why\": ", f);
  bench_json_string(f, g.why);
  fprintf(f, ", \"toolkit\": \"%d.%d\", \"nvrtc\": \"%s\", \"nvrtc_include\": ", CUDA_VERSION / 1000,
          CUDA_VERSION % 1000 / 10, cuda_nvrtc_version());
  bench_json_string(f, cuda_include_dir());
  fputs(", \"cublaslt\": ", f);
  bench_json_string(f, g.cublaslt);
  if (g.why[0]) {
    fputs("},\n", f);
    return;
  }
  fprintf(f, ", \"driver\": \"%d.%d\", \"name\": ", g.driver / 1000, g.driver % 1000 / 10);
  bench_json_string(f, g.name);
  fprintf(f, ", \"compute_capability\": \"%d.%d\", \"sms\": %d, ", g.cc_major, g.cc_minor, g.sms);
  json_mib(f, "memory_mib", (double)g.total, true);
  fputs(",\n", f);
}

static void json_transfers(FILE *f) {
  static const char *kinds[] = {"kiln_pageable", "driver_pageable", "driver_pinned"};
  fprintf(f, " \"transfers\": {\"mib\": %.0f", TRANSFER_BYTES / MIB);
  for (int k = 0; k < 3; k++) {
    fprintf(f, ", \"%s_h2d_gbps\": ", kinds[k]);
    bench_json_number(f, g.h2d[k]);
    fprintf(f, ", \"%s_d2h_gbps\": ", kinds[k]);
    bench_json_number(f, g.d2h[k]);
  }
  fputs("},\n", f);
}

void gpu_json(FILE *f) {
  json_device(f);
  if (!g.measured) {   /* no GPU, or --info 1 */
    const char *why = g.why[0] ? "not run: no GPU" : "not run: --info 1";
    fprintf(f, " \"memory\": \"%s\", \"transfers\": \"%s\", \"rand\": \"%s\",\n", why, why, why);
    return;
  }
  fputs(" \"memory\": {", f);
  json_mib(f, "used_with_context_mib", (double)g.ctx_used, false);
  json_mib(f, "used_after_first_kernel_mib", (double)g.first_used, false);
  json_mib(f, "kiln_allocated_mib", (double)g.first_kiln.allocated_bytes, false);
  json_mib(f, "kiln_reserved_mib", (double)g.first_kiln.reserved_bytes, false);
  json_mib(f, "pytorch_reference_mib", PYTORCH_FIRST_KERNEL_MIB * MIB, true);
  fputs(",\n", f);
  json_transfers(f);
  fputs(" \"rand\": ", f);
  bench_json_string(f, g.rand);
  fputs(",\n", f);
}
