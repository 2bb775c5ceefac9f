/* gen.c: the build-time half of the emulation harness. For each case of
 * cases.c that is one single-output kernel, it writes the kernel's CUDA C
 * (kernels.cu, after the prelude) and a row of cases.inc: the input bytes,
 * a launcher that calls the kernel with typed arguments, the reference
 * evaluator's values and the CPU back end's result; a case marked
 * per_kernel (a plan of several kernels: a long scan's two passes) gives a
 * row per kernel. emu_main.cpp compiles
 * both as host C++ with shim.h and runs the kernels: kiln itself never
 * invokes a compiler. Usage: cuda_emu_gen OUTDIR */
#include "codegen_cuda/cuda.h"
#include "cuda_emu/cases.h"
#include "runtime/inspect.h"
#include "runtime/rt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void bytes_array(FILE *f, const char *name, const void *p, size_t n) {
  fprintf(f, "static const unsigned char %s[] = {", name);
  for (size_t i = 0; i < n; i++) fprintf(f, "%s%s%u", i ? "," : "", i % 32 ? "" : "\n", ((const unsigned char *)p)[i]);
  fprintf(f, "%s};\n", n ? "" : "0");
}

static void doubles_array(FILE *f, const char *name, const ref_tensor *r) {
  fprintf(f, "static const double %s[] = {", name);
  for (int64_t i = 0; i < r->numel; i++) {
    double v = ref_get(r, i);
    fprintf(f, "%s%s", i ? "," : "", i % 8 ? "" : "\n");
    if (isnan(v)) fprintf(f, "NAN");
    else if (isinf(v)) fprintf(f, "%sINFINITY", v < 0 ? "-" : "");
    else fprintf(f, "%a", v);
  }
  fprintf(f, "%s};\n", r->numel ? "" : "0");
}

static const char *stype(kiln_dtype t) {
  return t == KILN_BOOL ? "unsigned char" : t == KILN_F16 || t == KILN_BF16 ? "unsigned short"
       : (const char *[]){"", "unsigned char", "signed char", "short", "int", "long long", "", "",
                          "float", "double"}[t];
}

/* static void cN_run(void **b, long long lo, long long hi, void *scratch) {
 *   k_..(typed b[i]..., lo, hi, scratch); } */
static void launcher(FILE *f, int id, const kernel *k) {
  fprintf(f, "static void c%d_run(void **b, long long lo, long long hi, void *scratch) {\n  %s(", id, k->name);
  for (int p = 0; p < k->nparams; p++) {
    const kparam *pp = &k->params[p];
    if (pp->args) fprintf(f, "*(const %s_args *)b[%d], ", k->name, p);
    else if (pp->status) fprintf(f, "(long long *)b[%d], ", p);
    else fprintf(f, "(%s%s *)b[%d], ", pp->output ? "" : "const ", stype(pp->dtype), p);
  }
  fprintf(f, "lo, hi, scratch);\n}\n");
}

/* The params' data: inputs' buffers, the args, nothing for the output. */
static bool param_rows(FILE *f, int id, const rt_planned *pl) {
  const kernel *k = pl->k;
  for (int p = 0, i = 0; p < k->nparams; p++) {
    char name[48];
    snprintf(name, sizeof name, "c%d_p%d", id, p);
    if (k->params[p].output) continue;
    if (k->params[p].status) bytes_array(f, name, (const int64_t[KC_SLOT_WORDS]){0}, sizeof(int64_t) * KC_SLOT_WORDS);
    else if (k->params[p].args) bytes_array(f, name, k->args, sizeof(int64_t) * (size_t)k->nargs);
    else {
      const ir_node *n = pl->inputs[i++];
      if (!n->buf) return false;
      bytes_array(f, name, n->buf->data, n->buf->bytes);
    }
  }
  fprintf(f, "static const emu_param c%d_params[] = {", id);
  for (int p = 0; p < k->nparams; p++) {
    const kparam *pp = &k->params[p];
    if (pp->output) fprintf(f, "{%d, %lld, nullptr, 0, 0}, ", (int)pp->dtype, (long long)pp->numel);
    else fprintf(f, "{%d, 0, c%d_p%d, sizeof c%d_p%d, %d}, ", (int)pp->dtype, id, p, id, p, pp->status);
  }
  fprintf(f, "};\n");
  return true;
}

static bool single_output(const rt_planned *plan, int n) {
  const kernel *k = n == 1 ? plan[0].k : NULL;
  return k && k->nparams > 0 && k->params[0].output && (k->nparams == 1 || !k->params[1].output);
}

/* Appends k's function to src once per kernel name (seen: the functions so
 * far); a name seen before must come with the same text (a shape-generic
 * kernel at its second shape), whose launch *l then runs at this one. */
static void emit_kernel(FILE *src, kernel *k, const char *what, ir_str *seen, cuda_launch *l) {
  ir_str key = {0}, text = {0};
  k_key(k, &key);
  ir_str_free(&key);
  char *err = NULL;
  if (!cuda_emit(k, &text, l, &err)) {
    fprintf(stderr, "cuda_emu_gen: %s: %s\n", what, err);
    exit(1);
  }
  bool again = seen->s && strstr(seen->s, k->name);
  if (again && !strstr(seen->s, text.s)) {
    fprintf(stderr, "cuda_emu_gen: %s: kernel %s was emitted before as other CUDA C\n", what, k->name);
    exit(1);
  }
  if (!again) {
    fputs(text.s, src);
    ir_str_append(seen, text.s, text.len);
  }
  ir_str_free(&text);
}

/* The CPU back end's result of node out (realizes it). */
static bool cpu_result(FILE *inc, int id, ir_node *out, int64_t numel) {
  size_t bytes = (size_t)numel * ir_dtypes[kiln_dtype_of(out)].size;
  void *data = malloc(bytes + 1);
  bool ok = data && kiln_realize(out) == KILN_OK && kiln_copy_to_host(out, data, bytes) == KILN_OK;
  char name[32];
  snprintf(name, sizeof name, "c%d_cpu", id);
  if (ok) bytes_array(inc, name, data, bytes);
  free(data);
  return ok;
}

/* Row id: kernel pl of case c, whose output o stores out (inputs: plain
 * buffers). */
static bool write_row(FILE *src, FILE *inc, int id, const char *name, cuda_case *c, const rt_planned *pl, int o,
                      ir_node *out, ir_str *seen) {
  ref_tensor *want = ref_eval(out);
  if (want && c->fails) want->numel = 0;   /* no result: the status slot is what is compared */
  bool ok = want && param_rows(inc, id, pl);
  if (ok) {
    kernel *k = pl->k;
    cuda_launch l;
    emit_kernel(src, k, name, seen, &l);
    char wname[32];
    snprintf(wname, sizeof wname, "c%d_want", id);
    doubles_array(inc, wname, want);
    ok = c->fails ? kiln_realize(out) == KILN_ERR_VALUE : cpu_result(inc, id, out, want->numel);
    if (ok && c->fails) fprintf(inc, "static const unsigned char c%d_cpu[] = {0};\n", id);
    if (ok) launcher(inc, id, k);
    if (ok)
      fprintf(inc,
              "#define CASE_%d {\"%s\", c%d_run, %lld, %d, %d, %lld, %d, c%d_params, %d, %lld, c%d_want, c%d_cpu, "
              "%a, %a, %d, %d, %lld, %d}\n",
              id, name, id, (long long)l.range, l.block, l.grid, (long long)l.scratch, k->nparams, id,
              (int)k->params[o].dtype, (long long)want->numel, id, id, c->tol.rtol, c->tol.atol, (int)!c->reduces, c->fails,
              (long long)c->fail_at, o);
  }
  ref_free(want);
  return ok;
}

/* Case i as one row; false when it is not one kernel with one output of
 * plain inputs. */
static bool write_case(FILE *src, FILE *inc, int id, cuda_case *c, ir_str *seen) {
  rt_planned *plan;
  int n = cuda_case_plan(c, &plan);
  bool ok = single_output(plan, n) && write_row(src, inc, id, c->name, c, &plan[0], 0, c->t, seen);
  if (n >= 0) rt_plan_free(plan, n);
  return ok;
}

/* A case of several kernels (per_kernel): a row per kernel output, in
 * launch order (ids first, first + 1, ...), each kernel fed the values the
 * kernels before it store (realized on the CPU) and each output compared
 * with the reference evaluator's value of the node it stores. The number
 * of rows; a plan it cannot emulate stops the generator. */
static int write_kernels(FILE *src, FILE *inc, int first, cuda_case *c, ir_str *seen, ir_str *rows) {
  rt_graph_plan gp;
  int n = 0;
  bool ok = rt_plan_graph(KILN_CUDA, 1, &c->t, &gp) == KILN_OK;
  for (int j = 0; ok && j < gp.g.ngroups; j++) {
    const pass_group *pg = &gp.g.groups[gp.g.order[j]];
    rt_planned *pl = &gp.kernels[j];
    ok = pl->k != NULL;
    for (int i = 0; ok && i < pl->ninputs; i++) ok = pl->inputs[i]->buf || kiln_realize(pl->inputs[i]) == KILN_OK;
    for (int o = 0; ok && o < pg->nout; o++) {
      char name[96];
      snprintf(name, sizeof name, "%.63s_k%d_out%d", c->name, j, o);
      if ((ok = write_row(src, inc, first + n, name, c, pl, o, pg->outs[o], seen)))
        ir_str_printf(rows, "  CASE_%d,\n", first + n++);
    }
  }
  rt_graph_plan_free(&gp);
  if (!ok || n < 2) {
    fprintf(stderr, "cuda_emu_gen: %s: kernel %d of its plan cannot be emulated\n", c->name, n);
    exit(1);
  }
  return n;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: cuda_emu_gen OUTDIR\n");
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/kernels.cu", argv[1]);
  FILE *src = fopen(path, "w");
  snprintf(path, sizeof path, "%s/cases.inc", argv[1]);
  FILE *inc = fopen(path, "w");
  if (!src || !inc) {
    perror("cuda_emu_gen");
    return 1;
  }
  fprintf(src, "/* generated by cuda_emu_gen: the CUDA C of the emulated cases */\n%s", cuda_prelude());
  fprintf(inc, "/* generated by cuda_emu_gen: inputs, references and launchers */\n");
  ir_str seen = {0}, rows = {0};
  int ncases = 0, next_row = 0;
  for (int i = 0; i < cuda_case_count(); i++) {
    cuda_case c;
    if (!cuda_case_build(i, &c)) continue;
    if (c.per_kernel) {   /* row ids past every case's */
      ncases += write_kernels(src, inc, cuda_case_count() + next_row, &c, &seen, &rows);
      next_row += 16;
    } else if (write_case(src, inc, i, &c, &seen)) {
      ir_str_printf(&rows, "  CASE_%d,\n", i);
      ncases++;
    }
    kiln_release(c.t);
  }
  fprintf(inc, "static const emu_case emu_cases[] = {\n%s};\n", rows.s ? rows.s : "");
  ir_str_free(&seen);
  ir_str_free(&rows);
  fclose(src);
  fclose(inc);
  kiln_shutdown();
  printf("cuda_emu_gen: %d cases\n", ncases);
  return ncases > 0 ? 0 : 1;
}
