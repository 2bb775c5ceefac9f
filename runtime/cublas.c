/* cublas.c: matrix products on a CUDA device through cuBLASLt (device.h).
 *
 * The library is dlopened on first use, never linked: linked, it costs every
 * process ~70 ms and ~230 MB at start (measured with CUDA 13.1). Per device, made on
 * first use: one handle, created with the device's context current, and a
 * workspace from the device's allocator that grows to what the chosen
 * algorithms ask for (at most MAX_WORKSPACE). Calls are queued on the
 * device's stream (rt_cuda_stream), after the kernels realize queued before
 * them, so the host never waits here. Like copies and launches, calls come
 * from realize, one at a time; the lock guards shutdown (ir_dl_once, loading).
 * kiln_shutdown drops the handles and workspaces but leaves the library
 * mapped: unloading it would orphan what its static constructors allocated
 * (LeakSanitizer sees libstdc++'s exception pool), and a later use dlopens
 * the same mapping again. */
#include "runtime/device.h"
#include "ir/dynlib.h"

#ifdef KILN_HAVE_CUDA

#include <cublasLt.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define XSTR(x) STR(x)
#define STR(x) #x
#define SONAME "libcublasLt.so." XSTR(CUBLAS_VER_MAJOR)
#define MAX_DEVICES 16                        /* as cuda_device.c */
#define MAX_WORKSPACE ((size_t)32 << 20)

#define LT_FUNCTIONS(X)                                                                                      \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusName) X(cublasLtMatmulDescCreate)                   \
  X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)                \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate)        \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) \
  X(cublasLtMatmul)

/* A field per function, typed by cublasLt.h's own prototype. */
#define LT_FIELD(fn) __typeof__(&fn) fn;
static struct {
  pthread_mutex_t lock;
  pthread_mutex_t call;  /* one matmul queued at a time: the handles and workspaces are shared */
  ir_dl_lib dl;
  struct { LT_FUNCTIONS(LT_FIELD) } f;
  cublasLtHandle_t handle[MAX_DEVICES];
  rt_buffer *work[MAX_DEVICES];  /* workspaces */
} lt = {.lock = PTHREAD_MUTEX_INITIALIZER, .call = PTHREAD_MUTEX_INITIALIZER, .dl = IR_DL_LIB_INIT};

/* ---- loading -------------------------------------------------------------- */
/* $KILN_CUBLASLT as given, or the soname of the toolkit kiln was built with,
 * then that file in the toolkit's directory. */
kiln_status rt_cublas_load(void) {
#define LT_SYM(fn) {#fn, &lt.f.fn},
  static const ir_dl_sym syms[] = {LT_FUNCTIONS(LT_SYM)};
#undef LT_SYM
  const char *user = rt_opts()->cublaslt;
  char why[256];
  if (ir_dl_once(&lt.dl, user ? user : SONAME, user ? NULL : KILN_CUDA_LIBDIR, syms, sizeof syms / sizeof *syms,
                 why, sizeof why))
    return KILN_OK;
  ir_error_setf("CUDA not available: %s", why);
  return KILN_ERR_DEVICE;
}

void *rt_cublas_sym(const char *name) {
  if (rt_cublas_load() != KILN_OK) return NULL;
  pthread_mutex_lock(&lt.lock);
  void *p = lt.dl.lib ? dlsym(lt.dl.lib, name) : NULL;
  pthread_mutex_unlock(&lt.lock);
  return p;
}

/* KILN_OK, or the status of a failed call with "cuBLASLt error <name> in
 * <call>" as the last error. */
static kiln_status lt_check(cublasStatus_t s, const char *call) {
  if (s == CUBLAS_STATUS_SUCCESS) return KILN_OK;
  const char *name = lt.f.cublasLtGetStatusName(s);
  ir_error_setf("cuBLASLt error %s in %s", name ? name : "unknown", call);
  return s == CUBLAS_STATUS_ALLOC_FAILED ? KILN_ERR_MEMORY : KILN_ERR_DEVICE;
}

/* ---- per device ------------------------------------------------------------ */
/* cuda:index's handle; its stream in *stream (the device's context is then
 * current, as cublasLtCreate needs). */
static kiln_status device_handle(int index, cublasLtHandle_t *h, cudaStream_t *stream) {
  kiln_status st = rt_cublas_load();
  if (st != KILN_OK) return st;
  if (!(*stream = rt_cuda_stream(index))) return KILN_ERR_DEVICE;
  if (index >= MAX_DEVICES) {
    ir_error_setf("cuda:%d: kiln supports at most %d CUDA devices", index, MAX_DEVICES);
    return KILN_ERR_DEVICE;
  }
  if (!lt.handle[index]) st = lt_check(lt.f.cublasLtCreate(&lt.handle[index]), "cublasLtCreate");
  *h = lt.handle[index];
  return st;
}

/* At least bytes of workspace on cuda:index. The old block goes back to the
 * allocator at once: its next user is queued after the calls that used it. */
static kiln_status workspace(int index, size_t bytes, void **p) {
  rt_buffer *w = lt.work[index];
  if (bytes > 0 && (!w || w->bytes < bytes)) {
    rt_buffer *n = rt_device_of((kiln_device){KILN_CUDA, index})->alloc(index, bytes);
    if (!n) return KILN_ERR_MEMORY;
    rt_buffer_release(w);
    lt.work[index] = w = n;
  }
  *p = w ? w->data : NULL;
  return KILN_OK;
}

/* ---- one matmul ------------------------------------------------------------- */
static cudaDataType_t data_type(kiln_dtype t) {
  switch (t) {
  case KILN_F16: return CUDA_R_16F;
  case KILN_BF16: return CUDA_R_16BF;
  case KILN_F64: return CUDA_R_64F;
  default: return CUDA_R_32F;
  }
}

/* TF32 rounds f32 inputs to 10 mantissa bits: only when the user asks. */
static cublasComputeType_t compute_type(const cuda_gemm *g) {
  if (g->compute == KILN_F64) return CUBLAS_COMPUTE_64F;
  return g->a.dtype == KILN_F32 && rt_opts()->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

static cublasLtEpilogue_t epilogue(const cuda_gemm *g) {
  static const cublasLtEpilogue_t e[3][2] = {
    [CUDA_ACT_NONE] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS},
    [CUDA_ACT_RELU] = {CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_RELU_BIAS},
    [CUDA_ACT_GELU_TANH] = {CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS},
  };
  return e[g->act][g->bias >= 0];
}

/* The largest power of two (at most 256) dividing the address: cuBLASLt
 * assumes 256-byte aligned matrices unless told otherwise. */
static uint32_t alignment(const void *p) {
  uint32_t a = 256;
  while (a > 1 && (uintptr_t)p % a) a /= 2;
  return a;
}

/* The descriptors of one product, created by setup and destroyed together. */
typedef struct {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t lay[3];   /* a, b, d (d is also C, with beta 0) */
  cublasLtMatmulPreference_t pref;
} descs;

static kiln_status desc_set(descs *ds, cublasLtMatmulDescAttributes_t a, const void *v, size_t n) {
  return lt_check(lt.f.cublasLtMatmulDescSetAttribute(ds->op, a, v, n), "cublasLtMatmulDescSetAttribute");
}

static kiln_status layout(cublasLtMatrixLayout_t *l, const cuda_gemm_matrix *x, int64_t batch) {
  kiln_status st = lt_check(lt.f.cublasLtMatrixLayoutCreate(l, data_type(x->dtype), (uint64_t)x->rows,
                                                            (uint64_t)x->cols, x->ld),
                            "cublasLtMatrixLayoutCreate");
  int32_t count = (int32_t)batch;
  if (st == KILN_OK && batch > 1)
    st = lt_check(lt.f.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
                  "cublasLtMatrixLayoutSetAttribute");
  if (st == KILN_OK && batch > 1)
    st = lt_check(lt.f.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                        &x->batch_stride, sizeof x->batch_stride),
                  "cublasLtMatrixLayoutSetAttribute");
  return st;
}

static kiln_status setup(descs *ds, const cuda_gemm *g, const void *bias) {
  cudaDataType_t scale = g->compute == KILN_F64 ? CUDA_R_64F : CUDA_R_32F;
  int32_t ta = g->a.trans ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtEpilogue_t ep = epilogue(g);
  uint64_t max_work = MAX_WORKSPACE;
  kiln_status st = lt_check(lt.f.cublasLtMatmulDescCreate(&ds->op, compute_type(g), scale), "cublasLtMatmulDescCreate");
  if (st == KILN_OK) st = desc_set(ds, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  if (st == KILN_OK) st = desc_set(ds, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (st == KILN_OK) st = desc_set(ds, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep);
  if (st == KILN_OK && bias) st = desc_set(ds, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  const cuda_gemm_matrix *m[3] = {&g->a, &g->b, &g->d};
  for (int x = 0; x < 3 && st == KILN_OK; x++) st = layout(&ds->lay[x], m[x], g->batch);
  if (st == KILN_OK)
    st = lt_check(lt.f.cublasLtMatmulPreferenceCreate(&ds->pref), "cublasLtMatmulPreferenceCreate");
  if (st == KILN_OK)
    st = lt_check(lt.f.cublasLtMatmulPreferenceSetAttribute(ds->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                            &max_work, sizeof max_work),
                  "cublasLtMatmulPreferenceSetAttribute");
  return st;
}

static void teardown(descs *ds) {
  if (ds->pref) lt.f.cublasLtMatmulPreferenceDestroy(ds->pref);
  for (int x = 0; x < 3; x++)
    if (ds->lay[x]) lt.f.cublasLtMatrixLayoutDestroy(ds->lay[x]);
  if (ds->op) lt.f.cublasLtMatmulDescDestroy(ds->op);
}

/* One call on matrices at a, b, d: an algorithm for their alignments, a
 * workspace it fits in, then the call. */
static kiln_status call(int index, cublasLtHandle_t h, cudaStream_t stream, descs *ds, const cuda_gemm *g,
                        const void *a, const void *b, void *d) {
  static const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  const void *ptr[4] = {a, b, d, d};
  kiln_status st = KILN_OK;
  for (int x = 0; x < 4 && st == KILN_OK; x++) {
    uint32_t al = alignment(ptr[x]);
    st = lt_check(lt.f.cublasLtMatmulPreferenceSetAttribute(ds->pref, align_attr[x], &al, sizeof al),
                  "cublasLtMatmulPreferenceSetAttribute");
  }
  cublasLtMatmulHeuristicResult_t res = {0};
  int found = 0;
  if (st == KILN_OK)
    st = lt_check(lt.f.cublasLtMatmulAlgoGetHeuristic(h, ds->op, ds->lay[0], ds->lay[1], ds->lay[2], ds->lay[2],
                                                      ds->pref, 1, &res, &found),
                  "cublasLtMatmulAlgoGetHeuristic");
  if (st == KILN_OK && found == 0) st = lt_check(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulAlgoGetHeuristic");
  void *work = NULL;
  if (st == KILN_OK) st = workspace(index, res.workspaceSize, &work);
  double one = 1, zero = 0;
  float onef = 1, zerof = 0;
  bool f64 = g->compute == KILN_F64;
  if (st == KILN_OK)
    st = lt_check(lt.f.cublasLtMatmul(h, ds->op, f64 ? (void *)&one : (void *)&onef, a, ds->lay[0], b, ds->lay[1],
                                      f64 ? (void *)&zero : (void *)&zerof, d, ds->lay[2], d, ds->lay[2], &res.algo,
                                      work, res.workspaceSize, stream),
                  "cublasLtMatmul");
  return st;
}

static char *at(void *base, const cuda_gemm_matrix *x, int64_t off) {
  return (char *)base + (size_t)(x->off + off) * ir_dtypes[x->dtype].size;
}

static kiln_status matmul_locked(int index, const cuda_gemm *g, void *const *bufs, void *temp, int debug) {
  cublasLtHandle_t h = NULL;
  cudaStream_t stream = NULL;
  kiln_status st = device_handle(index, &h, &stream);
  if (st != KILN_OK) return st;
  descs ds = {0};
  st = setup(&ds, g, g->bias >= 0 ? bufs[g->bias] : NULL);
  int64_t calls = cuda_gemm_calls(g);
  if (debug >= 3)
    fprintf(stderr, "kiln: cuBLASLt on cuda:%d: %lld call(s) of %lld x %lld x %lld (batch %lld), A%s ld %lld, "
            "B%s ld %lld, D %s ld %lld, epilogue %d\n", index, (long long)calls, (long long)g->m, (long long)g->n,
            (long long)g->k, (long long)g->batch, g->a.trans ? "^T" : "", (long long)g->a.ld, g->b.trans ? "^T" : "",
            (long long)g->b.ld, g->d.param >= 0 ? "out" : "temp", (long long)g->d.ld, (int)epilogue(g));
  void *d = g->d.param >= 0 ? bufs[g->d.param] : temp;
  for (int64_t c = 0; c < calls && st == KILN_OK; c++) {
    int64_t off[3];
    cuda_gemm_offsets(g, c, off);
    st = call(index, h, stream, &ds, g, at(bufs[g->a.param], &g->a, off[0]), at(bufs[g->b.param], &g->b, off[1]),
              at(d, &g->d, off[2]));
  }
  teardown(&ds);
  return st;
}

/* Only queued: the lock is held for the calls' setup, not their run. */
kiln_status rt_cublas_matmul(int index, const cuda_gemm *g, void *const *bufs, void *temp, int debug) {
  if (!g->call) return KILN_OK;
  pthread_mutex_lock(&lt.call);
  kiln_status st = matmul_locked(index, g, bufs, temp, debug);
  pthread_mutex_unlock(&lt.call);
  return st;
}

void rt_cublas_shutdown(void) {
  pthread_mutex_lock(&lt.lock);
  for (int i = 0; i < MAX_DEVICES; i++) {
    if (lt.handle[i]) lt.f.cublasLtDestroy(lt.handle[i]);
    rt_buffer_release(lt.work[i]);
    lt.handle[i] = NULL;
    lt.work[i] = NULL;
  }
  pthread_mutex_unlock(&lt.lock);
  ir_dl_forget(&lt.dl);
}

#else  /* no CUDA toolkit: no device reaches a matrix product */

kiln_status rt_cublas_load(void) {
  ir_error_setf("CUDA not available: kiln was built without the CUDA toolkit");
  return KILN_ERR_DEVICE;
}

void *rt_cublas_sym(const char *name) {
  (void)name;
  return NULL;
}

kiln_status rt_cublas_matmul(int index, const cuda_gemm *g, void *const *bufs, void *temp, int debug) {
  (void)index, (void)g, (void)bufs, (void)temp, (void)debug;
  return rt_cublas_load();
}

void rt_cublas_shutdown(void) {}

#endif
