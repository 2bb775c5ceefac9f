/* dynlib.c: the one loader of optional shared libraries (the CUDA driver,
 * NVRTC, cuBLASLt): dlopen by name, a fallback directory, symbols by table,
 * once per library. */
#include "ir/dynlib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static void *open_lib(const char *name, const char *dir) {
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib && dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  return lib;
}

void *ir_dl_load(const char *name, const char *dir, const ir_dl_sym *syms, size_t nsyms, char *why,
                 size_t why_len) {
  void *lib = open_lib(name, dir);
  if (!lib) {
    snprintf(why, why_len, "%s not found", name);
    return NULL;
  }
  for (size_t i = 0; i < nsyms; i++) {
    void *p = dlsym(lib, syms[i].name);
    if (!p) {
      snprintf(why, why_len, "%s lacks %s", name, syms[i].name);
      dlclose(lib);
      return NULL;
    }
    memcpy(syms[i].slot, &p, sizeof p);   /* a data pointer into a function pointer, as POSIX allows */
  }
  return lib;
}

bool ir_dl_once(ir_dl_lib *l, const char *name, const char *dir, const ir_dl_sym *syms, size_t nsyms,
                char *why, size_t why_len) {
  pthread_mutex_lock(&l->lock);
  if (!l->tried) l->lib = ir_dl_load(name, dir, syms, nsyms, l->why, sizeof l->why);
  l->tried = true;
  bool ok = l->lib != NULL;
  if (!ok) snprintf(why, why_len, "%s", l->why);
  pthread_mutex_unlock(&l->lock);
  return ok;
}

void ir_dl_forget(ir_dl_lib *l) {
  pthread_mutex_lock(&l->lock);
  l->lib = NULL;
  l->tried = false;
  pthread_mutex_unlock(&l->lock);
}
