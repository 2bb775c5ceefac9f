/* file.c: the file handling that kiln's formats share: a whole file mapped
 * with private pages, and a file replaced through a temporary one renamed
 * over it (truncating a file in place would crash whoever maps it). */
#include "ir/file.h"
#include "ir/ir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

bool ir_file_map_open(const char *path, ir_file_map *m, char *why, size_t why_len) {
  *m = (ir_file_map){0};
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  const char *what = fd < 0 ? "cannot open" : fstat(fd, &st) ? "cannot stat" : NULL;
  if (!what && !S_ISREG(st.st_mode)) {
    snprintf(why, why_len, "not a regular file");
    close(fd);
    return false;
  }
  if (!what) m->len = (size_t)st.st_size;
  /* writable so that a tensor borrowing the pages can be updated in place
   * (a written page becomes a private copy); NORESERVE keeps a large file
   * from being charged against the commit limit up front */
  if (!what && m->len &&
      (m->base = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, 0)) == MAP_FAILED) {
    what = "cannot map";
  }
  if (what) {
    snprintf(why, why_len, "%s: %s", what, strerror(errno));
    *m = (ir_file_map){0};
  }
  if (fd >= 0) close(fd);
  return !what;
}

void ir_file_map_close(ir_file_map *m) {
  if (m->base) munmap(m->base, m->len);
  *m = (ir_file_map){0};
}

/* All n bytes, through short writes and signals; false with errno set. */
static bool write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (!w) errno = EIO;   /* no progress and no reason */
      return false;
    }
    p += w;
    n -= (size_t)w;
  }
  return true;
}

/* The file, or the errno of what failed (ENOMEM for kiln's own allocation). */
static int replace(const char *path, const ir_file_chunk *chunks, size_t nchunks) {
  static unsigned counter;   /* two threads saving one path never share a temporary file */
  char *tmp = ir_strprintf("%s.kiln-%d-%u.tmp", path, (int)getpid(),
                           __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
  if (!tmp) return ENOMEM;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  bool ok = fd >= 0;
  for (size_t i = 0; ok && i < nchunks; i++) ok = write_all(fd, chunks[i].p, chunks[i].n);
  ok = ok && fsync(fd) == 0;   /* the data is on the disk before the name points at it */
  int err = errno;
  if (fd >= 0 && close(fd) && ok) ok = false, err = errno;
  if (ok && rename(tmp, path)) ok = false, err = errno;
  if (!ok && fd >= 0) unlink(tmp);
  free(tmp);
  return ok ? 0 : err;
}

kiln_status ir_file_replace(const char *f, int l, const char *op, const char *path, const ir_file_chunk *chunks,
                            size_t nchunks) {
  int err = replace(path, chunks, nchunks);
  if (!err) return KILN_OK;
  if (err == ENOMEM) ir_error_setf("%s:%d: %s: '%s': out of memory", f, l, op, path);
  else ir_error_setf("%s:%d: %s: '%s': cannot write: %s", f, l, op, path, strerror(err));
  return err == ENOMEM ? KILN_ERR_MEMORY : KILN_ERR_IO;
}
