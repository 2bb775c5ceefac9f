/* cache.c: the in-memory kernel cache. A kernel's key is the hash of its
 * printed kernel IR and the JIT's target (the text is compared in full on a
 * hash match); building the same expression again compiles nothing. Owns the
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
  char *key;            /* the kernel text: equal hashes are compared in full */
  cpu_kernel_fn fn;
} cache_entry;

#define CACHE_BUCKETS 4096

static struct {
  pthread_mutex_t mu;
  cpu_jit *jit;
  cache_entry *bucket[CACHE_BUCKETS];
} cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

static cpu_jit *jit_get(char **err) {
  if (!cache.jit) cache.jit = cpu_jit_new(err);
  return cache.jit;
}

static cache_entry *lookup(uint64_t h, const char *text) {
  for (cache_entry *e = cache.bucket[h % CACHE_BUCKETS]; e; e = e->next)
    if (e->hash == h && !strcmp(e->key, text)) return e;
  return NULL;
}

static void debug_ir(kernel *k, const char *text, int debug, ir_str *llvm) {
  if (debug < 3) return;
  fprintf(stderr, "kiln: kernel IR\n%s", text);
  if (llvm->s) fprintf(stderr, "kiln: optimised LLVM IR of %s\n%s", k->name, llvm->s);
}

cpu_kernel_fn rt_kernel_get(kernel *k, const char *text, int debug, bool *hit) {
  pthread_mutex_lock(&cache.mu);
  char *err = NULL;
  cpu_jit *jit = jit_get(&err);
  cpu_kernel_fn fn = NULL;
  if (jit) {
    const char *target = cpu_jit_target(jit);
    uint64_t h = ir_hash_bytes(text, strlen(text), ir_hash_bytes(target, strlen(target), 0));
    cache_entry *e = lookup(h, text);
    *hit = e != NULL;
    if (e) fn = e->fn;
    else {
      ir_str llvm = {0};
      fn = cpu_jit_compile(jit, k, debug >= 3 ? &llvm : NULL, &err);
      debug_ir(k, text, debug, &llvm);
      ir_str_free(&llvm);
      if (fn) {
        e = calloc(1, sizeof *e);
        IR_ASSERT(e);
        *e = (cache_entry){cache.bucket[h % CACHE_BUCKETS], h, strdup(text), fn};
        IR_ASSERT(e->key);
        cache.bucket[h % CACHE_BUCKETS] = e;
      }
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
