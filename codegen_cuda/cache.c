/* cache.c: the disk cache of compiled CUDA binaries under $KILN_CACHE_DIR
 * (codegen_cuda/README.md). An entry is keyed by the hash of the translation
 * unit's text (the kernel and the prelude), the arch and NVRTC's version;
 * it is written to a temporary file and renamed into place, so readers never
 * see half an entry, and verified on load (magic, key, length, checksum).
 * Every cache problem is a warning: the kernel is compiled instead. */
#include "codegen_cuda/cuda.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_MAGIC "KILNCU1"

typedef struct {
  char magic[8];
  uint64_t key;         /* hash of source, arch and NVRTC version */
  uint64_t len;         /* bytes of binary after the header */
  uint64_t sum;         /* hash of those bytes */
} entry_header;

void cuda_cache_dir(char *buf, size_t n) {
  const char *dir = getenv("KILN_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (dir && *dir) snprintf(buf, n, "%s", dir);
  else if (xdg && *xdg) snprintf(buf, n, "%s/kiln", xdg);
  else if (home && *home) snprintf(buf, n, "%s/.cache/kiln", home);
  else buf[0] = '\0';
}

static void warn(cuda_cache_info *info, const char *path, const char *what) {
  fprintf(stderr, "kiln: warning: CUDA kernel cache: %s: %s (compiling instead)\n", path, what);
  info->warnings++;
}

static uint64_t entry_key(const char *src, const char *arch) {
  uint64_t h = ir_hash_bytes(src, strlen(src), 0x6b696c6e);
  h = ir_hash_bytes(arch, strlen(arch), h);
  const char *v = cuda_nvrtc_version();
  return ir_hash_bytes(v, strlen(v), h);
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

static char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long len = ftell(f);
    if (len >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len + 1))) {
      *n = fread(buf, 1, (size_t)len, f);
      if (*n != (size_t)len) {
        free(buf);
        buf = NULL;
      }
    }
  }
  fclose(f);
  return buf;
}

/* 1: loaded into out; 0: no entry; -1: an entry that fails verification. */
static int load(const char *path, uint64_t key, ir_str *out) {
  size_t n = 0;
  char *buf = read_file(path, &n);
  if (!buf) return 0;
  entry_header h;
  int ok = n >= sizeof h;
  if (ok) memcpy(&h, buf, sizeof h);
  ok = ok && !memcmp(h.magic, CACHE_MAGIC, sizeof h.magic) && h.key == key && h.len == n - sizeof h &&
       h.sum == ir_hash_bytes(buf + sizeof h, h.len, key);
  if (ok) ir_str_append(out, buf + sizeof h, h.len);
  free(buf);
  return ok ? 1 : -1;
}

/* Writes the entry to path.tmp.<pid> and renames it into place. */
static bool store(const char *path, uint64_t key, const char *bin, size_t len, const char **why) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  entry_header h = {CACHE_MAGIC, key, len, ir_hash_bytes(bin, len, key)};
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    *why = strerror(errno);
    return false;
  }
  bool ok = fwrite(&h, sizeof h, 1, f) == 1 && fwrite(bin, 1, len, f) == len;
  ok = (fclose(f) == 0) && ok;
  if (ok && rename(tmp, path) == 0) return true;
  *why = ok ? strerror(errno) : "short write";
  unlink(tmp);
  return false;
}

bool cuda_compile_cached(const char *src, const char *arch, ir_str *out, cuda_cache_info *info,
                         char **log, char **err) {
  *info = (cuda_cache_info){0};
  if (log) *log = NULL;
  char dir[4000], path[4096];
  cuda_cache_dir(dir, sizeof dir);
  uint64_t key = entry_key(src, arch);
  snprintf(path, sizeof path, "%s/cuda-%s-%s-%016llx.bin", dir, arch, cuda_nvrtc_version(),
           (unsigned long long)key);
  size_t start = out->len;
  int got = dir[0] ? load(path, key, out) : 0;
  if (got > 0) return info->hit = true;
  if (got < 0) {
    info->dropped = true;
    warn(info, path, "corrupt or truncated entry dropped");
  }
  if (!cuda_compile(src, arch, out, log, err)) return false;
  const char *why = NULL;
  if (!dir[0]) warn(info, "(none)", "no cache directory: $KILN_CACHE_DIR, $XDG_CACHE_HOME and $HOME unset");
  else if (!make_dirs(dir)) warn(info, dir, strerror(errno));
  else if (!store(path, key, out->s + start, out->len - start, &why)) warn(info, path, why);
  return true;
}
