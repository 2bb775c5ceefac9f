/* cuda_device.c: the CUDA device behind the device interface (device.h).
 *
 * The driver API comes from rt_cuda_sym (libcuda.so.1 is dlopened, never
 * linked: runtime/cuda.c); the toolkit's cuda.h gives only types, and the
 * exact versioned symbol of each function (cuMemAlloc is cuMemAlloc_v2).
 * Per device, made on first use: the primary context, one stream that every
 * copy and launch is queued on (so work runs in the order realize issued it
 * and a freed block can be handed out again at once: its next user is
 * queued after its last), a caching allocator by size class, two pinned
 * staging buffers for large copies, and the loaded modules by kernel key
 * (with the scratch of a grid-wide reduction: a few KiB per such kernel,
 * outside the allocator and its statistics).
 * The host waits only when it reads a result (copy_out), and before memory
 * goes back to the driver.
 *
 * Locking: `cd.lock` guards device setup, the free lists, the statistics and
 * the module tables (buffers are released from any thread). Realizes on
 * several threads queue on the one stream at once: a large copy holds
 * `cd.stage` while it uses the staging buffers; two threads compiling one
 * kernel keep the module loaded first. */
#include "runtime/device.h"

#include <stdio.h>
#include <string.h>

/* Tests only (rt_cuda_stand_in): what serves cuda:0 instead of the GPU. */
static const rt_device *stand_in;

void rt_cuda_stand_in(const rt_device *d) { __atomic_store_n(&stand_in, d, __ATOMIC_RELEASE); }

static const rt_device *stand_in_for(int index) {
  return index == 0 ? __atomic_load_n(&stand_in, __ATOMIC_ACQUIRE) : NULL;
}

#ifdef KILN_HAVE_CUDA

#include <cuda.h>
#include <pthread.h>
#include <stdlib.h>

#include "codegen_cuda/cuda.h"

#define MAX_DEVICES 16
#define STAGE_MIN ((size_t)1 << 20)    /* copies this large go through pinned staging */
#define STAGE_CHUNK ((size_t)8 << 20)  /* bytes per staging buffer */
#define MODULE_BUCKETS 1024

/* ---- the driver's functions ----------------------------------------------- */
#define XSTR(x) STR(x)
#define STR(x) #x
#define CU_FUNCTIONS(X)                                                                            \
  X(cuDeviceGet) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) \
  X(cuCtxSetCurrent) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuMemAlloc)    \
  X(cuMemFree) X(cuMemsetD8Async) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemcpyHtoDAsync)         \
  X(cuMemcpyDtoHAsync) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize)  \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuLaunchKernel) X(cuGetErrorName)

/* A field per function, typed by cuda.h's own prototype; cuda.h's macros
 * rename both the field and the looked-up symbol to the versioned name. */
#define CU_FIELD(fn) __typeof__(&fn) fn;
static struct {
  CU_FUNCTIONS(CU_FIELD)
} cu;

/* A loaded kernel: the module made from its CUBIN (or PTX) and how to launch it. */
struct rt_device_kernel {
  struct rt_device_kernel *next;
  uint64_t hash;
  char *key;            /* the kernel's k_key; equal hashes are compared in full */
  size_t len;
  CUmodule module;
  CUfunction fn;
  cuda_launch launch;
  CUdeviceptr scratch;  /* launch.scratch bytes for the kernel alone, zeroed
                           when loaded; 0 when it takes none (codegen_cuda/cuda.h) */
};

/* A device allocation; the public struct first, so an rt_buffer * is one. */
typedef struct dev_block {
  rt_buffer pub;
  int cls;
  unsigned gen;         /* the device setup it came from (see dev_free) */
  struct dev_block *next;
} dev_block;

typedef struct {
  bool ready;
  unsigned gen;         /* counts setups: blocks of an earlier one are stale */
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  int cc;               /* compute capability, major*10 + minor */
  dev_block *free[RT_NUM_CLASSES];
  rt_alloc_stats mem;   /* live_bytes: blocks in use; cached_bytes: in the free lists */
  void *stage[2];       /* pinned host memory, STAGE_CHUNK each, made on first large copy */
  CUevent staged[2];    /* recorded after the copy out of stage[i] was queued */
  rt_device_kernel *modules[MODULE_BUCKETS];
} cuda_dev;

static struct {
  pthread_mutex_t lock;
  pthread_mutex_t stage;  /* the staging buffers of every device */
  bool loaded;          /* cu holds every function */
  cuda_dev dev[MAX_DEVICES];
} cd = {.lock = PTHREAD_MUTEX_INITIALIZER, .stage = PTHREAD_MUTEX_INITIALIZER};

/* ---- errors --------------------------------------------------------------- */
/* KILN_OK, or the status of a failed driver call with "CUDA error <name> in
 * <call>" as the last error. */
static kiln_status cu_check(CUresult r, const char *call) {
  if (r == CUDA_SUCCESS) return KILN_OK;
  const char *name = NULL;
  if (!cu.cuGetErrorName || cu.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "unknown";
  ir_error_setf("CUDA error %s in %s", name, call);
  return r == CUDA_ERROR_OUT_OF_MEMORY ? KILN_ERR_MEMORY : KILN_ERR_DEVICE;
}

/* Looks every function up once; false with why when the driver lacks one.
 * Caller holds the lock. */
static bool load_functions(char *why, size_t why_len) {
  if (cd.loaded) return true;
#define CU_LOAD(fn)                                                                  \
  if (!(cu.fn = (__typeof__(&fn))rt_cuda_sym(XSTR(fn)))) {                          \
    snprintf(why, why_len, "libcuda.so.1 lacks %s (driver too old?)", XSTR(fn));     \
    return false;                                                                    \
  }
  CU_FUNCTIONS(CU_LOAD)
#undef CU_LOAD
  return cd.loaded = true;
}

bool rt_cuda_usable(int index, char *why, size_t why_len) {
  if (stand_in_for(index)) return true;
  int n = rt_cuda_count(why, why_len);
  if (n == 0) return false;
  if (index < 0 || index >= n) {
    snprintf(why, why_len, "cuda:%d requested, the driver reports %d device%s", index, n, n == 1 ? "" : "s");
    return false;
  }
  pthread_mutex_lock(&cd.lock);
  bool ok = load_functions(why, why_len);
  pthread_mutex_unlock(&cd.lock);
  return ok && cuda_nvrtc_load(why, why_len);   /* a driver without the toolkit runs no kernel */
}

/* ---- device setup --------------------------------------------------------- */
static kiln_status setup(cuda_dev *d, int index) {
  int major = 0, minor = 0;
  kiln_status st = cu_check(cu.cuDeviceGet(&d->dev, index), "cuDeviceGet");
  if (st == KILN_OK) st = cu_check(cu.cuDevicePrimaryCtxRetain(&d->ctx, d->dev), "cuDevicePrimaryCtxRetain");
  if (st != KILN_OK) return st;
  st = cu_check(cu.cuCtxSetCurrent(d->ctx), "cuCtxSetCurrent");
  if (st == KILN_OK) st = cu_check(cu.cuStreamCreate(&d->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  if (st == KILN_OK)
    st = cu_check(cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev),
                  "cuDeviceGetAttribute");
  if (st == KILN_OK)
    st = cu_check(cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev),
                  "cuDeviceGetAttribute");
  if (st != KILN_OK) {
    if (d->stream) cu.cuStreamDestroy(d->stream);
    cu.cuDevicePrimaryCtxRelease(d->dev);
    *d = (cuda_dev){.gen = d->gen};
    return st;
  }
  d->cc = major * 10 + minor;
  d->gen++;
  d->ready = true;
  return KILN_OK;
}

/* cuda:index, set up and current on this thread; NULL with the last error
 * set when it cannot be used. */
static cuda_dev *device(int index) {
  char why[256];
  if (!rt_cuda_usable(index, why, sizeof why)) {
    ir_error_setf("CUDA not available: %s", why);
    return NULL;
  }
  if (index >= MAX_DEVICES) {
    ir_error_setf("cuda:%d: kiln supports at most %d CUDA devices", index, MAX_DEVICES);
    return NULL;
  }
  cuda_dev *d = &cd.dev[index];
  pthread_mutex_lock(&cd.lock);
  kiln_status st = d->ready ? KILN_OK : setup(d, index);
  pthread_mutex_unlock(&cd.lock);
  if (st == KILN_OK && cu_check(cu.cuCtxSetCurrent(d->ctx), "cuCtxSetCurrent") == KILN_OK) return d;
  return NULL;
}

static CUdeviceptr dptr(const rt_buffer *b) { return (CUdeviceptr)(uintptr_t)b->data; }

/* ---- the caching allocator ------------------------------------------------ */
/* Gives the cached blocks of d back to the driver once its queued work is
 * done (a block in a free list may still be read by a queued kernel). */
static void release_cache(cuda_dev *d) {
  cu.cuStreamSynchronize(d->stream);
  pthread_mutex_lock(&cd.lock);
  for (int c = 0; c < RT_NUM_CLASSES; c++) {
    for (dev_block *b = d->free[c], *next; b; b = next) {
      next = b->next;
      cu.cuMemFree(dptr(&b->pub));
      free(b);
    }
    d->free[c] = NULL;
  }
  d->mem.cached_bytes = 0;
  pthread_mutex_unlock(&cd.lock);
}

static void take(cuda_dev *d, dev_block *b) {
  d->mem.live_bytes += rt_class_size(b->cls);
  if (d->mem.live_bytes > d->mem.peak_bytes) d->mem.peak_bytes = d->mem.live_bytes;
}

/* A cached block of the class, else a new one; when the driver is out of
 * memory, the cache is given back and the allocation tried once more. */
static rt_buffer *dev_alloc(int index, size_t bytes) {
  cuda_dev *d = device(index);
  int cls = rt_size_class(bytes);
  if (!d) return NULL;
  if (cls < 0) {
    ir_error_setf("cuda:%d: cannot allocate %zu bytes", index, bytes);
    return NULL;
  }
  pthread_mutex_lock(&cd.lock);
  dev_block *b = d->free[cls];
  if (b) {
    d->free[cls] = b->next;
    d->mem.cached_bytes -= rt_class_size(cls);
    take(d, b);
  }
  pthread_mutex_unlock(&cd.lock);
  if (!b) {
    CUdeviceptr p = 0;
    CUresult r = cu.cuMemAlloc(&p, rt_class_size(cls));
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      release_cache(d);
      r = cu.cuMemAlloc(&p, rt_class_size(cls));
    }
    if (cu_check(r, "cuMemAlloc") != KILN_OK) return NULL;
    if (!(b = ir_malloc(sizeof *b))) {
      cu.cuMemFree(p);
      ir_error_set("out of host memory");
      return NULL;
    }
    *b = (dev_block){.pub.data = (void *)(uintptr_t)p, .cls = cls};
    pthread_mutex_lock(&cd.lock);
    b->gen = d->gen;
    take(d, b);
    pthread_mutex_unlock(&cd.lock);
  }
  b->next = NULL;
  b->pub.refs = 1;
  b->pub.bytes = bytes;
  b->pub.device = (kiln_device){KILN_CUDA, index};
  b->pub.borrowed = false;
  return &b->pub;
}

/* Back to the free list: the stream orders its next user after its last.
 * A block of an earlier setup (kiln_shutdown came in between) lost its
 * memory with that context: only its record is freed. */
static void dev_free(rt_buffer *pub) {
  dev_block *b = (dev_block *)pub;
  cuda_dev *d = &cd.dev[pub->device.index];
  pthread_mutex_lock(&cd.lock);
  bool live = d->ready && b->gen == d->gen;
  if (live) {
    d->mem.live_bytes -= rt_class_size(b->cls);
    d->mem.cached_bytes += rt_class_size(b->cls);
    b->next = d->free[b->cls];
    d->free[b->cls] = b;
  }
  pthread_mutex_unlock(&cd.lock);
  if (!live) free(b);
}

rt_alloc_stats rt_cuda_memory(int index) {
  pthread_mutex_lock(&cd.lock);
  rt_alloc_stats s = index >= 0 && index < MAX_DEVICES ? cd.dev[index].mem : (rt_alloc_stats){0};
  pthread_mutex_unlock(&cd.lock);
  return s;
}

void rt_cuda_reset_peak(void) {
  pthread_mutex_lock(&cd.lock);
  for (int i = 0; i < MAX_DEVICES; i++) cd.dev[i].mem.peak_bytes = cd.dev[i].mem.live_bytes;
  pthread_mutex_unlock(&cd.lock);
}

void rt_cuda_empty_cache(void) {
  for (int i = 0; i < MAX_DEVICES; i++) {
    pthread_mutex_lock(&cd.lock);
    bool ready = cd.dev[i].ready;
    pthread_mutex_unlock(&cd.lock);
    if (ready && cu.cuCtxSetCurrent(cd.dev[i].ctx) == CUDA_SUCCESS) release_cache(&cd.dev[i]);
  }
}

/* ---- copies --------------------------------------------------------------- */
static kiln_status ensure_staging(cuda_dev *d) {
  kiln_status st = KILN_OK;
  for (int i = 0; i < 2 && st == KILN_OK; i++) {
    if (!d->stage[i]) st = cu_check(cu.cuMemHostAlloc(&d->stage[i], STAGE_CHUNK, 0), "cuMemHostAlloc");
    if (st == KILN_OK && !d->staged[i])
      st = cu_check(cu.cuEventCreate(&d->staged[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  }
  return st;
}

/* Small copies are queued straight from the source, which the driver copies
 * before returning. Large ones go through the two pinned buffers in turn:
 * filling one overlaps the DMA out of the other, and each is refilled only
 * after the copy queued out of it has run (its event). */
static kiln_status copy_in(rt_buffer *dst, const void *src, size_t bytes) {
  cuda_dev *d = device(dst->device.index);
  if (!d) return KILN_ERR_DEVICE;
  if (bytes < STAGE_MIN) return cu_check(cu.cuMemcpyHtoDAsync(dptr(dst), src, bytes, d->stream), "cuMemcpyHtoDAsync");
  pthread_mutex_lock(&cd.stage);
  kiln_status st = ensure_staging(d);
  for (size_t off = 0, i = 0; st == KILN_OK && off < bytes; off += STAGE_CHUNK, i ^= 1) {
    size_t n = bytes - off < STAGE_CHUNK ? bytes - off : STAGE_CHUNK;
    st = cu_check(cu.cuEventSynchronize(d->staged[i]), "cuEventSynchronize");
    if (st != KILN_OK) break;
    memcpy(d->stage[i], (const char *)src + off, n);
    st = cu_check(cu.cuMemcpyHtoDAsync(dptr(dst) + off, d->stage[i], n, d->stream), "cuMemcpyHtoDAsync");
    if (st == KILN_OK) st = cu_check(cu.cuEventRecord(d->staged[i], d->stream), "cuEventRecord");
  }
  pthread_mutex_unlock(&cd.stage);
  return st;
}

/* The host needs the bytes now: each chunk is waited for, then copied out
 * of the pinned buffer. The wait is also where an earlier kernel's failure
 * surfaces. */
static kiln_status copy_out(void *dst, const rt_buffer *src, size_t off, size_t bytes) {
  cuda_dev *d = device(src->device.index);
  if (!d) return KILN_ERR_DEVICE;
  kiln_status st;
  if (bytes < STAGE_MIN) {
    st = cu_check(cu.cuMemcpyDtoHAsync(dst, dptr(src) + off, bytes, d->stream), "cuMemcpyDtoHAsync");
    return st == KILN_OK ? cu_check(cu.cuStreamSynchronize(d->stream), "cuStreamSynchronize") : st;
  }
  pthread_mutex_lock(&cd.stage);
  st = ensure_staging(d);
  for (size_t done = 0; st == KILN_OK && done < bytes; done += STAGE_CHUNK) {
    size_t n = bytes - done < STAGE_CHUNK ? bytes - done : STAGE_CHUNK;
    st = cu_check(cu.cuMemcpyDtoHAsync(d->stage[0], dptr(src) + off + done, n, d->stream), "cuMemcpyDtoHAsync");
    if (st == KILN_OK) st = cu_check(cu.cuStreamSynchronize(d->stream), "cuStreamSynchronize");
    if (st == KILN_OK) memcpy((char *)dst + done, d->stage[0], n);
  }
  pthread_mutex_unlock(&cd.stage);
  return st;
}

/* ---- kernels -------------------------------------------------------------- */
static rt_device_kernel *module_lookup(cuda_dev *d, uint64_t h, const ir_str *key) {
  for (rt_device_kernel *m = d->modules[h % MODULE_BUCKETS]; m; m = m->next)
    if (m->hash == h && m->len == key->len && !memcmp(m->key, key->s, key->len)) return m;
  return NULL;
}

/* NVRTC through the disk cache (diskcache.c): the key is the translation
 * unit's text, the arch and NVRTC's version. */
bool rt_cuda_compile_cached(const char *src, const char *arch, ir_str *out, rt_disk_info *info, char **log,
                            char **err) {
  *info = (rt_disk_info){0};
  if (log) *log = NULL;
  ir_str key = {0}, kind = {0};
  ir_str_printf(&key, "nvrtc %s %s\n%s", cuda_nvrtc_version(), arch, src);
  ir_str_printf(&kind, "cuda-%s-%s", arch, cuda_nvrtc_version());
  size_t start = out->len;
  bool disk = !kind.failed;   /* out of memory the disk cache is skipped (a failed key finds nothing) */
  bool ok = (disk && rt_disk_load(kind.s, &key, out, info)) || cuda_compile(src, arch, out, log, err);
  if (ok && disk && !out->failed && !info->hit) rt_disk_store(kind.s, &key, out->s + start, out->len - start, info);
  ir_str_free(&key);
  ir_str_free(&kind);
  return ok;
}

/* The translation unit of k (the prelude, then k) compiled for the device's
 * arch through the disk cache, into *bin. KILN_DEBUG=3 shows the source and
 * NVRTC's log. */
static kiln_status build(cuda_dev *d, kernel *k, int debug, ir_str *bin, cuda_launch *launch, rt_disk_info *info) {
  ir_str src = {0};
  char *err = NULL, *log = NULL, arch[32];
  ir_str_printf(&src, "%s", cuda_prelude());
  kiln_status st = KILN_OK;
  if (!cuda_emit(k, &src, launch, &err)) {
    ir_error_setf("%s: not supported on CUDA yet: %s", k->name, err ? err : "emit failed");
    st = KILN_ERR_COMPILE;
  } else if (src.failed) {
    ir_error_setf("%s: out of memory emitting CUDA C", k->name);
    st = KILN_ERR_MEMORY;
  } else {
    cuda_arch(d->cc, arch);
    if (debug >= 3)
      fprintf(stderr, "kiln: CUDA C of %s for %s (grid=%d block=%d range=%lld)\n%s", k->name, arch, launch->grid,
              launch->block, (long long)launch->range, src.s);
    if (!rt_cuda_compile_cached(src.s, arch, bin, info, &log, &err)) {
      ir_error_setf("%s: NVRTC failed for %s: %s", k->name, arch, err ? err : "unknown error");
      st = KILN_ERR_COMPILE;
    } else if (debug >= 3) {
      if (info->hit) fprintf(stderr, "kiln: NVRTC log of %s: none (binary from the disk cache)\n", k->name);
      else fprintf(stderr, "kiln: NVRTC log of %s:\n%s\n", k->name, log && *log ? log : "(empty)");
    }
  }
  free(log);
  free(err);
  ir_str_free(&src);
  return st;
}

/* The module and the scratch of m (the stream must be done with them). */
static void unload(rt_device_kernel *m) {
  if (m->scratch) cu.cuMemFree(m->scratch);
  cu.cuModuleUnload(m->module);
}

/* How to launch k: its module's geometry, or for a shape-generic kernel,
 * whose module serves every shape of its structure, the range and grid of
 * k's own sizes (emitting it again gives them; the text is the module's). */
static kiln_status geometry(kernel *k, const rt_device_kernel *m, cuda_launch *geom) {
  *geom = m->launch;
  if (!k->generic) return KILN_OK;
  ir_str src = {0};
  char *err = NULL;
  bool ok = cuda_emit(k, &src, geom, &err) && !src.failed;
  ir_str_free(&src);
  free(err);   /* it emitted before: only memory can fail */
  if (!ok) ir_error_setf("%s: out of memory emitting CUDA C", k->name);
  return ok ? KILN_OK : KILN_ERR_MEMORY;
}

static kiln_status dev_compile(int index, kernel *k, int debug, rt_device_kernel **out, cuda_launch *geom,
                               rt_origin *origin) {
  cuda_dev *d = device(index);
  if (!d) return KILN_ERR_DEVICE;
  ir_str key = {0};
  uint64_t h = k_key(k, &key);
  if (key.failed) {
    ir_str_free(&key);
    ir_error_set("out of host memory");
    return KILN_ERR_MEMORY;
  }
  pthread_mutex_lock(&cd.lock);
  *out = module_lookup(d, h, &key);
  pthread_mutex_unlock(&cd.lock);
  *origin = RT_MEMORY;
  kiln_status st = KILN_OK;
  if (!*out) {
    rt_device_kernel m = {.hash = h, .len = key.len};
    ir_str bin = {0};
    rt_disk_info info;
    st = build(d, k, debug, &bin, &m.launch, &info);
    if (st == KILN_OK && bin.failed) ir_error_set("out of host memory"), st = KILN_ERR_MEMORY;
    *origin = info.hit ? RT_DISK : RT_COMPILED;
    if (st == KILN_OK) st = cu_check(cu.cuModuleLoadData(&m.module, bin.s), "cuModuleLoadData");
    if (st == KILN_OK) {
      st = cu_check(cu.cuModuleGetFunction(&m.fn, m.module, k->name), "cuModuleGetFunction");
      if (st != KILN_OK) unload(&m);
    }
    ir_str_free(&bin);
    if (st == KILN_OK && m.launch.scratch > 0) {
      st = cu_check(cu.cuMemAlloc(&m.scratch, (size_t)m.launch.scratch), "cuMemAlloc");
      if (st == KILN_OK)
        st = cu_check(cu.cuMemsetD8Async(m.scratch, 0, (size_t)m.launch.scratch, d->stream), "cuMemsetD8Async");
      if (st != KILN_OK) unload(&m);
    }
    if (st == KILN_OK && (!(*out = ir_malloc(sizeof **out)) || !(m.key = ir_malloc(key.len + 1)))) {
      free(*out);
      *out = NULL;
      unload(&m);
      ir_error_set("out of host memory");
      st = KILN_ERR_MEMORY;
    }
    if (st == KILN_OK) {
      memcpy(m.key, key.s, key.len);
      pthread_mutex_lock(&cd.lock);
      rt_device_kernel *first = module_lookup(d, h, &key);   /* another thread's compile of k */
      if (!first) {
        m.next = d->modules[h % MODULE_BUCKETS];
        **out = m;
        d->modules[h % MODULE_BUCKETS] = *out;
      }
      pthread_mutex_unlock(&cd.lock);
      if (first) {
        unload(&m);
        free(m.key);
        free(*out);
        *out = first;
      }
    }
  }
  ir_str_free(&key);
  return st == KILN_OK ? geometry(k, *out, geom) : st;
}

/* The generated kernel takes each buffer's address, the args struct by
 * value (bufs' entry for it points at this launch's values, laid out as
 * long long v[nargs]; the driver copies them at the launch), then lo, hi
 * and its scratch (codegen_cuda/cuda.h); it runs on the grid geom gives. */
static kiln_status dev_launch(int index, rt_device_kernel *dk, kernel *k, void *const *bufs, const cuda_launch *l,
                              int debug) {
  cuda_dev *d = device(index);
  if (!d) return KILN_ERR_DEVICE;
  CUdeviceptr *ptrs = ir_malloc(sizeof *ptrs * ((size_t)k->nparams + 1));
  void **params = ir_malloc(sizeof *params * ((size_t)k->nparams + 3));
  if (!ptrs || !params) {
    free(ptrs);
    free(params);
    ir_error_set("out of host memory");
    return KILN_ERR_MEMORY;
  }
  for (int p = 0; p < k->nparams; p++) {
    ptrs[p] = (CUdeviceptr)(uintptr_t)bufs[p];
    params[p] = k->params[p].args ? bufs[p] : (void *)&ptrs[p];
  }
  long long lo = 0, hi = l->range;
  params[k->nparams] = &lo;
  params[k->nparams + 1] = &hi;
  params[k->nparams + 2] = &dk->scratch;
  if (debug >= 3)
    fprintf(stderr, "kiln: launch %s grid=%d block=%d range=%lld\n", k->name, l->grid, l->block, hi);
  kiln_status st = cu_check(cu.cuLaunchKernel(dk->fn, (unsigned)l->grid, 1, 1, (unsigned)l->block, 1, 1, 0,
                                              d->stream, params, NULL),
                            "cuLaunchKernel");
  free(ptrs);
  free(params);
  return st;
}

static kiln_status dev_sync(int index) {
  cuda_dev *d = device(index);
  return d ? cu_check(cu.cuStreamSynchronize(d->stream), "cuStreamSynchronize") : KILN_ERR_DEVICE;
}

static const rt_device cuda_device = {"cuda", dev_alloc, dev_free, copy_in, copy_out, dev_compile, dev_launch, dev_sync};

const rt_device *rt_device_of(kiln_device dev) {
  if (dev.type != KILN_CUDA) return NULL;
  const rt_device *d = stand_in_for(dev.index);
  return d ? d : &cuda_device;
}

/* ---- shutdown ------------------------------------------------------------- */
static void teardown(cuda_dev *d) {
  cu.cuCtxSetCurrent(d->ctx);
  release_cache(d);
  pthread_mutex_lock(&cd.lock);
  for (int b = 0; b < MODULE_BUCKETS; b++) {
    for (rt_device_kernel *m = d->modules[b], *next; m; m = next) {
      next = m->next;
      unload(m);
      free(m->key);
      free(m);
    }
  }
  for (int i = 0; i < 2; i++) {
    if (d->stage[i]) cu.cuMemFreeHost(d->stage[i]);
    if (d->staged[i]) cu.cuEventDestroy(d->staged[i]);
  }
  cu.cuStreamDestroy(d->stream);
  cu.cuDevicePrimaryCtxRelease(d->dev);
  *d = (cuda_dev){.gen = d->gen};
  pthread_mutex_unlock(&cd.lock);
}

void rt_cuda_device_shutdown(void) {
  for (int i = 0; i < MAX_DEVICES; i++)
    if (cd.dev[i].ready) teardown(&cd.dev[i]);
  pthread_mutex_lock(&cd.lock);
  cd.loaded = false;   /* the driver is closed next: its addresses go stale */
  pthread_mutex_unlock(&cd.lock);
  cuda_nvrtc_shutdown();
}

void *rt_cuda_stream(int index) {
  cuda_dev *d = device(index);
  return d ? (void *)d->stream : NULL;
}

#else  /* no CUDA toolkit: kiln has no CUDA back end to run anything with */

bool rt_cuda_usable(int index, char *why, size_t why_len) {
  if (stand_in_for(index)) return true;
  if (rt_cuda_count(why, why_len) > 0) snprintf(why, why_len, "kiln was built without the CUDA toolkit");
  return false;
}

const rt_device *rt_device_of(kiln_device dev) { return dev.type == KILN_CUDA ? stand_in_for(dev.index) : NULL; }

rt_alloc_stats rt_cuda_memory(int index) {
  (void)index;
  return (rt_alloc_stats){0};
}
void rt_cuda_reset_peak(void) {}
void rt_cuda_empty_cache(void) {}
void rt_cuda_device_shutdown(void) {}

#endif

/* ---- public ----------------------------------------------------------------- */
const char *kiln_cuda_unavailable_reason(void) {
  static _Thread_local char why[256];
  if (rt_cuda_usable(0, why, sizeof why)) why[0] = '\0';
  return why;
}

void kiln_empty_cache(void) {
  rt_cuda_empty_cache();
  rt_buffer_cache_free();
}
