/* cuda.c: is there a usable NVIDIA GPU? The driver is dlopened, never
 * linked, so one binary runs with or without it (ir_dl_load); the handle is
 * kept for the CUDA back end (rt_cuda_sym) and closed by kiln_shutdown. */
#include "runtime/rt.h"
#include "ir/dynlib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

typedef int (*cu_init_fn)(unsigned flags);
typedef int (*cu_count_fn)(int *count);
typedef int (*cu_errname_fn)(int err, const char **name);

static struct {
  pthread_mutex_t lock;
  bool probed;
  void *lib;            /* libcuda.so.1, NULL when unusable */
  int count;
  char why[160];        /* why count is 0 */
} cuda = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* "CUDA_ERROR_STUB_LIBRARY", from the driver when it can say, else a few
 * that matter here. */
static const char *cu_error_name(int err) {
  cu_errname_fn name_of = (cu_errname_fn)dlsym(cuda.lib, "cuGetErrorName");
  const char *s = NULL;
  if (name_of && name_of(err, &s) == 0 && s) return s;
  switch (err) {
  case 34: return "CUDA_ERROR_STUB_LIBRARY";
  case 35: return "CUDA_ERROR_INSUFFICIENT_DRIVER";
  case 100: return "CUDA_ERROR_NO_DEVICE";
  default: return "unknown error";
  }
}

/* Records why CUDA cannot be used and drops the library. */
static void cuda_fail(const char *why, int err) {
  if (err)
    snprintf(cuda.why, sizeof cuda.why, "%s failed with error %d (%s)", why, err, cu_error_name(err));
  else
    snprintf(cuda.why, sizeof cuda.why, "%s", why);
  cuda.count = 0;
  if (cuda.lib) dlclose(cuda.lib);
  cuda.lib = NULL;
}

/* Loads the driver and counts devices. Caller holds the lock. */
static void cuda_probe(void) {
  cu_init_fn init;
  cu_count_fn count;
  const ir_dl_sym syms[] = {{"cuInit", &init}, {"cuDeviceGetCount", &count}};
  char why[128];
  int err;
  cuda.probed = true;
  if (!(cuda.lib = ir_dl_load("libcuda.so.1", NULL, syms, 2, why, sizeof why))) {
    snprintf(cuda.why, sizeof cuda.why, "%s (no NVIDIA driver)", why);
    cuda.count = 0;
  } else if ((err = init(0)))
    cuda_fail("cuInit", err);
  else if ((err = count(&cuda.count)))
    cuda_fail("cuDeviceGetCount", err);
  else if (cuda.count <= 0)
    cuda_fail("the CUDA driver reports no devices", 0);
}

int rt_cuda_count(char *why, size_t why_len) {
  pthread_mutex_lock(&cuda.lock);
  if (!cuda.probed) cuda_probe();
  int n = cuda.count;
  if (why && why_len) snprintf(why, why_len, "%s", n ? "" : cuda.why);
  pthread_mutex_unlock(&cuda.lock);
  return n;
}

void *rt_cuda_sym(const char *name) {
  if (rt_cuda_count(NULL, 0) == 0) return NULL;
  pthread_mutex_lock(&cuda.lock);
  void *p = cuda.lib ? dlsym(cuda.lib, name) : NULL;
  pthread_mutex_unlock(&cuda.lock);
  return p;
}

void rt_cuda_shutdown(void) {
  pthread_mutex_lock(&cuda.lock);
  if (cuda.lib) dlclose(cuda.lib);
  cuda.lib = NULL;
  cuda.count = 0;
  cuda.probed = false;
  pthread_mutex_unlock(&cuda.lock);
}

int kiln_cuda_device_count(void) { return rt_cuda_count(NULL, 0); }
int kiln_cuda_is_available(void) { return kiln_cuda_device_count() > 0; }
kiln_device kiln_cpu_device(void) { return (kiln_device){KILN_CPU, 0}; }
kiln_device kiln_default_device(void) {
  return kiln_cuda_is_available() ? (kiln_device){KILN_CUDA, 0} : kiln_cpu_device();
}
