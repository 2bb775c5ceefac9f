/* attention.cuh: the fused attention's device routine (KS_ATTN; emit.c calls
 * it once per (batch, head, block of query rows)), appended to prelude.cuh by
 * CMake. The FlashAttention recurrence with one thread per query row: the
 * block stages tiles of keys and values in shared memory, each thread keeps
 * its row's running max, sum and output accumulator, so the L x S scores
 * never exist. Semantics of codegen_cpu/attention.c. */

/* The tile sizes, bounded whatever the head dims: keys per tile, and the
 * chunks of the head dim (q . k is summed over chunks of XC elements) and of
 * the value dim (a row's outputs in chunks of CH columns, each chunk its own
 * pass over the keys: the accumulator stays in registers). f64 takes half,
 * for the registers. Shared memory: 16 KiB f32, 8 KiB f64. */
template <class T> struct kiln_attn_tile {
  static constexpr int keys = sizeof(T) == 4 ? 32 : 16, width = sizeof(T) == 4 ? 64 : 32;
};

KD float kiln_attn_exp(float x) { return kiln_expf(x); }
KD double kiln_attn_exp(double x) { return kiln_exp(x); }

/* The score of query row i and key j, from the dot product d: scaled, then
 * through the mask (MASK 0: none, 1: bool, a false drops the key; 2:
 * additive, of the element type), -inf for a key past a causal row. */
template <class T, class M, int MASK>
KD T kiln_attn_score(T d, T scale, const M *mask, long long i, long long j, const long long *st, bool seen) {
  T s = d * scale;
  if (MASK == 1 && !mask[i * st[6] + j * st[7]]) s = -KILN_INF_F;
  if (MASK == 2) s = s + (T)mask[i * st[6] + j * st[7]];
  return seen ? s : (T)-KILN_INF_F;
}

/* Scores of key tile j0 .. j0+nb (keys staged chunk by chunk of the head
 * dim in ks) against row i into sc; every thread of the block calls it (the
 * tile's loads are shared), rows past end compute nothing. */
template <class T, int E>
KD void kiln_attn_dots(const T *q, const T *k, long long i, bool live, long long j0, int nb, const long long *st,
                       T *ks, T *sc) {
  constexpr int BC = kiln_attn_tile<T>::keys, XC = E < kiln_attn_tile<T>::width ? E : kiln_attn_tile<T>::width;
  for (int j = 0; j < BC; j++) sc[j] = 0;
  for (int x0 = 0; x0 < E; x0 += XC) {
    int xn = E - x0 < XC ? E - x0 : XC;
    __syncthreads();   /* the previous chunk's (or tile's) reads are done */
    for (int t = threadIdx.x; t < nb * xn; t += blockDim.x)
      ks[t / xn * XC + t % xn] = k[(j0 + t / xn) * st[2] + (x0 + t % xn) * st[3]];
    __syncthreads();
    if (!live) continue;
    T qc[XC];   /* qc's and acc's indices are constants once unrolled: registers */
#pragma unroll
    for (int x = 0; x < XC; x++) qc[x] = x < xn ? q[i * st[0] + (x0 + x) * st[1]] : (T)0;
    for (int j = 0; j < nb; j++) {
      T d = 0;
#pragma unroll
      for (int x = 0; x < XC; x++) d += x < xn ? qc[x] * ks[j * XC + x] : (T)0;
      sc[j] += d;
    }
  }
}

/* Output columns c0 .. c0+cn of query rows row0 .. min(row0 + rows, l) of
 * one (batch, head): the rows in passes of blockDim.x (one row a thread),
 * each pass over the key tiles its last row sees. Per tile: the scores, the
 * new running max m', the sum and accumulator rescaled by exp(m - m'), then
 * p = exp(s - m') times the staged values added. While every score so far
 * is -inf a row adds nothing; a row that saw no key ends 0 / 0, nan. */
template <class T, class M, int MASK, int E, int EV>
KD void kiln_attn_columns(const T *q, const T *k, const T *v, const M *mask, T *out, long long row0, long long rows,
                          long long l, long long s, const long long *st, T scale, bool causal, int c0, T *ks,
                          T *vs) {
  constexpr int BC = kiln_attn_tile<T>::keys, CH = EV < kiln_attn_tile<T>::width ? EV : kiln_attn_tile<T>::width;
  int cn = EV - c0 < CH ? EV - c0 : CH;
  long long end = row0 + rows < l ? row0 + rows : l;
  for (long long r0 = row0; r0 < end; r0 += blockDim.x) {
    long long i = r0 + threadIdx.x, last = r0 + blockDim.x < end ? r0 + blockDim.x : end;
    long long keys = causal && last < s ? last : s;   /* what the pass's last row sees */
    bool live = i < end;
    T m = -KILN_INF_F, sum = 0, acc[CH], sc[BC];
#pragma unroll
    for (int c = 0; c < CH; c++) acc[c] = 0;
    for (long long j0 = 0; j0 < keys; j0 += BC) {
      int nb = keys - j0 < BC ? (int)(keys - j0) : BC;
      kiln_attn_dots<T, E>(q, k, i, live, j0, nb, st, ks, sc);   /* its first barrier: vs is read */
      for (int t = threadIdx.x; t < nb * cn; t += blockDim.x)
        vs[t / cn * CH + t % cn] = v[(j0 + t / cn) * st[4] + (c0 + t % cn) * st[5]];
      __syncthreads();
      if (!live) continue;
      T mx = -KILN_INF_F;
      for (int j = 0; j < nb; j++) {
        sc[j] = kiln_attn_score<T, M, MASK>(sc[j], scale, mask, i, j0 + j, st, !causal || j0 + j <= i);
        mx = sc[j] > mx ? sc[j] : mx;
      }
      T mn = mx > m ? mx : m;
      if (mn == -KILN_INF_F) continue;
      T alpha = kiln_attn_exp(m - mn);
      sum *= alpha;
#pragma unroll
      for (int c = 0; c < CH; c++) acc[c] *= alpha;
      m = mn;
      for (int j = 0; j < nb; j++) {
        T p = kiln_attn_exp(sc[j] - m);
        sum += p;
#pragma unroll
        for (int c = 0; c < CH; c++)
          if (c < cn) acc[c] += p * vs[j * CH + c];
      }
    }
#pragma unroll
    for (int c = 0; c < CH; c++)
      if (live && c < cn) out[i * st[8] + (c0 + c) * st[9]] = acc[c] / sum;
  }
}

/* KS_ATTN for one block of query rows (ir/kernel.h): q, k, v, mask and out
 * at the (batch, head)'s element 0, element strides st[0..9]. Every thread
 * of the block calls it (barriers), with any block size. */
template <class T, class M, int MASK, int E, int EV>
KD void kiln_attention(const T *q, const T *k, const T *v, const M *mask, T *out, long long row0, long long rows,
                       long long l, long long s, const long long *st, T scale, bool causal) {
  constexpr int BC = kiln_attn_tile<T>::keys, W = kiln_attn_tile<T>::width;
  __shared__ T ks[BC * W], vs[BC * W];
  for (int c0 = 0; c0 < EV; c0 += W)
    kiln_attn_columns<T, M, MASK, E, EV>(q, k, v, mask, out, row0, rows, l, s, st, scale, causal, c0, ks, vs);
}
