/* train.h: internals shared by train/ (checkpoints; built on kiln.h, with
 * ir/ir.h's utilities and last-error slot, and nothing below the frontend). */
#ifndef KILN_TRAIN_H
#define KILN_TRAIN_H

#include "ir/ir.h"

/* ---- safetensors_header.c: the safetensors header ------------------------ */
/* One tensor of a header: what its JSON entry says. */
typedef struct {
  const char *name;       /* UTF-8, NUL-terminated */
  kiln_dtype dtype;
  int ndim;
  int64_t shape[KILN_MAX_DIMS];
  uint64_t begin, end;    /* data_offsets: bytes from the start of the data */
} tr_st_entry;

/* A parsed header. The names and the metadata's strings live in one block,
 * strings (strings_len bytes used), that tr_st_header_free releases. */
typedef struct {
  tr_st_entry *tensors;   /* in the header's order */
  size_t n;
  const char **meta;      /* __metadata__: 2 * nmeta strings, each key before its value */
  size_t nmeta;
  char *strings;
  size_t strings_len;
  size_t data_offset;     /* 8 + the header's length: where the data starts in the file */
} tr_st_header;

/* The most header bytes accepted, as the safetensors package's own limit. */
#define TR_ST_MAX_HEADER 100000000

/* Parses the header at the start of the len bytes of a file and checks
 * that its tensors cover the data after it exactly: each tensor's offsets
 * hold its shape's bytes and lie inside the data, no two overlap, no byte
 * is left over. KILN_OK; KILN_ERR_IO with what is wrong in why ("tensor
 * 'w': data_offsets [0, 20) hold 20 bytes, its F32 shape [2, 3] needs 24");
 * KILN_ERR_MEMORY. Never reads outside bytes[0..len). h is always safe to
 * free afterwards. */
kiln_status tr_st_parse(const unsigned char *bytes, size_t len, tr_st_header *h, char *why, size_t why_len);
void tr_st_header_free(tr_st_header *h);

/* Appends the 8-byte length and the JSON header of n entries (their offsets
 * set) and nmeta key/value pairs to out, padded with spaces so that the data
 * after it starts at a multiple of 8 bytes. out->failed when out of memory. */
void tr_st_header_write(ir_str *out, const tr_st_entry *e, size_t n, const char *const *meta, size_t nmeta);

/* Whether the n bytes at s are well-formed UTF-8 (JSON's encoding). */
bool tr_utf8_valid(const char *s, size_t n);
/* In *dup, a string that appears twice among the n strings strs[0],
 * strs[step], strs[2 * step], ...; NULL when all differ. False when out of
 * memory. */
bool tr_find_duplicate(const char *const *strs, size_t n, size_t step, const char **dup);

#endif
