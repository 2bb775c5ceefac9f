/* test_safetensors.c: safetensors checkpoints: round trips of every dtype
 * in 0-d to 4-d and empty shapes, the exact bytes kiln writes (the same the
 * safetensors package writes), views and pending tensors saved, the mapped
 * load read in place and its lifetime, the files of tests/data/ that the
 * safetensors package wrote, hand-made bad files whose errors name the file
 * and the problem, atomic saves, argument errors with the caller's line,
 * and every allocation failing in turn. tests/python/safetensors_py.py
 * checks kiln's files with the package itself. */
#include "check_main.h"
#include "ir/alloc.h"
#include "ir/graph.h"
#include "runtime/rt.h"
#include "util/testutil.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

/* ---- files --------------------------------------------------------------- */
/* A file of the 8-byte length of text, text and n data bytes. */
static void write_st(const char *path, const char *text, const void *data, size_t n) {
  static unsigned char buf[4096];
  size_t tl = strlen(text);
  ck_assert(8 + tl + n <= sizeof buf);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)tl >> (8 * i));
  memcpy(buf + 8, text, tl);
  if (n) memcpy(buf + 8 + tl, data, n);
  tu_write_file(path, buf, 8 + tl + n);
}

/* Whether p lies in a mapping of path (/proc/self/maps): the tensor reads
 * the file's pages, not a copy. */
static bool mapped_from(const char *path, const void *p) {
  FILE *fp = fopen("/proc/self/maps", "r");
  char line[1024];
  bool in = false;
  unsigned long lo, hi;
  while (fp && !in && fgets(line, sizeof line, fp))
    in = strstr(line, path) && sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)p >= lo && (uintptr_t)p < hi;
  if (fp) fclose(fp);
  return in;
}

/* kiln_last_error() holds "test_safetensors.c:<line>: <text>". */
static void expect_message(int line, const char *text) {
  char want[1024];
  snprintf(want, sizeof want, "test_safetensors.c:%d: %s", line, text);
  ck_assert_msg(strstr(kiln_last_error(), want), "want\n  %s\ngot\n  %s", want, kiln_last_error());
}

static void expect_shape(kiln_tensor *t, kiln_dtype dt, int ndim, const int64_t *shape) {
  ck_assert_int_eq(kiln_dtype_of(t), dt);
  ck_assert_int_eq(kiln_ndim(t), ndim);
  for (int d = 0; d < ndim; d++) ck_assert_int_eq(kiln_size(t, d), shape[d]);
}

/* ---- round trips --------------------------------------------------------- */
static const struct { int ndim; int64_t shape[4]; } shapes[] = {
    {0, {0}}, {1, {5}}, {2, {2, 3}}, {3, {2, 1, 3}}, {4, {2, 3, 1, 2}}, {1, {0}}, {3, {2, 0, 3}},
};
#define NSHAPES COUNT(shapes)

/* One dtype in every shape, in one file, bit for bit (NaNs and -0 too);
 * the loaded tensors read the file's pages. */
START_TEST(test_st_round_trip) {
  kiln_dtype dt = (kiln_dtype)_i;
  unsigned char data[NSHAPES][512];
  char names[NSHAPES][8];
  const char *np[NSHAPES];
  kiln_tensor *ts[NSHAPES];
  char *path = tu_tmp_path("rt.safetensors");
  kiln_scope_begin();
  for (int s = 0; s < NSHAPES; s++) {
    tu_fill(dt, ir_numel(shapes[s].ndim, shapes[s].shape), (uint64_t)(_i * NSHAPES + s), TU_FULL, data[s]);
    ts[s] = kiln_from_data(data[s], dt, shapes[s].ndim, shapes[s].shape);
    snprintf(names[s], sizeof names[s], "t%d", s);
    np[s] = names[s];
  }
  ck_assert_int_eq(kiln_save_safetensors(path, NSHAPES, np, ts, 0, NULL), KILN_OK);
  kiln_safetensors st;
  ck_assert_int_eq(kiln_load_safetensors(path, &st), KILN_OK);
  ck_assert_int_eq(st.n, NSHAPES);
  ck_assert_int_eq(st.nmeta, 0);
  for (int s = 0; s < NSHAPES; s++) {
    size_t bytes = (size_t)ir_numel(shapes[s].ndim, shapes[s].shape) * kiln_dtype_size(dt);
    ck_assert_str_eq(st.names[s], np[s]);
    expect_shape(st.tensors[s], dt, shapes[s].ndim, shapes[s].shape);
    tu_assert_bytes(st.tensors[s], data[s], bytes);
    if (bytes) ck_assert(mapped_from(path, kiln_data(st.tensors[s])));
  }
  kiln_safetensors_free(&st);
  kiln_scope_end();
  unlink(path);
}
END_TEST

/* What kiln writes, byte for byte: __metadata__ first, the entries in the
 * given order, the data widest first (every tensor aligned), the header
 * padded with spaces to 8 bytes. */
START_TEST(test_st_exact_bytes) {
  static const char json[] =
      "{\"__metadata__\":{\"k\":\"v\\\"\\u0001\"},"
      "\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[22,25]},"
      "\"b\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
      "\"c\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[20,22]},"
      "\"d\\n\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[16,20]}}";
  const uint8_t a[3] = {1, 2, 3};
  const double b[2] = {0.5, -4};
  const uint16_t c[1] = {0x3f80};   /* bfloat16 1.0 */
  const int32_t d = -7;
  char *path = tu_tmp_path("exact.safetensors");
  kiln_scope_begin();
  kiln_tensor *ts[4] = {kiln_from_data(a, KILN_U8, KILN_SHAPE(3)), kiln_from_data(b, KILN_F64, KILN_SHAPE(2)),
                        kiln_from_data(c, KILN_BF16, KILN_SHAPE(1)), kiln_from_data(&d, KILN_I32, 0, NULL)};
  ck_assert_int_eq(kiln_save_safetensors(path, 4, (const char *[]){"a", "b", "c", "d\n"}, ts, 1,
                                         (const char *[]){"k", "v\"\x01"}),
                   KILN_OK);
  kiln_scope_end();
  size_t hlen = (sizeof json - 1 + 7) / 8 * 8;
  unsigned char want[512], got[512];
  for (int i = 0; i < 8; i++) want[i] = (unsigned char)(hlen >> (8 * i));
  memset(want + 8, ' ', hlen);
  memcpy(want + 8, json, sizeof json - 1);
  memcpy(want + 8 + hlen, b, 16);
  memcpy(want + 8 + hlen + 16, &d, 4);
  memcpy(want + 8 + hlen + 20, c, 2);
  memcpy(want + 8 + hlen + 22, a, 3);
  ck_assert_uint_eq(tu_read_file(path, got, sizeof got), 8 + hlen + 25);
  ck_assert_msg(!memcmp(got, want, 8 + hlen + 25), "got header %.*s", (int)hlen, got + 8);
  unlink(path);
}
END_TEST

/* A transposed, strided view, a broadcast and a pending expression are
 * saved as their values read, in C order. */
START_TEST(test_st_save_views) {
  char *path = tu_tmp_path("views.safetensors");
  kiln_scope_begin();
  kiln_tensor *a = kiln_reshape(kiln_arange(0, 12, 1), KILN_SHAPE(3, 4));
  kiln_tensor *ts[3] = {
      kiln_slice(kiln_T(a), 0, 1, KILN_END, 2),                                 /* rows 1 and 3 of a^T: (2, 3) */
      kiln_expand(kiln_reshape(kiln_arange(0, 3, 1), KILN_SHAPE(3, 1)), KILN_SHAPE(3, 2)),
      kiln_muls(kiln_add(a, a), 2),                                             /* not realized yet */
  };
  ck_assert_int_eq(kiln_save_safetensors(path, 3, (const char *[]){"v", "e", "p"}, ts, 0, NULL), KILN_OK);
  kiln_safetensors st;
  ck_assert_int_eq(kiln_load_safetensors(path, &st), KILN_OK);
  expect_shape(st.tensors[0], KILN_I64, 2, (const int64_t[]){2, 3});
  tu_assert_bytes(st.tensors[0], (const int64_t[]){1, 5, 9, 3, 7, 11}, 48);
  expect_shape(st.tensors[1], KILN_I64, 2, (const int64_t[]){3, 2});
  tu_assert_bytes(st.tensors[1], (const int64_t[]){0, 0, 1, 1, 2, 2}, 48);
  tu_assert_bytes(st.tensors[2], (const int64_t[]){0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44}, 96);
  kiln_safetensors_free(&st);
  kiln_scope_end();
  unlink(path);
}
END_TEST

/* ---- the mapping --------------------------------------------------------- */
/* The tensors outlive the load and its list, and the file itself: the
 * mapping stays while any tensor (or a view) reads it and goes with the
 * last; kernels read the mapped data like any buffer. */
START_TEST(test_st_mapping_lifetime) {
  char *path = tu_tmp_path("map.safetensors");
  const float x[4] = {1, 2, 3, 4};
  const int64_t y[2] = {5, 6};
  kiln_scope_begin();
  ck_assert_int_eq(kiln_save_safetensors(path, 2, (const char *[]){"x", "y"},
                                         (kiln_tensor *[]){kiln_from_data(x, KILN_F32, KILN_SHAPE(4)),
                                                           kiln_from_data(y, KILN_I64, KILN_SHAPE(2))},
                                         0, NULL),
                   KILN_OK);
  kiln_scope_end();
  kiln_safetensors st;
  ck_assert_int_eq(kiln_load_safetensors(path, &st), KILN_OK);   /* no scope: the handles are ours */
  ck_assert_int_eq(tu_mappings_of(path), 1);
  kiln_tensor *u = st.tensors[0], *v = kiln_safetensors_get(&st, "y");
  ck_assert_ptr_eq(v, st.tensors[1]);
  kiln_safetensors_free(&st);
  ck_assert(st.n == 0 && !st.tensors && !st.names);
  ck_assert_int_eq(unlink(path), 0);
  kiln_tensor *w = kiln_slice(u, 0, 2, KILN_END, 1);
  ck_assert_int_eq(kiln_realize(w), KILN_OK);
  kiln_release(u);
  ck_assert_int_eq(tu_mappings_of(path), 1);   /* "path (deleted)", still mapped */
  kiln_scope_begin();
  ck_assert_double_eq(kiln_item(kiln_sum(kiln_muls(w, 10))), 70);
  ck_assert_double_eq(kiln_item(kiln_sum(v)), 11);
  kiln_scope_end();
  kiln_release(w);
  ck_assert_int_eq(tu_mappings_of(path), 1);
  kiln_release(v);
  ck_assert_int_eq(tu_mappings_of(path), 0);
}
END_TEST

/* Writing into a loaded tensor's storage (as an in-place update does)
 * changes a private copy of the page, not the file. */
START_TEST(test_st_private_pages) {
  char *path = tu_tmp_path("private.safetensors");
  const float x[3] = {1, 2, 3};
  kiln_scope_begin();
  ck_assert_int_eq(kiln_save_safetensors(path, 1, (const char *[]){"x"},
                                         (kiln_tensor *[]){kiln_from_data(x, KILN_F32, KILN_SHAPE(3))}, 0, NULL),
                   KILN_OK);
  kiln_safetensors a, b;
  ck_assert_int_eq(kiln_load_safetensors(path, &a), KILN_OK);
  ck_assert(a.tensors[0]->buf->borrowed);
  ((float *)a.tensors[0]->buf->data)[0] = 9;
  tu_assert_bytes(a.tensors[0], (const float[]){9, 2, 3}, 12);
  ck_assert_int_eq(kiln_load_safetensors(path, &b), KILN_OK);
  tu_assert_bytes(b.tensors[0], x, sizeof x);
  kiln_safetensors_free(&a);
  kiln_safetensors_free(&b);
  kiln_scope_end();
  unlink(path);
}
END_TEST

/* Saving over a file a tensor maps replaces it: the old tensor keeps its
 * values, a new load sees the new ones, a mapped tensor can be saved over
 * its own file, and no temporary file is left. */
START_TEST(test_st_overwrite_mapped) {
  char *path = tu_tmp_path("over.safetensors");
  const float a[3] = {1, 2, 3}, b[3] = {7, 8, 9};
  const char *names[1] = {"w"};
  kiln_safetensors old, now;
  kiln_scope_begin();
  ck_assert_int_eq(kiln_save_safetensors(path, 1, names, (kiln_tensor *[]){kiln_from_data(a, KILN_F32, KILN_SHAPE(3))},
                                         0, NULL),
                   KILN_OK);
  ck_assert_int_eq(kiln_load_safetensors(path, &old), KILN_OK);
  ck_assert_int_eq(kiln_save_safetensors(path, 1, names, (kiln_tensor *[]){kiln_from_data(b, KILN_F32, KILN_SHAPE(3))},
                                         0, NULL),
                   KILN_OK);
  tu_assert_bytes(old.tensors[0], a, sizeof a);
  ck_assert_int_eq(kiln_load_safetensors(path, &now), KILN_OK);
  tu_assert_bytes(now.tensors[0], b, sizeof b);
  kiln_safetensors_free(&now);
  ck_assert_int_eq(kiln_save_safetensors(path, 1, names, old.tensors, 0, NULL), KILN_OK);
  ck_assert_int_eq(kiln_load_safetensors(path, &now), KILN_OK);
  tu_assert_bytes(now.tensors[0], a, sizeof a);
  kiln_safetensors_free(&now);
  kiln_safetensors_free(&old);
  kiln_scope_end();
  ck_assert_int_eq(tu_leftovers(path), 0);
  unlink(path);
}
END_TEST

/* ---- files the safetensors package wrote (tests/python/make_safetensors.py)  */
static const uint8_t v_bool[3] = {1, 0, 1}, v_u8[4] = {0, 1, 254, 255};
static const int8_t v_i8[4] = {-128, -1, 0, 127};
static const int16_t v_i16[6] = {-32768, -2, 0, 1, 2, 32767};
static const int32_t v_i32[3] = {INT32_MIN, 7, INT32_MAX}, v_weird[1] = {42};
static const int64_t v_i64[2] = {INT64_MIN, INT64_MAX};
static const uint16_t v_f16[4] = {0x3c00, 0xc100, 0x7bff, 0x7c00};   /* 1, -2.5, 65504, inf */
static const uint16_t v_bf16[3] = {0x3f80, 0xc000, 0x4049};          /* 1, -2, 3.140625 */
static const float v_f32[6] = {0.5f, -1, 2.25f, -0.0f, 3.5f, 100};
static const double v_f64 = 2.718281828459045;

/* In the order of the file's header: the package sorts by alignment, then name. */
static const struct {
  const char *name;
  kiln_dtype dt;
  int ndim;
  int64_t shape[2];
  const void *v;
  size_t bytes;
} ref_rows[] = {
    {"i64", KILN_I64, 1, {2}, v_i64, 16},
    {"f64", KILN_F64, 0, {0}, &v_f64, 8},
    {"empty", KILN_F32, 2, {0, 3}, NULL, 0},
    {"f32", KILN_F32, 2, {2, 3}, v_f32, 24},
    {"i32", KILN_I32, 1, {3}, v_i32, 12},
    {"we\"ird/n\xc3\xa4me \xe2\x9c\x93", KILN_I32, 1, {1}, v_weird, 4},
    {"bf16", KILN_BF16, 1, {3}, v_bf16, 6},
    {"f16", KILN_F16, 2, {2, 2}, v_f16, 8},
    {"i16", KILN_I16, 2, {2, 3}, v_i16, 12},
    {"i8", KILN_I8, 1, {4}, v_i8, 4},
    {"u8", KILN_U8, 2, {2, 2}, v_u8, 4},
    {"bool", KILN_BOOL, 1, {3}, v_bool, 3},
};

START_TEST(test_st_reference_files) {
  kiln_safetensors st;
  kiln_scope_begin();
  ck_assert_int_eq(kiln_load_safetensors(KILN_TEST_DATA "/st_dtypes.safetensors", &st), KILN_OK);
  ck_assert_int_eq(st.n, COUNT(ref_rows));
  for (int i = 0; i < st.n; i++) {
    ck_assert_str_eq(st.names[i], ref_rows[i].name);
    kiln_tensor *t = kiln_safetensors_get(&st, ref_rows[i].name);
    ck_assert_ptr_eq(t, st.tensors[i]);
    expect_shape(t, ref_rows[i].dt, ref_rows[i].ndim, ref_rows[i].shape);
    tu_assert_bytes(t, ref_rows[i].v, ref_rows[i].bytes);
  }
  ck_assert_int_eq(st.nmeta, 2);
  ck_assert_str_eq(st.meta[0], "format");
  ck_assert_str_eq(st.meta[1], "pt");
  ck_assert_str_eq(st.meta[2], "note");
  ck_assert_str_eq(st.meta[3], "\xc3\xbcn\xc3\xaf" "code \xe2\x9c\x93 \"quoted\"");
  kiln_safetensors_free(&st);
  ck_assert_int_eq(kiln_load_safetensors(KILN_TEST_DATA "/st_empty.safetensors", &st), KILN_OK);
  ck_assert(st.n == 0 && st.nmeta == 0);
  kiln_safetensors_free(&st);
  kiln_scope_end();
}
END_TEST

/* kiln writes the same bytes as the package for the same tensors, names
 * and metadata: the same layout, escapes and padding. */
START_TEST(test_st_same_bytes_as_package) {
  static unsigned char theirs[2048], ours[2048];
  const char *ref = KILN_TEST_DATA "/st_dtypes.safetensors", *path = tu_tmp_path("again.safetensors");
  size_t n = tu_read_file(ref, theirs, sizeof theirs);
  kiln_safetensors st;
  kiln_scope_begin();
  ck_assert_int_eq(kiln_load_safetensors(ref, &st), KILN_OK);
  ck_assert_int_eq(kiln_save_safetensors(path, st.n, st.names, st.tensors, st.nmeta, st.meta), KILN_OK);
  kiln_safetensors_free(&st);
  kiln_scope_end();
  ck_assert_uint_eq(tu_read_file(path, ours, sizeof ours), n);
  ck_assert(!memcmp(ours, theirs, n));
  unlink(path);
}
END_TEST

/* Whitespace anywhere JSON allows it, keys in any order, escapes (a
 * surrogate pair too), empty tensors sharing an offset, an empty
 * __metadata__ after the tensors, and data that is not aligned (copied). */
START_TEST(test_st_header_variants) {
  static const char text[] =
      "{\r\n \"\\u00e4\\ud83d\\ude00\\n\\\"\\/\" : { \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 2 ] , "
      "\"dtype\" : \"U8\" } ,\t\"z1\":{\"dtype\":\"F64\",\"shape\":[0],\"data_offsets\":[2,2]},"
      "\"z2\":{\"data_offsets\":[2,2],\"shape\":[3,0],\"dtype\":\"I16\"},"
      "\"odd\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[2,6]}, \"__metadata__\" : { } }   ";
  const unsigned char data[6] = {7, 9, 0x78, 0x56, 0x34, 0x12};
  char *path = tu_tmp_path("variants.safetensors"), padded[sizeof text + 8];
  snprintf(padded, sizeof padded, "%s", text);
  while ((8 + strlen(padded)) % 8) strcat(padded, " ");   /* the data starts 8-aligned: "odd" at 2 is not */
  write_st(path, padded, data, sizeof data);
  kiln_safetensors st;
  kiln_scope_begin();
  ck_assert_msg(kiln_load_safetensors(path, &st) == KILN_OK, "%s", kiln_last_error());
  ck_assert_int_eq(st.n, 4);
  ck_assert_str_eq(st.names[0], "\xc3\xa4\xf0\x9f\x98\x80\n\"/");
  tu_assert_bytes(st.tensors[0], data, 2);
  expect_shape(st.tensors[1], KILN_F64, 1, (const int64_t[]){0});
  expect_shape(st.tensors[2], KILN_I16, 2, (const int64_t[]){3, 0});
  ck_assert_double_eq(kiln_item(kiln_safetensors_get(&st, "odd")), 0x12345678);   /* at offset 10: copied */
  ck_assert(!kiln_safetensors_get(&st, "odd")->buf->borrowed);
  ck_assert_int_eq(st.nmeta, 0);
  kiln_safetensors_free(&st);
  kiln_scope_end();
  unlink(path);
}
END_TEST

/* ---- bad files ----------------------------------------------------------- */
/* The JSON entry of one tensor. */
#define T(name, dtype, shape, offsets) \
  "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offsets "}"
#define A4 T("a", "F32", "[1]", "[0,4]")   /* a good first entry over 4 bytes */

typedef struct {
  bool raw;             /* text is the whole file, of n bytes; else the header, then n data bytes */
  const char *text;
  size_t n;
  const char *want;     /* what the message says after "load_safetensors: '<path>': " */
} bad_row;
#define RAW(bytes) true, bytes, sizeof(bytes) - 1
#define HDR(text, ndata) false, text, ndata

static const bad_row bad[] = {
    {RAW(""), "truncated file (0 bytes): a safetensors file starts with an 8-byte header length"},
    {RAW("\x02\0\0\0\0"), "truncated file (5 bytes)"},
    {RAW("\0\0\0\0\0\x01\0\0{}"), "header length 1099511627776 is more than the 100000000 bytes accepted"},
    {RAW("\xff\xff\xff\xff\xff\xff\xff\xff{}"), "header length 18446744073709551615 is more than the 100000000"},
    {RAW("\x64\0\0\0\0\0\0\0{\"a\":{}}"), "truncated header (100 bytes announced, the file has 8 after the length)"},
    {HDR("[]", 0), "header: it must start with '{' (a JSON object)"},
    {HDR(" {}", 0), "header: it must start with '{'"},
    {HDR("", 0), "header: it must start with '{'"},
    {HDR("{", 0), "header: expected a string"},
    {HDR("{" A4, 4), "header: expected ',' or '}' after 'a'"},
    {HDR("{" A4 ",}", 4), "header: expected a string"},
    {HDR("{" A4 "} x", 4), "header: unexpected text after the JSON object"},
    {HDR("{\"a\" " A4 "}", 4), "header: expected ':' after 'a'"},
    {HDR("{\"a\":3}", 0), "header: tensor 'a' must be an object of dtype, shape and data_offsets"},
    {HDR("{\"a\":{}}", 0), "tensor 'a': key 'dtype' is missing"},
    {HDR("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4), "tensor 'a': key 'data_offsets' is missing"},
    {HDR("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}", 4), "tensor 'a': key 'dtype' appears twice"},
    {HDR("{\"a\":{\"dtype\":\"F32\",\"extra\":1}}", 4), "tensor 'a': unexpected key 'extra'"},
    {HDR("{\"a\":{\"dtype\":\"F32\" \"shape\":[1]}}", 4), "header: expected '}' in the entry of tensor 'a'"},
    {HDR("{" T("a", "U32", "[1]", "[0,4]") "}", 4),
     "tensor 'a': unsupported dtype 'U32' (kiln reads BOOL U8 I8 I16 I32 I64 F16 BF16 F32 F64)"},
    {HDR("{" T("a", "f32", "[1]", "[0,4]") "}", 4), "tensor 'a': unsupported dtype 'f32'"},
    {HDR("{" T("a", "F32", "[-1]", "[0,4]") "}", 4), "tensor 'a': shape must hold non-negative integers"},
    {HDR("{" T("a", "F32", "[1.0]", "[0,4]") "}", 4), "tensor 'a': shape must hold non-negative integers"},
    {HDR("{" T("a", "F32", "[01]", "[0,4]") "}", 4), "tensor 'a': shape must hold non-negative integers"},
    {HDR("{" T("a", "F32", "[1e0]", "[0,4]") "}", 4), "tensor 'a': shape must hold non-negative integers"},
    {HDR("{" T("a", "F32", "[1,]", "[0,4]") "}", 4), "tensor 'a': shape must hold non-negative integers"},
    {HDR("{" T("a", "F32", "[1 2]", "[0,4]") "}", 4), "header: expected ']' in the entry of tensor 'a'"},
    {HDR("{" T("a", "F32", "[9223372036854775808]", "[0,4]") "}", 4),
     "tensor 'a': shape holds a number larger than 9223372036854775807"},
    {HDR("{" T("a", "F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 4),
     "tensor 'a': shape has more than KILN_MAX_DIMS (8) dims"},
    {HDR("{" T("a", "F32", "[4294967296,4294967296]", "[0,4]") "}", 4),
     "tensor 'a': shape [4294967296, 4294967296] overflows: its size does not fit in 64 bits"},
    {HDR("{" T("a", "F64", "[3,2305843009213693952]", "[0,4]") "}", 4),
     "tensor 'a': shape [3, 2305843009213693952] overflows"},
    {HDR("{" T("a", "F64", "[4611686018427387904,2]", "[0,4]") "}", 4),
     "tensor 'a': shape [4611686018427387904, 2] overflows"},
    {HDR("{" T("a", "F32", "[1]", "[0]") "}", 4), "header: expected ',' in the entry of tensor 'a'"},
    {HDR("{" T("a", "F32", "[1]", "[0,4,8]") "}", 4), "header: expected ']' in the entry of tensor 'a'"},
    {HDR("{" T("a", "F32", "[1]", "[0,18446744073709551616]") "}", 4),
     "tensor 'a': data_offsets holds a number larger than 18446744073709551615"},
    {HDR("{" T("a", "F32", "[1]", "[4,0]") "}", 4), "tensor 'a': data_offsets [4, 0) end before they begin"},
    {HDR("{" T("a", "F32", "[1]", "[0,8]") "}", 8),
     "tensor 'a': data_offsets [0, 8) hold 8 bytes, its F32 shape [1] needs 4"},
    {HDR("{" T("a", "BF16", "[2,0]", "[0,2]") "}", 2),
     "tensor 'a': data_offsets [0, 2) hold 2 bytes, its BF16 shape [2, 0] needs 0"},
    {HDR("{" T("a", "F32", "[1]", "[4,8]") "}", 4),
     "tensor 'a': data_offsets [4, 8) run past the end of the data (4 bytes)"},
    {HDR("{" T("a", "F32", "[1]", "[18446744073709551611,18446744073709551615]") "}", 4),
     "tensor 'a': data_offsets [18446744073709551611, 18446744073709551615) run past the end of the data (4 bytes)"},
    {HDR("{" T("a", "F32", "[2]", "[0,8]") "," T("b", "F32", "[1]", "[4,8]") "}", 8),
     "tensors 'a' and 'b' overlap (data_offsets [0, 8) and [4, 8))"},
    {HDR("{" T("b", "F32", "[1]", "[0,4]") "," T("a", "F32", "[1]", "[0,4]") "}", 4),
     "tensors 'b' and 'a' overlap (data_offsets [0, 4) and [0, 4))"},
    {HDR("{" A4 "," T("b", "F32", "[1]", "[8,12]") "}", 12),
     "bytes [4, 8) of the data belong to no tensor (the data must be covered exactly)"},
    {HDR("{" T("b", "F32", "[1]", "[4,8]") "}", 8), "bytes [0, 4) of the data belong to no tensor"},
    {HDR("{" A4 "}", 8), "bytes [4, 8) of the data belong to no tensor"},
    {HDR("{}", 4), "bytes [0, 4) of the data belong to no tensor"},
    {HDR("{" A4 "," A4 "}", 4), "header: tensor 'a' appears twice"},
    {HDR("{\"__metadata__\":{\"k\":1}}", 0), "header: __metadata__ value of 'k' must be a string"},
    {HDR("{\"__metadata__\":[]}", 0), "header: __metadata__ must be an object of strings"},
    {HDR("{\"__metadata__\":{},\"__metadata__\":{}}", 0), "header: __metadata__ appears twice"},
    {HDR("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0), "header: __metadata__ key 'k' appears twice"},
    {HDR("{\"__metadata__\":{\"k\" \"a\"}}", 0), "header: expected ':' after __metadata__ key 'k'"},
    {HDR("{\"__metadata__\":{\"k\":\"a\" \"j\":\"b\"}}", 0), "header: expected ',' or '}' in __metadata__"},
    {HDR("{\"a\nb\":{}}", 0), "header: control character 0x0a in a string (JSON escapes it)"},
    {HDR("{\"a\xff\":{}}", 0), "header: invalid UTF-8 in a string"},
    {HDR("{\"\xc0\xaf\":{}}", 0), "header: invalid UTF-8 in a string"},        /* an overlong '/' */
    {HDR("{\"\xed\xa0\x80\":{}}", 0), "header: invalid UTF-8 in a string"},    /* a surrogate */
    {HDR("{\"\xf4\x90\x80\x80\":{}}", 0), "header: invalid UTF-8 in a string"}, /* past U+10FFFF */
    {HDR("{\"\xe2\x9c\":{}}", 0), "header: invalid UTF-8 in a string"},        /* cut short */
    {HDR("{\"\\x\":{}}", 0), "header: invalid escape in a string (a backslash before byte 0x78)"},
    {HDR("{\"\\u12\":{}}", 0), "header: \\u must be followed by 4 hex digits"},
    {HDR("{\"\\udc00\":{}}", 0), "header: unpaired surrogate \\udc00 in a string"},
    {HDR("{\"\\ud800x\":{}}", 0), "header: unpaired surrogate \\ud800 in a string"},
    {HDR("{\"\\ud800\\u0041\":{}}", 0), "header: unpaired surrogate \\ud800 in a string"},
    {HDR("{\"\\u0000\":{}}", 0), "header: a string holds \\u0000, which a C string cannot"},
    {HDR("{\"abc", 0), "header: unterminated string"},
    {HDR("{\"abc\\", 0), "header: unterminated string"},
};

START_TEST(test_st_bad_files) {
  const bad_row *r = &bad[_i];
  char *path = tu_tmp_path("bad.safetensors");
  unsigned char zeros[64] = {0};
  if (r->raw) tu_write_file(path, r->text, r->n);
  else write_st(path, r->text, zeros, r->n);
  kiln_safetensors st = {.n = 99};
  int line = __LINE__ + 1;
  ck_assert_int_eq(kiln_load_safetensors(path, &st), KILN_ERR_IO);
  ck_assert(st.n == 0 && !st.tensors && !st.storage_);
  char want[512];
  snprintf(want, sizeof want, "load_safetensors: '%s': %s", path, r->want);
  expect_message(line, want);
  kiln_safetensors_free(&st);   /* harmless after a failure */
  unlink(path);
}
END_TEST

/* ---- argument and I/O errors --------------------------------------------- */
/* call returns st and the message, at the caller's line, is "save_safetensors: " text. */
#define EXPECT_SAVE_ERROR(call, st, text)                         \
  do {                                                            \
    ck_assert_int_eq(call, st);                                   \
    expect_message(__LINE__, "save_safetensors: " text);          \
  } while (0)

START_TEST(test_st_save_errors) {
  char *path = tu_tmp_path("never.safetensors");
  kiln_scope_begin();
  kiln_tensor *t = kiln_ones(KILN_SHAPE(2), KILN_F32), *ts[2] = {t, t};
  const char *ab[2] = {"a", "b"};
  EXPECT_SAVE_ERROR(kiln_save_safetensors(NULL, 1, ab, ts, 0, NULL), KILN_ERR_ARG, "path is NULL");
  EXPECT_SAVE_ERROR(kiln_save_safetensors(path, -1, ab, ts, 0, NULL), KILN_ERR_ARG,
                    "negative count (-1 tensors, 0 metadata entries)");
  EXPECT_SAVE_ERROR(kiln_save_safetensors(path, 1, ab, ts, -2, NULL), KILN_ERR_ARG, "negative count");
  EXPECT_SAVE_ERROR(kiln_save_safetensors(path, 1, NULL, ts, 0, NULL), KILN_ERR_ARG, "the list of names is NULL");
  EXPECT_SAVE_ERROR(kiln_save_safetensors(path, 1, ab, NULL, 0, NULL), KILN_ERR_ARG, "the list of tensors is NULL");
  EXPECT_SAVE_ERROR(kiln_save_safetensors(path, 0, NULL, NULL, 1, NULL), KILN_ERR_ARG, "the list of metadata is NULL");
  EXPECT_SAVE_ERROR(kiln_save_safetensors(path, 2, (const char *[]){"a", NULL}, ts, 0, NULL), KILN_ERR_ARG,
                    "name 1 is NULL");
  EXPECT_SAVE_ERROR(kiln_save_safetensors(path, 2, ab, (kiln_tensor *[]){t, NULL}, 0, NULL), KILN_ERR_ARG,
                    "tensor 1 is NULL");
  EXPECT_SAVE_ERROR(kiln_save_safetensors(path, 2, (const char *[]){"a", "a"}, ts, 0, NULL), KILN_ERR_ARG,
                    "the name 'a' is given twice");
  EXPECT_SAVE_ERROR(kiln_save_safetensors(path, 1, (const char *[]){"__metadata__"}, ts, 0, NULL), KILN_ERR_ARG,
                    "the name '__metadata__' is the header's metadata");
  EXPECT_SAVE_ERROR(kiln_save_safetensors(path, 2, (const char *[]){"a", "b\xff"}, ts, 0, NULL), KILN_ERR_ARG,
                    "name 1 is not UTF-8");
  EXPECT_SAVE_ERROR(kiln_save_safetensors(path, 1, ab, ts, 1, (const char *[]){"k", NULL}), KILN_ERR_ARG,
                    "metadata value 0 is NULL");
  EXPECT_SAVE_ERROR(kiln_save_safetensors(path, 1, ab, ts, 1, (const char *[]){"\xc0\x80", "v"}), KILN_ERR_ARG,
                    "metadata key 0 is not UTF-8");
  EXPECT_SAVE_ERROR(kiln_save_safetensors(path, 1, ab, ts, 2, (const char *[]){"k", "v", "k", "w"}), KILN_ERR_ARG,
                    "the metadata key 'k' is given twice");
  ck_assert_int_eq(access(path, F_OK), -1);
  /* a tensor that cannot be computed gives its own error, and nothing is written */
  int line = __LINE__ + 1;
  kiln_tensor *e = kiln_add(t, kiln_ones(KILN_SHAPE(3), KILN_F32));
  ck_assert_int_eq(kiln_save_safetensors(path, 2, ab, (kiln_tensor *[]){t, e}, 0, NULL), KILN_ERR_SHAPE);
  expect_message(line, "add: shapes (2,) and (3,) cannot be broadcast");
  ck_assert_int_eq(access(path, F_OK), -1);
  EXPECT_SAVE_ERROR(kiln_save_safetensors("/nonexistent/kiln.safetensors", 1, ab, ts, 0, NULL), KILN_ERR_IO,
                    "'/nonexistent/kiln.safetensors': cannot write: No such file or directory");
  /* a directory cannot be replaced by a file: the rename fails, the written file goes */
  char *dir = tu_tmp_path("dir.safetensors");
  ck_assert_int_eq(mkdir(dir, 0700), 0);
  char want[300];
  snprintf(want, sizeof want, "save_safetensors: '%s': cannot write: Is a directory", dir);
  line = __LINE__ + 1;
  ck_assert_int_eq(kiln_save_safetensors(dir, 1, ab, ts, 0, NULL), KILN_ERR_IO);
  expect_message(line, want);
  ck_assert_int_eq(tu_leftovers(dir), 0);
  rmdir(dir);
  kiln_scope_end();
}
END_TEST

START_TEST(test_st_load_errors) {
  kiln_safetensors st = {.n = 3};
  int line = __LINE__ + 1;
  ck_assert_int_eq(kiln_load_safetensors(NULL, &st), KILN_ERR_ARG);
  expect_message(line, "load_safetensors: path is NULL");
  ck_assert_int_eq(st.n, 0);
  line = __LINE__ + 1;
  ck_assert_int_eq(kiln_load_safetensors("x.safetensors", NULL), KILN_ERR_ARG);
  expect_message(line, "load_safetensors: out is NULL");
  line = __LINE__ + 1;
  ck_assert_int_eq(kiln_load_safetensors("/nonexistent/kiln.safetensors", &st), KILN_ERR_IO);
  expect_message(line, "load_safetensors: '/nonexistent/kiln.safetensors': cannot open: No such file or directory");
  line = __LINE__ + 1;
  ck_assert_int_eq(kiln_load_safetensors("/tmp", &st), KILN_ERR_IO);
  expect_message(line, "load_safetensors: '/tmp': not a regular file");
  /* kiln_safetensors_get */
  ck_assert_int_eq(kiln_load_safetensors(KILN_TEST_DATA "/st_dtypes.safetensors", &st), KILN_OK);
  line = __LINE__ + 1;
  ck_assert_ptr_null(kiln_safetensors_get(&st, "nope"));
  expect_message(line, "safetensors_get: no tensor is named 'nope' (the file has 12)");
  line = __LINE__ + 1;
  ck_assert_ptr_null(kiln_safetensors_get(NULL, "i8"));
  expect_message(line, "safetensors_get: the file is NULL");
  line = __LINE__ + 1;
  ck_assert_ptr_null(kiln_safetensors_get(&st, NULL));
  expect_message(line, "safetensors_get: name is NULL");
  for (int i = 0; i < st.n; i++) kiln_release(st.tensors[i]);   /* no scope: the handles are ours */
  kiln_safetensors_free(&st);
  kiln_safetensors_free(NULL);
}
END_TEST

/* A save that fails halfway (the file size limit cuts its write) leaves
 * the old file as it was and no temporary file. */
START_TEST(test_st_atomic_write) {
  static const float big[1000];
  char *path = tu_tmp_path("atomic.safetensors");
  const float old_v[2] = {1, 2};
  unsigned char before[256], after[256];
  kiln_scope_begin();
  ck_assert_int_eq(kiln_save_safetensors(path, 1, (const char *[]){"w"},
                                         (kiln_tensor *[]){kiln_from_data(old_v, KILN_F32, KILN_SHAPE(2))}, 0, NULL),
                   KILN_OK);
  size_t n = tu_read_file(path, before, sizeof before);
  kiln_tensor *t = kiln_from_data(big, KILN_F32, KILN_SHAPE(1000));
  struct rlimit was, small;
  ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &was), 0);
  small = (struct rlimit){.rlim_cur = 200, .rlim_max = was.rlim_max};
  signal(SIGXFSZ, SIG_IGN);   /* the write fails with EFBIG instead of killing the process */
  /* no check between the two setrlimit: Check writes its own file too */
  int limited = setrlimit(RLIMIT_FSIZE, &small), line = __LINE__ + 1;
  kiln_status st = limited ? KILN_OK : kiln_save_safetensors(path, 1, (const char *[]){"w"}, &t, 0, NULL);
  int restored = setrlimit(RLIMIT_FSIZE, &was);
  ck_assert_int_eq(limited, 0);
  ck_assert_int_eq(restored, 0);
  ck_assert_int_eq(st, KILN_ERR_IO);
  char want[300];
  snprintf(want, sizeof want, "save_safetensors: '%s': cannot write: File too large", path);
  expect_message(line, want);
  ck_assert_uint_eq(tu_read_file(path, after, sizeof after), n);
  ck_assert(!memcmp(before, after, n));
  ck_assert_int_eq(tu_leftovers(path), 0);
  kiln_scope_end();
  unlink(path);
}
END_TEST

/* On a GPU, CUDA tensors (a pending one too) are copied to the host and
 * saved; without one, a tensor moved to cuda:0 is refused and nothing is
 * written. */
START_TEST(test_st_cuda) {
  char *path = tu_tmp_path("cuda.safetensors");
  const float x[3] = {1, 2, 3};
  kiln_scope_begin();
  kiln_tensor *g = kiln_to(kiln_from_data(x, KILN_F32, KILN_SHAPE(3)), (kiln_device){KILN_CUDA, 0});
  kiln_tensor *ts[2] = {g, kiln_muls(g, 2)};
  kiln_status st = kiln_save_safetensors(path, 2, (const char *[]){"g", "g2"}, ts, 0, NULL);
  if (tu_have_gpu()) {
    ck_assert_msg(st == KILN_OK, "%s", kiln_last_error());
    kiln_safetensors f;
    ck_assert_int_eq(kiln_load_safetensors(path, &f), KILN_OK);
    tu_assert_bytes(f.tensors[0], x, sizeof x);
    tu_assert_bytes(f.tensors[1], (const float[]){2, 4, 6}, 12);
    ck_assert_int_eq(kiln_device_of(f.tensors[0]).type, KILN_CPU);
    kiln_safetensors_free(&f);
  } else {
    ck_assert_int_eq(st, KILN_ERR_DEVICE);
    ck_assert_int_eq(access(path, F_OK), -1);
  }
  kiln_scope_end();
  unlink(path);
}
END_TEST

/* ---- allocation failures ------------------------------------------------- */
/* A save and a load of a few tensors, with kiln's Nth allocation failing
 * (and, with after, every one from it on), for every N the clean run
 * makes: each ends in KILN_OK or KILN_ERR_MEMORY saying "out of memory",
 * never another status, and LeakSanitizer (the sanitizer build) sees
 * nothing leak. */
static kiln_status save_and_load(const char *path, kiln_tensor *const *ts) {
  kiln_safetensors st;
  kiln_status s = kiln_save_safetensors(path, 3, (const char *[]){"a", "b", "c"}, ts, 1, (const char *[]){"k", "v"});
  if (s == KILN_OK) s = kiln_load_safetensors(path, &st);
  if (s != KILN_OK) return s;
  ck_assert(st.n == 3 && st.nmeta == 1 && !strcmp(st.meta[1], "v"));
  tu_assert_bytes(st.tensors[2], (const int32_t[]){4, 5}, 8);
  kiln_safetensors_free(&st);
  return KILN_OK;
}

START_TEST(test_st_alloc_failures) {
  bool after = _i;
  char *path = tu_tmp_path("oom.safetensors");
  kiln_scope_begin();
  const float a[2] = {1, 2};
  const int32_t c[2] = {4, 5};
  kiln_tensor *ts[3] = {kiln_from_data(a, KILN_F32, KILN_SHAPE(2)), kiln_from_data(a, KILN_F32, KILN_SHAPE(2, 1)),
                        kiln_from_data(c, KILN_I32, KILN_SHAPE(2))};
  int failed = 0;
  ir_alloc_fail_at(0, false);
  ck_assert_int_eq(save_and_load(path, ts), KILN_OK);
  uint64_t count = ir_alloc_count();
  for (uint64_t n = 1; n <= count; n++) {
    kiln_scope_begin();
    ir_alloc_fail_at(n, after);
    kiln_status s = save_and_load(path, ts);
    ir_alloc_fail_at(0, false);
    ck_assert_msg(s == KILN_OK || (s == KILN_ERR_MEMORY && strstr(kiln_last_error(), "out of memory")),
                  "N = %llu: status %d: %s", (unsigned long long)n, s, kiln_last_error());
    kiln_scope_end();
    failed += s != KILN_OK;
  }
  ck_assert_int_gt(failed, 0);
  ck_assert_int_eq(tu_leftovers(path), 0);
  kiln_scope_end();
  unlink(path);
}
END_TEST

static Suite *safetensors_suite(void) {
  Suite *s = suite_create("safetensors");
  TCase *tc = tu_tcase(s, "files");
  tcase_add_loop_test(tc, test_st_round_trip, 0, KILN_NUM_DTYPES);
  tcase_add_test(tc, test_st_exact_bytes);
  tcase_add_test(tc, test_st_save_views);
  tcase_add_test(tc, test_st_mapping_lifetime);
  tcase_add_test(tc, test_st_private_pages);
  tcase_add_test(tc, test_st_overwrite_mapped);
  tcase_add_test(tc, test_st_reference_files);
  tcase_add_test(tc, test_st_same_bytes_as_package);
  tcase_add_test(tc, test_st_header_variants);
  tcase_add_loop_test(tc, test_st_bad_files, 0, COUNT(bad));
  tcase_add_test(tc, test_st_save_errors);
  tcase_add_test(tc, test_st_load_errors);
  tcase_add_test(tc, test_st_atomic_write);
  tcase_add_test(tc, test_st_cuda);
  tcase_add_loop_test(tc, test_st_alloc_failures, 0, 2);
  return s;
}

KILN_TEST_MAIN(safetensors_suite)
