/* file.h: whole files mapped for reading and replaced atomically (file.c),
 * shared by the formats kiln reads and writes (.npy, safetensors). */
#ifndef KILN_FILE_H
#define KILN_FILE_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>

/* A regular file mapped whole (base NULL for an empty one). Its pages are
 * private: a write into them (an in-place update of a tensor that borrows
 * them) copies the page and never reaches the file. */
typedef struct {
  void *base;
  size_t len;
} ir_file_map;
/* False with the reason in why ("cannot open: No such file or directory",
 * "not a regular file") and m empty (closing it is harmless). */
bool ir_file_map_open(const char *path, ir_file_map *m, char *why, size_t why_len);
void ir_file_map_close(ir_file_map *m);

/* Writes the chunks, in order, to a new file beside path, flushes it to the
 * disk and renames it over path: readers see the old file or the new one,
 * never a part, and a tensor still mapping the old file keeps reading it.
 * KILN_OK; else nothing is left behind, path is untouched and the last
 * error says "<f>:<l>: <op>: '<path>': cannot write: <reason>" (KILN_ERR_IO)
 * or "...: out of memory" (KILN_ERR_MEMORY). */
typedef struct {
  const void *p;
  size_t n;
} ir_file_chunk;
kiln_status ir_file_replace(const char *f, int l, const char *op, const char *path, const ir_file_chunk *chunks,
                            size_t nchunks);

#endif
