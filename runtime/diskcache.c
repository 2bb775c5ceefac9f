/* diskcache.c: the disk cache of compiled kernels, one module for every back
 * end (CPU object files, CUDA binaries) under $KILN_CACHE_DIR. An entry is
 * a header, its full key (an opaque byte string from the back end) and the
 * payload; it is written to a temporary file and renamed into place, so
 * readers never see half an entry, and verified on load (magic, key, length,
 * checksum). Every cache problem is a warning: the kernel is compiled
 * instead. The oldest entries (by last use) go when the directory outgrows
 * KILN_CACHE_MAX_MB, and with them temporary files of writers that died. */
#include "runtime/rt.h"
#include "runtime/rt_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DISK_MAGIC "KILNDC1"
/* An entry larger than this is not read: no kernel's binary comes near it,
 * and a huge file at an entry's path must not be read before its header. */
#define DISK_MAX_ENTRY ((int64_t)256 << 20)

typedef struct {
  char magic[8];
  uint64_t keylen;      /* bytes of key after the header */
  uint64_t len;         /* bytes of payload after the key */
  uint64_t sum;         /* hash of the payload, seeded with the key's */
} disk_header;

/* The longest cache directory: an entry's path (the directory, a kind, a
 * hash, a temporary file's suffix) must fit the path buffers below. */
#define DISK_DIR_MAX 3999

/* Bytes of entries in the directory, counted once per process and kept up to
 * date by this process's stores (other processes' stores are seen at the
 * next eviction, which counts again). */
static struct {
  pthread_mutex_t mu;
  char dir[DISK_DIR_MAX + 1];
  int64_t bytes;        /* -1: not counted yet */
} disk = {PTHREAD_MUTEX_INITIALIZER, "", -1};

/* A directory too long is refused, not cut (the cut name is another
 * directory, which kiln would create and fill): said once, as for a
 * setting kiln cannot use. */
static bool dir_fits(const char *var, int len) {
  static atomic_bool warned;
  if (len <= DISK_DIR_MAX) return true;
  if (!atomic_exchange(&warned, true))
    fprintf(stderr, "kiln: warning: ignoring the kernel disk cache directory from %s: %d bytes long, more than %d; "
                    "running without the disk cache\n", var, len, DISK_DIR_MAX);
  return false;
}

bool rt_disk_dir(char *buf, size_t n) {
  IR_ASSERT(n > DISK_DIR_MAX);
  const char *dir = getenv("KILN_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  bool ok = true;
  if (dir && *dir) ok = dir_fits("KILN_CACHE_DIR", snprintf(buf, n, "%s", dir));
  else if (xdg && *xdg) ok = dir_fits("XDG_CACHE_HOME", snprintf(buf, n, "%s/kiln", xdg));
  else if (home && *home) ok = dir_fits("HOME", snprintf(buf, n, "%s/.cache/kiln", home));
  else buf[0] = '\0';
  if (!ok) buf[0] = '\0';
  return buf[0] != '\0';
}

void rt_disk_warn(rt_disk_info *info, const char *path, const char *what) {
  if (rt_opts()->debug >= 1) fprintf(stderr, "kiln: warning: kernel disk cache: %s: %s\n", path, what);
  info->warnings++;
}

static uint64_t key_hash(const void *key, size_t keylen) { return ir_hash_bytes(key, keylen, 0x6b696c6e); }

/* The entry's path in dir. */
static void entry_path(const char *dir, const char *kind, const ir_str *key, char *path, size_t n) {
  snprintf(path, n, "%s/%s-%016llx.bin", dir, kind, (unsigned long long)key_hash(key->s, key->len));
}

static bool read_all(int fd, void *p, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t r = read(fd, (char *)p + done, n - done);
    if (r <= 0) return false;
    done += (size_t)r;
  }
  return true;
}

/* Why the open entry fd is not (kind, key), or NULL when its payload was
 * appended to out. Nothing is read before the file is known to be a regular
 * file whose size the header accounts for. */
static const char *verify(int fd, const ir_str *key, ir_str *out) {
  struct stat st;
  disk_header h;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) return "not a regular file";
  if (st.st_size > DISK_MAX_ENTRY) return "larger than any entry";
  if (st.st_size < (off_t)sizeof h || !read_all(fd, &h, sizeof h)) return "truncated header";
  if (memcmp(h.magic, DISK_MAGIC, sizeof h.magic)) return "bad magic";
  if (h.keylen != key->len || h.len != (uint64_t)st.st_size - sizeof h - key->len) return "length mismatch";
  char *buf = ir_malloc(key->len + h.len + 1);
  if (!buf) return "out of memory reading it";
  const char *why = NULL;
  if (!read_all(fd, buf, key->len + h.len)) why = "short read";
  else if (memcmp(buf, key->s, key->len)) why = "another key (hash collision)";
  else if (h.sum != ir_hash_bytes(buf + key->len, h.len, key_hash(key->s, key->len))) why = "checksum mismatch";
  else if (ir_str_append(out, buf + key->len, h.len), out->failed) why = "out of memory reading it";
  free(buf);
  return why;
}

bool rt_disk_load(const char *kind, const ir_str *key, ir_str *out, rt_disk_info *info) {
  char dir[DISK_DIR_MAX + 1], path[4096];
  if (!rt_opts()->disk_cache || key->failed || out->failed || !rt_disk_dir(dir, sizeof dir)) return false;
  entry_path(dir, kind, key, path, sizeof path);
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);  /* a FIFO must not block */
  if (fd < 0) return false;
  size_t start = out->len;
  const char *why = verify(fd, key, out);
  if (!why) futimens(fd, NULL);  /* last use, for eviction; fails harmlessly on a read-only cache */
  close(fd);
  if (why) {
    out->len = start;
    out->failed = false;   /* out still holds what it held before */
    info->dropped = true;
    char what[128];
    snprintf(what, sizeof what, "entry dropped: %s (compiling instead)", why);
    rt_disk_warn(info, path, what);
  }
  return info->hit = why == NULL;
}

/* mkdir -p; false when the directory cannot be made. */
static bool make_dirs(const char *dir) {
  char p[4096];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = '\0';
    if (mkdir(p, 0755) && errno != EEXIST) return false;
    *s = '/';
  }
  return !mkdir(p, 0755) || errno == EEXIST;
}

typedef struct {
  char name[256];
  int64_t bytes;
  struct timespec used;
} disk_file;

static int older_first(const void *a, const void *b) {
  const struct timespec *x = &((const disk_file *)a)->used, *y = &((const disk_file *)b)->used;
  return x->tv_sec != y->tv_sec ? (x->tv_sec < y->tv_sec ? -1 : 1)
                                : (x->tv_nsec < y->tv_nsec ? -1 : x->tv_nsec > y->tv_nsec);
}

/* A temporary file an hour old was left by a process that died writing it. */
static void remove_stale(int fd, const char *name, const struct stat *st) {
  if (strstr(name, ".bin.tmp.") && st->st_mtim.tv_sec < time(NULL) - 3600) unlinkat(fd, name, 0);
}

/* The entries (*.bin regular files) of dir; *n of them, malloc'd. */
static disk_file *list_entries(const char *dir, int *n) {
  DIR *d = opendir(dir);
  disk_file *f = NULL;
  size_t cap = 0;
  *n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode)) continue;
    remove_stale(dirfd(d), e->d_name, &st);
    if (len < 5 || len >= sizeof f->name || strcmp(e->d_name + len - 4, ".bin")) continue;
    if (!ir_grow((void **)&f, &cap, (size_t)*n, (size_t)*n + 1, sizeof *f, NULL))
      break;   /* the entries listed so far are what the trim sees */
    snprintf(f[*n].name, sizeof f->name, "%s", e->d_name);
    f[*n].bytes = st.st_size;
    f[(*n)++].used = st.st_mtim;
  }
  if (d) closedir(d);
  return f;
}

/* Counts the directory's entries and, when they exceed the budget, removes
 * the least recently used down to 3/4 of it (so the next stores do not scan
 * again at once). Under disk.mu. */
static void evict(const char *dir, int64_t budget) {
  int n;
  disk_file *f = list_entries(dir, &n);
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += f[i].bytes;
  if (total > budget) {
    qsort(f, (size_t)n, sizeof *f, older_first);
    char path[4400];
    for (int i = 0; i < n && total > budget / 4 * 3; i++) {
      snprintf(path, sizeof path, "%s/%s", dir, f[i].name);
      if (!unlink(path)) total -= f[i].bytes;
    }
  }
  free(f);
  disk.bytes = total;
}

/* This process's view of the directory's size, after an entry of `bytes`. */
static void account(const char *dir, int64_t bytes) {
  int64_t budget = rt_opts()->disk_cache_bytes;
  pthread_mutex_lock(&disk.mu);
  if (strcmp(disk.dir, dir)) {
    snprintf(disk.dir, sizeof disk.dir, "%s", dir);
    disk.bytes = -1;
  }
  if (disk.bytes >= 0) disk.bytes += bytes;
  if (disk.bytes < 0 || disk.bytes > budget) evict(dir, budget);
  pthread_mutex_unlock(&disk.mu);
}

/* Writes the entry to path.tmp.<pid>.<n> (n: this process's writes so far,
 * so two threads storing one entry never share a temporary file) and
 * renames it into place (over whatever is there, a FIFO included). False
 * with a warning naming the file that failed. */
static bool write_entry(const char *path, const ir_str *key, const void *data, size_t len, rt_disk_info *info) {
  static _Atomic unsigned long writes;
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lu", path, (long)getpid(), (unsigned long)writes++);
  disk_header h = {DISK_MAGIC, key->len, len, ir_hash_bytes(data, len, key_hash(key->s, key->len))};
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    rt_disk_warn(info, tmp, strerror(errno));
    return false;
  }
  bool ok = fwrite(&h, sizeof h, 1, f) == 1 && fwrite(key->s, 1, key->len, f) == key->len && fwrite(data, 1, len, f) == len;
  ok = (fclose(f) == 0) && ok;
  if (ok && rename(tmp, path) == 0) return true;
  if (ok) rt_disk_warn(info, path, strerror(errno));   /* renaming the temporary file over it */
  else rt_disk_warn(info, tmp, "short write");
  unlink(tmp);
  return false;
}

void rt_disk_store(const char *kind, const ir_str *key, const void *data, size_t len, rt_disk_info *info) {
  char dir[DISK_DIR_MAX + 1], path[4096];
  if (!rt_opts()->disk_cache || key->failed) return;
  if (!rt_disk_dir(dir, sizeof dir)) {
    rt_disk_warn(info, "(none)", "no usable cache directory: $KILN_CACHE_DIR, $XDG_CACHE_HOME and $HOME unset or too long");
    return;
  }
  entry_path(dir, kind, key, path, sizeof path);
  if (!make_dirs(dir)) rt_disk_warn(info, dir, strerror(errno));
  else if (write_entry(path, key, data, len, info)) account(dir, (int64_t)(sizeof(disk_header) + key->len + len));
}
