/* cache.c: the in-memory kernel cache. A kernel's key is its normalized
 * kernel IR (k_key; the JIT's target is constant per process), compared in
 * full on a hash match, so building the same expression again compiles
 * nothing. A miss looks in the disk cache (diskcache.c) before compiling.
 * The compiled code is kept within a budget of code bytes, least recently
 * used first out, and never evicted while held (rt_internal.h). Owns the
 * process's one CPU JIT. Locking: cache.mu guards the table and is held
 * only to look up, insert or unlink; a miss takes cache.miss (so that two
 * threads missing one kernel compile it once) and compiles with cache.mu
 * free, so hits on other threads go on meanwhile; evicted code is freed
 * after cache.mu is dropped (unloading takes the JIT's own lock). */
#include "rt.h"
#include "rt_internal.h"

#include <llvm-c/Core.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_build_id.h"

struct rt_kernel {
  rt_kernel *next;      /* hash chain */
  rt_kernel *older, *newer;  /* the use list: cache.lru.newer is the least recently used */
  uint64_t hash;
  char *key;            /* the kernel's k_key: equal hashes are compared in full */
  size_t len;
  cpu_code *code;
  int holds;            /* launches and holders using the code: evicted only at 0 */
};

#define CACHE_BUCKETS 4096

static struct {
  pthread_mutex_t mu;
  pthread_mutex_t miss; /* held by a miss: the disk load or compile, then the insert */
  cpu_jit *jit;
  uint64_t target_hash; /* the JIT's target string, hashed once */
  ir_str disk_prefix;   /* what, besides k_key, a disk entry's key holds: versions and target */
  rt_kernel *bucket[CACHE_BUCKETS];
  rt_kernel lru;        /* sentinel of the use list */
  uint64_t code_bytes;  /* object bytes of every cached kernel */
} cache = {.mu = PTHREAD_MUTEX_INITIALIZER, .miss = PTHREAD_MUTEX_INITIALIZER, .lru = {.older = &cache.lru, .newer = &cache.lru}};

/* kiln's version and build (a hash of the code generator's sources, so a
 * changed back end never loads old objects), LLVM's version, the target. */
static void disk_prefix(const char *target) {
  unsigned maj, min, patch;
  LLVMGetVersion(&maj, &min, &patch);
  ir_str_printf(&cache.disk_prefix, "kiln %s %s\nllvm %u.%u.%u\n%s\n", KILN_VERSION, KILN_BUILD_ID, maj, min, patch,
                target);
}

/* The JIT with its target's hash and the disk keys' prefix, made whole or
 * not at all (out of memory it is made again at the next compile: a JIT
 * without its prefix would key disk entries without versions or target). */
static cpu_jit *jit_get(char **err) {
  if (cache.jit) return cache.jit;
  cpu_jit *j = cpu_jit_new(err);
  if (!j) return NULL;
  const char *t = cpu_jit_target(j);
  disk_prefix(t);
  if (cache.disk_prefix.failed) {
    ir_str_free(&cache.disk_prefix);
    cpu_jit_free(j);
    return NULL;   /* *err unset: rt_kernel_get sees the failed allocation */
  }
  cache.target_hash = ir_hash_bytes(t, strlen(t), 0);
  return cache.jit = j;
}

static rt_kernel *lookup(uint64_t h, const ir_str *key) {
  for (rt_kernel *e = cache.bucket[h % CACHE_BUCKETS]; e; e = e->next)
    if (e->hash == h && e->len == key->len && !memcmp(e->key, key->s, key->len)) return e;
  return NULL;
}

static void debug_ir(kernel *k, int debug, ir_str *llvm) {
  if (debug < 3) return;
  ir_str text = {0};
  k_print(&text, k);
  fprintf(stderr, "kiln: kernel IR\n%s", text.s);
  ir_str_free(&text);
  if (llvm->s) fprintf(stderr, "kiln: optimised LLVM IR of %s\n%s", k->name, llvm->s);
}

static void unlink_use(rt_kernel *e) {
  e->older->newer = e->newer;
  e->newer->older = e->older;
}

static void mark_used(rt_kernel *e) {
  e->older = cache.lru.older;
  e->newer = &cache.lru;
  e->older->newer = e->newer->older = e;
}

/* Takes e out of the table (under cache.mu) onto *dead. */
static void drop(rt_kernel *e, rt_kernel **dead) {
  rt_kernel **p = &cache.bucket[e->hash % CACHE_BUCKETS];
  while (*p != e) p = &(*p)->next;
  *p = e->next;
  unlink_use(e);
  cache.code_bytes -= cpu_code_bytes(e->code);
  e->next = *dead;
  *dead = e;
}

/* Unloads what drop took out; without cache.mu. */
static void free_dead(rt_kernel *dead) {
  while (dead) {
    rt_kernel *next = dead->next;
    cpu_code_free(dead->code);
    free(dead->key);
    free(dead);
    dead = next;
  }
}

/* Least recently used first, skipping held kernels, until within budget. */
static void evict(rt_kernel **dead) {
  uint64_t budget = (uint64_t)rt_opts()->kernel_cache_bytes;
  for (rt_kernel *e = cache.lru.newer, *n; e != &cache.lru && cache.code_bytes > budget; e = n) {
    n = e->newer;
    if (e->holds) continue;
    drop(e, dead);
    rt_count(&rt_stats_mut()->evictions, 1);
  }
}

/* Under cache.mu; NULL when out of memory (the caller frees code after
 * dropping the lock). */
static rt_kernel *insert(uint64_t h, const ir_str *key, cpu_code *code, rt_kernel **dead) {
  rt_kernel *e = ir_calloc(1, sizeof *e);
  char *k = e ? ir_malloc(key->len + 1) : NULL;
  if (!k) {
    free(e);
    return NULL;
  }
  *e = (rt_kernel){cache.bucket[h % CACHE_BUCKETS], NULL, NULL, h, k, key->len, code, 1};
  memcpy(e->key, key->s, key->len);
  cache.bucket[h % CACHE_BUCKETS] = e;
  mark_used(e);
  cache.code_bytes += cpu_code_bytes(code);
  evict(dead);
  return e;
}

/* Why a CPU disk entry is not kernel k's, or NULL. An entry is the
 * kernel's name (its symbol, which holds a hash of its key), a NUL, the
 * object file: an entry with the right key and checksum but another
 * kernel's payload is refused by its name. */
static const char *entry_mismatch(const kernel *k, const ir_str *entry, size_t *name_len) {
  *name_len = strnlen(entry->s, entry->len);
  if (*name_len == entry->len) return "entry without a kernel name";
  if (strcmp(entry->s, k->name)) return "entry holds another kernel";
  return NULL;
}

static cpu_code *load_from_disk(kernel *k, const ir_str *dkey, rt_disk_info *info) {
  ir_str entry = {0};
  cpu_code *code = NULL;
  if (rt_disk_load("cpu", dkey, &entry, info)) {
    size_t name_len;
    char *err = NULL;
    const char *why = entry_mismatch(k, &entry, &name_len);
    if (!why) code = cpu_jit_load(cache.jit, k, entry.s, entry.s + name_len + 1, entry.len - name_len - 1, &err);
    if (!code) {
      info->hit = false;
      info->dropped = true;
      rt_disk_warn(info, k->name, why ? why : err ? err : "out of memory loading it");
    }
    free(err);
  }
  ir_str_free(&entry);
  return code;
}

static void store_on_disk(kernel *k, const ir_str *dkey, const ir_str *obj, rt_disk_info *info) {
  ir_str entry = {0};
  ir_str_append(&entry, k->name, strlen(k->name) + 1);
  ir_str_cat(&entry, obj);
  if (!entry.failed) rt_disk_store("cpu", dkey, entry.s, entry.len, info);
  ir_str_free(&entry);
}

/* From the disk cache, else compiled (and stored there). NULL with *err.
 * Out of memory the disk key fails, and a failed key neither loads nor
 * stores anything (diskcache.c). */
static cpu_code *load_or_compile(kernel *k, const ir_str *key, int debug, rt_origin *origin, char **err) {
  ir_str dkey = {0}, obj = {0}, llvm = {0};
  ir_str_cat(&dkey, &cache.disk_prefix);
  ir_str_cat(&dkey, key);
  rt_disk_info info = {0};
  cpu_code *code = load_from_disk(k, &dkey, &info);
  *origin = code ? RT_DISK : RT_COMPILED;
  if (!code) {
    bool store = !dkey.failed && rt_opts()->disk_cache;
    code = cpu_jit_compile(cache.jit, k, store ? &obj : NULL, debug >= 3 ? &llvm : NULL, err);
    debug_ir(k, debug, &llvm);
    if (code && obj.len && !obj.failed) store_on_disk(k, &dkey, &obj, &info);
  }
  ir_str_free(&dkey);
  ir_str_free(&obj);
  ir_str_free(&llvm);
  return code;
}

/* The kernel of key held once, or NULL; under cache.mu. */
static rt_kernel *hold(uint64_t h, const ir_str *key) {
  rt_kernel *e = lookup(h, key);
  if (e) {
    e->holds++;
    unlink_use(e);
    mark_used(e);
  }
  return e;
}

/* A miss, under cache.miss: found after all (another thread's miss of the
 * same kernel inserted it meanwhile), else loaded or compiled with
 * cache.mu free, then inserted. */
static rt_kernel *miss(kernel *k, const ir_str *key, uint64_t h, int debug, rt_origin *origin, char **err,
                       bool *oom) {
  rt_kernel *dead = NULL;
  pthread_mutex_lock(&cache.mu);
  rt_kernel *e = hold(h, key);
  pthread_mutex_unlock(&cache.mu);
  if (e) return e;
  cpu_code *code = load_or_compile(k, key, debug, origin, err);
  if (!code) return NULL;
  pthread_mutex_lock(&cache.mu);
  e = insert(h, key, code, &dead);
  pthread_mutex_unlock(&cache.mu);
  free_dead(dead);
  if (!e) cpu_code_free(code);
  *oom = !e;
  return e;
}

rt_kernel *rt_kernel_get(kernel *k, const ir_str *key, int debug, rt_origin *origin) {
  char *err = NULL;
  rt_kernel *e = NULL;
  bool oom = key->failed;   /* a partial key finds nothing and is never stored */
  uint64_t failures = ir_alloc_thread_failures();   /* a compile out of memory may say only "failed" */
  pthread_mutex_lock(&cache.mu);
  bool ok = !oom && jit_get(&err);
  uint64_t h = ok ? ir_hash_bytes(key->s, key->len, cache.target_hash) : 0;
  *origin = RT_MEMORY;
  if (ok) e = hold(h, key);
  pthread_mutex_unlock(&cache.mu);
  if (ok && !e) {
    pthread_mutex_lock(&cache.miss);
    e = miss(k, key, h, debug, origin, &err, &oom);
    pthread_mutex_unlock(&cache.miss);
  }
  oom = oom || ir_alloc_thread_failures() != failures;
  if (!e) ir_error_setf("%s: compile failed: %s", k->name, oom ? "out of memory" : err ? err : "unknown error");
  free(err);
  return e;
}

cpu_kernel_fn rt_kernel_fn(const rt_kernel *e) { return cpu_code_fn(e->code); }

size_t rt_kernel_bytes(const rt_kernel *e) { return cpu_code_bytes(e->code); }

void rt_kernel_retain(rt_kernel *e) {
  pthread_mutex_lock(&cache.mu);
  e->holds++;
  pthread_mutex_unlock(&cache.mu);
}

void rt_kernel_release(rt_kernel *e) {
  if (!e) return;
  rt_kernel *dead = NULL;
  pthread_mutex_lock(&cache.mu);
  if (--e->holds == 0) evict(&dead);
  pthread_mutex_unlock(&cache.mu);
  free_dead(dead);
}

uint64_t rt_kernel_cache_bytes(void) {
  pthread_mutex_lock(&cache.mu);
  uint64_t b = cache.code_bytes;
  pthread_mutex_unlock(&cache.mu);
  return b;
}

void rt_cache_shutdown(void) {
  rt_kernel *dead = NULL;
  pthread_mutex_lock(&cache.mu);
  while (cache.lru.newer != &cache.lru) drop(cache.lru.newer, &dead);
  free_dead(dead);
  cpu_jit_free(cache.jit);
  cache.jit = NULL;
  ir_str_free(&cache.disk_prefix);
  pthread_mutex_unlock(&cache.mu);
}
