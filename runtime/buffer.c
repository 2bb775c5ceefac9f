/* buffer.c: host buffers and the caching allocator behind them. Released
 * blocks are kept in free lists by size class and handed out again, because
 * touching fresh pages costs about 11 ms per 64 MiB; the cache holds at most
 * RT_CACHE_LIMIT bytes and kiln_shutdown frees it. Blocks of 2 MiB and more
 * sit on transparent huge pages, as NumPy's arrays do: a memory-bound kernel
 * then streams at the speed the machine allows instead of waiting on 4 KiB
 * page walks (64M f32 summed: 8.7 -> 5.1 ms on 2 threads). */
#include "runtime/rt.h"
#include "runtime/device.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define RT_ALIGN 64
#define RT_HUGE ((size_t)2 << 20)  /* a huge page, where large blocks start and end */
#define RT_CACHE_LIMIT ((size_t)1 << 30)  /* beyond 1 GiB, released blocks go back to the OS */

/* The public struct first, so an rt_buffer * is a block *. */
typedef struct block {
  rt_buffer pub;
  size_t cap;           /* bytes of data: the class size */
  int cls;              /* size class, -1 for borrowed memory */
  struct block *next;   /* free list link while cached */
} block;

static struct {
  pthread_mutex_t lock;
  block *free[RT_NUM_CLASSES];
  rt_alloc_stats stats;
} cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Classes are 2^k and 1.5 * 2^k (at most 33% waste, usually much less);
 * class 2k is 2^k bytes, class 2k+1 is 1.5 * 2^k. */
size_t rt_class_size(int cls) {
  size_t p = (size_t)1 << (cls / 2);
  return cls % 2 ? p + p / 2 : p;
}

/* The smallest class that holds bytes; -1 if too big. Below 256 only the
 * powers of two 64 and 128 are used: aligned_alloc wants a size that is a
 * multiple of the alignment, and 96 is not. */
int rt_size_class(size_t bytes) {
  if (bytes <= 2 * RT_ALIGN) return bytes <= RT_ALIGN ? 12 : 14;  /* 2^6, 2^7 */
  if (bytes > ((size_t)1 << 62)) return -1;
  int k = 63 - __builtin_clzll((unsigned long long)(bytes - 1));  /* 2^k < bytes <= 2^(k+1) */
  return bytes <= rt_class_size(2 * k + 1) ? 2 * k + 1 : 2 * k + 2;
}

/* A cached block of class cls, or NULL. Caller holds the lock. */
static block *cache_pop(int cls) {
  block *b = cache.free[cls];
  if (b) {
    cache.free[cls] = b->next;
    cache.stats.cached_bytes -= b->cap;
  }
  return b;
}

static void free_list(block *b) {
  while (b) {
    block *next = b->next;
    free(b->pub.data);
    free(b);
    b = next;
  }
}

/* Empties the cache; the blocks are freed after the lock is dropped. */
void rt_buffer_cache_free(void) {
  block *all = NULL;
  pthread_mutex_lock(&cache.lock);
  for (int c = 0; c < RT_NUM_CLASSES; c++) {
    block *b;
    while ((b = cache_pop(c))) {
      b->next = all;
      all = b;
    }
  }
  pthread_mutex_unlock(&cache.lock);
  free_list(all);
}

/* cap bytes, 64-byte aligned; from 2 MiB on, whole huge pages asked for with
 * MADV_HUGEPAGE (the kernel's THP "madvise" mode; elsewhere it is a hint
 * that may be ignored, and a failing madvise changes nothing). */
static void *host_alloc(size_t cap) {
  if (cap < RT_HUGE) return ir_aligned_alloc(RT_ALIGN, cap);
  size_t bytes = (cap + RT_HUGE - 1) & ~(RT_HUGE - 1);
  void *p = ir_aligned_alloc(RT_HUGE, bytes);
  if (p) (void)madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

/* A fresh block; on failure the cache is dropped (its memory may be what is
 * missing) and the allocation tried once more. */
static block *block_new(int cls) {
  size_t cap = rt_class_size(cls);
  for (int attempt = 0; attempt < 2; attempt++) {
    block *b = ir_malloc(sizeof *b);
    void *data = b ? host_alloc(cap) : NULL;
    if (data) {
      *b = (block){.pub = {.data = data}, .cap = cap, .cls = cls};
      return b;
    }
    free(b);
    rt_buffer_cache_free();
  }
  return NULL;
}

static void stats_take(size_t cap) {
  cache.stats.live_bytes += cap;
  if (cache.stats.live_bytes > cache.stats.peak_bytes) cache.stats.peak_bytes = cache.stats.live_bytes;
}

rt_buffer *rt_buffer_alloc(size_t bytes) {
  (void)rt_opts();   /* the IR counts buffers through the runtime: set up first */
  int cls = rt_size_class(bytes);
  if (cls < 0) return NULL;
  pthread_mutex_lock(&cache.lock);
  block *b = cache_pop(cls);
  if (b) stats_take(b->cap);
  pthread_mutex_unlock(&cache.lock);
  if (!b) {
    if (!(b = block_new(cls))) return NULL;
    pthread_mutex_lock(&cache.lock);
    stats_take(b->cap);
    pthread_mutex_unlock(&cache.lock);
  }
  b->next = NULL;
  b->pub.refs = 1;
  b->pub.bytes = bytes;
  b->pub.device = (kiln_device){KILN_CPU, 0};
  b->pub.borrowed = false;
  return &b->pub;
}

rt_buffer *rt_buffer_lend(void *data, size_t bytes, kiln_device dev, void (*on_release)(void *ctx), void *ctx) {
  (void)rt_opts();   /* as rt_buffer_alloc */
  block *b = ir_malloc(sizeof *b);
  if (!b) return NULL;
  *b = (block){.pub = {.refs = 1, .data = data, .bytes = bytes, .device = dev, .borrowed = true,
                       .on_release = on_release, .release_ctx = ctx},
               .cls = -1};
  return &b->pub;
}

rt_buffer *rt_buffer_borrow(void *data, size_t bytes) {
  return rt_buffer_lend(data, bytes, (kiln_device){KILN_CPU, 0}, NULL, NULL);
}

/* A device kernel queued before the last release may still read the memory:
 * its owner hears only after the device is done. */
static void borrowed_free(rt_buffer *pub) {
  const rt_device *dev = rt_device_of(pub->device);
  if (pub->on_release) {
    if (dev) dev->sync(pub->device.index);
    pub->on_release(pub->release_ctx);
  }
  free(pub);
}

void rt_buffer_retain(rt_buffer *b) {
  if (b) __atomic_add_fetch(&b->refs, 1, __ATOMIC_RELAXED);
}

/* Keeps the block unless the cache is full; returns whether it did. */
static bool cache_push(block *b) {
  pthread_mutex_lock(&cache.lock);
  cache.stats.live_bytes -= b->cap;
  bool keep = cache.stats.cached_bytes + b->cap <= RT_CACHE_LIMIT;
  if (keep) {
    b->next = cache.free[b->cls];
    cache.free[b->cls] = b;
    cache.stats.cached_bytes += b->cap;
  }
  pthread_mutex_unlock(&cache.lock);
  return keep;
}

void rt_buffer_release(rt_buffer *pub) {
  if (!pub || __atomic_sub_fetch(&pub->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  if (pub->borrowed) {
    borrowed_free(pub);
    return;
  }
  const rt_device *dev = rt_device_of(pub->device);
  if (dev) {   /* device memory goes back to its device's allocator */
    dev->free(pub);
    return;
  }
  block *b = (block *)pub;
  if (cache_push(b)) return;
  free(b->pub.data);
  free(b);
}

/* ---- snapshots (kiln_assign) ------------------------------------------------
 * A snapshot is a borrowed buffer over the memory of its origin, which it
 * holds a reference to (what its release drops). snap_lock guards the
 * pairing of an origin's snapshot pointer and the snapshot's owner. */
static pthread_mutex_t snap_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct {
  rt_buffer *self;      /* the snapshot */
  rt_buffer *owner;     /* whose memory it reads: its origin, or a copy of the origin's old contents */
  rt_buffer *origin;    /* NULL once preserved */
} snapshot_ctx;

static void snapshot_gone(void *p) {
  snapshot_ctx *c = p;
  pthread_mutex_lock(&snap_lock);
  if (c->origin && c->origin->snapshot == c->self) c->origin->snapshot = NULL;
  pthread_mutex_unlock(&snap_lock);
  rt_buffer_release(c->owner);
  free(c);
}

rt_buffer *rt_buffer_snapshot(rt_buffer *b) {
  pthread_mutex_lock(&snap_lock);
  rt_buffer *s = b->snapshot;
  if (s) {
    rt_buffer_retain(s);
  } else {
    snapshot_ctx *c = ir_malloc(sizeof *c);
    s = c ? rt_buffer_lend(b->data, b->bytes, b->device, snapshot_gone, c) : NULL;
    if (s) {
      *c = (snapshot_ctx){s, b, b};
      rt_buffer_retain(b);
      b->snapshot = s;
    } else {
      free(c);
    }
  }
  pthread_mutex_unlock(&snap_lock);
  return s;
}

/* A copy of b's bytes on b's device. */
static rt_buffer *copy_of(const rt_buffer *b) {
  const rt_device *dev = rt_device_of(b->device);
  rt_buffer *c = dev ? dev->alloc(b->device.index, b->bytes) : rt_buffer_alloc(b->bytes);
  if (!c) return NULL;
  if (!dev) {
    memcpy(c->data, b->data, b->bytes);
    return c;
  }
  void *host = ir_malloc(b->bytes + 1);   /* the device interface copies through the host */
  kiln_status st = host ? dev->copy_out(host, b, 0, b->bytes) : KILN_ERR_MEMORY;
  if (st == KILN_OK) st = dev->copy_in(c, host, b->bytes);
  if (st == KILN_OK) st = dev->sync(b->device.index);
  free(host);
  if (st == KILN_OK) return c;
  rt_buffer_release(c);
  return NULL;
}

kiln_status rt_buffer_preserve(rt_buffer *b) {
  pthread_mutex_lock(&snap_lock);
  rt_buffer *s = b->snapshot;
  if (s) rt_buffer_retain(s);   /* ours, while we copy */
  b->snapshot = NULL;           /* readers from now on get a new one */
  pthread_mutex_unlock(&snap_lock);
  if (!s) return KILN_OK;
  kiln_status st = KILN_OK;
  if (__atomic_load_n(&s->refs, __ATOMIC_ACQUIRE) > 1) {   /* someone besides us still reads the old contents */
    rt_buffer *copy = copy_of(b);
    if (copy) {
      snapshot_ctx *c = s->release_ctx;
      pthread_mutex_lock(&snap_lock);
      s->data = copy->data;
      c->owner = copy;
      c->origin = NULL;
      pthread_mutex_unlock(&snap_lock);
      rt_buffer_release(b);   /* the snapshot no longer reads it */
    } else {
      ir_error_set("assign: out of memory keeping the old value for the pending tensors that read it");
      st = KILN_ERR_MEMORY;
      pthread_mutex_lock(&snap_lock);
      if (!b->snapshot) b->snapshot = s;   /* as it was */
      pthread_mutex_unlock(&snap_lock);
    }
  } else {
    snapshot_ctx *c = s->release_ctx;   /* nobody reads it: it forgets its origin */
    pthread_mutex_lock(&snap_lock);
    c->origin = NULL;
    pthread_mutex_unlock(&snap_lock);
  }
  rt_buffer_release(s);
  return st;
}

rt_buffer *rt_buffer_shared(rt_buffer *b) {
  rt_buffer *r = b;
  pthread_mutex_lock(&snap_lock);
  if (b->on_release == snapshot_gone && ((snapshot_ctx *)b->release_ctx)->origin)
    r = ((snapshot_ctx *)b->release_ctx)->origin;
  rt_buffer_retain(r);
  pthread_mutex_unlock(&snap_lock);
  return r;
}

static bool dense_view(const int64_t *strides, int ndim, const int64_t *shape) {
  int64_t want[KILN_MAX_DIMS];
  ir_contiguous_strides(ndim, shape, want);
  for (int d = 0; d < ndim; d++)
    if (shape[d] != 1 && strides[d] != want[d]) return false;
  return true;
}

kiln_status rt_copy_view(rt_buffer *dst, const int64_t *dst_strides, int64_t dst_offset, rt_buffer *src,
                         const int64_t *src_strides, int64_t src_offset, size_t es, int ndim, const int64_t *shape) {
  int64_t n = ir_numel(ndim, shape);
  if (n <= 0) return KILN_OK;
  size_t bytes = (size_t)n * es;
  const rt_device *sdev = rt_device_of(src->device), *ddev = rt_device_of(dst->device);
  char *d = (char *)dst->data + dst_offset * (int64_t)es;
  const char *from = (const char *)src->data + src_offset * (int64_t)es;
  if (!sdev && !ddev && src != dst) {
    ir_copy_view(d, dst_strides, from, src_strides, es, ndim, shape);
    return KILN_OK;
  }
  if ((sdev && !dense_view(src_strides, ndim, shape)) || (ddev && !dense_view(dst_strides, ndim, shape))) {
    ir_error_set("a strided view on a GPU cannot be written in place yet");
    return KILN_ERR_ARG;
  }
  char *tmp = ir_malloc(bytes);   /* the source, dense on the host */
  if (!tmp) {
    ir_error_set("out of memory copying a view");
    return KILN_ERR_MEMORY;
  }
  kiln_status st = KILN_OK;
  if (sdev) st = sdev->copy_out(tmp, src, (size_t)src_offset * es, bytes);
  else ir_copy_view(tmp, NULL, from, src_strides, es, ndim, shape);
  if (st == KILN_OK && ddev) {
    st = ddev->copy_in(&(rt_buffer){.data = d, .bytes = bytes, .device = dst->device}, tmp, bytes);
    if (st == KILN_OK) st = ddev->sync(dst->device.index);
  } else if (st == KILN_OK) {
    ir_copy_view(d, dst_strides, tmp, NULL, es, ndim, shape);
  }
  free(tmp);
  return st;
}

void rt_buffer_reset_peak(void) {
  pthread_mutex_lock(&cache.lock);
  cache.stats.peak_bytes = cache.stats.live_bytes;
  pthread_mutex_unlock(&cache.lock);
}

rt_alloc_stats rt_buffer_stats(void) {
  pthread_mutex_lock(&cache.lock);
  rt_alloc_stats s = cache.stats;
  pthread_mutex_unlock(&cache.lock);
  return s;
}
