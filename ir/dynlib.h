/* dynlib.h: optional shared libraries, loaded at run time (dynlib.c). */
#ifndef KILN_DYNLIB_H
#define KILN_DYNLIB_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

/* The CUDA driver, NVRTC and cuBLASLt are dlopened, never linked, so every
 * kiln binary starts without them. A symbol to look up: its name and where
 * to store it (the address of a function pointer of the right type). */
typedef struct { const char *name; void *slot; } ir_dl_sym;
/* Opens name, or when that fails and dir is not NULL, dir/name; then looks
 * up each of syms. The handle, or NULL with why set to "<name> not found" or
 * "<name> lacks <symbol>" (and nothing left open). */
void *ir_dl_load(const char *name, const char *dir, const ir_dl_sym *syms, size_t nsyms, char *why,
                 size_t why_len);
/* A library loaded on first use: ir_dl_once loads it (ir_dl_load) the first
 * time and gives the same answer until ir_dl_forget (kiln_shutdown), which
 * leaves it mapped: NVRTC and cuBLASLt are C++ inside, and unloading them
 * would orphan what their static constructors allocated. Thread-safe. */
typedef struct {
  pthread_mutex_t lock;
  bool tried;           /* loading was attempted: lib, or why it failed */
  void *lib;
  char why[256];
} ir_dl_lib;
#define IR_DL_LIB_INIT {.lock = PTHREAD_MUTEX_INITIALIZER}
bool ir_dl_once(ir_dl_lib *l, const char *name, const char *dir, const ir_dl_sym *syms, size_t nsyms,
                char *why, size_t why_len);
void ir_dl_forget(ir_dl_lib *l);

#endif
