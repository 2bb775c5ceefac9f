/* cache.c: the in-memory kernel cache. A kernel's key is the hash of its
 * normalized kernel IR (k_key) and the JIT's target (the key is compared in
 * full on a hash match); building the same expression again compiles nothing. Owns the
 * process's one CPU JIT. */
#include "rt.h"
#include "rt_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cache_entry {
  struct cache_entry *next;
  uint64_t hash;
  char *key;            /* the kernel's k_key: equal hashes are compared in full */
  size_t len;
  cpu_kernel_fn fn;
} cache_entry;

#define CACHE_BUCKETS 4096

static struct {
  pthread_mutex_t mu;
  cpu_jit *jit;
  uint64_t target_hash; /* the JIT's target string, hashed once */
  cache_entry *bucket[CACHE_BUCKETS];
} cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

static cpu_jit *jit_get(char **err) {
  if (!cache.jit) {
    cache.jit = cpu_jit_new(err);
    const char *t = cache.jit ? cpu_jit_target(cache.jit) : "";
    cache.target_hash = ir_hash_bytes(t, strlen(t), 0);
  }
  return cache.jit;
}

static cache_entry *lookup(uint64_t h, const ir_str *key) {
  for (cache_entry *e = cache.bucket[h % CACHE_BUCKETS]; e; e = e->next)
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

static cache_entry *insert(uint64_t h, const ir_str *key, cpu_kernel_fn fn) {
  cache_entry *e = calloc(1, sizeof *e);
  IR_ASSERT(e);
  *e = (cache_entry){cache.bucket[h % CACHE_BUCKETS], h, malloc(key->len + 1), key->len, fn};
  IR_ASSERT(e->key);
  memcpy(e->key, key->s, key->len);
  cache.bucket[h % CACHE_BUCKETS] = e;
  return e;
}

cpu_kernel_fn rt_kernel_get(kernel *k, const ir_str *key, int debug, bool *hit) {
  pthread_mutex_lock(&cache.mu);
  char *err = NULL;
  cpu_jit *jit = jit_get(&err);
  cpu_kernel_fn fn = NULL;
  if (jit) {
    uint64_t h = ir_hash_bytes(key->s, key->len, cache.target_hash);
    cache_entry *e = lookup(h, key);
    *hit = e != NULL;
    if (e) fn = e->fn;
    else {
      ir_str llvm = {0};
      fn = cpu_jit_compile(jit, k, debug >= 3 ? &llvm : NULL, &err);
      debug_ir(k, debug, &llvm);
      ir_str_free(&llvm);
      if (fn) insert(h, key, fn);
    }
  }
  if (!fn) ir_error_setf("%s: compile failed: %s", k->name, err ? err : "unknown error");
  free(err);
  pthread_mutex_unlock(&cache.mu);
  return fn;
}

void rt_cache_shutdown(void) {
  pthread_mutex_lock(&cache.mu);
  for (int b = 0; b < CACHE_BUCKETS; b++) {
    for (cache_entry *e = cache.bucket[b], *n; e; e = n) {
      n = e->next;
      free(e->key);
      free(e);
    }
    cache.bucket[b] = NULL;
  }
  cpu_jit_free(cache.jit);
  cache.jit = NULL;
  pthread_mutex_unlock(&cache.mu);
}
