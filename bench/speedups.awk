# speedups.awk: build/bench.json -> the table bench/plot.gp draws. One row per
# workload (and thread count, when the run had several): how many times
# faster kiln-fused is than each other implementation (its median divided by
# kiln-fused's, or kiln-fused's GB/s divided by its GB/s where both rows have
# one: the same figure, except for stream-triad, which moves other bytes; "-"
# where the workload has no such row), one column per implementation the run
# has. Relies on kiln_bench writing one result object
# per line; awk, so no jq or Python.

# The value of "key" in one JSON object line, without quotes.
function field(line, key,    i, rest) {
  i = index(line, "\"" key "\": ")
  if (!i) return ""
  rest = substr(line, i + length(key) + 4)
  sub(/^"/, "", rest)
  sub(/[",}].*$/, "", rest)
  return rest
}

/"workload": / {
  w = field($0, "workload"); impl = field($0, "impl"); t = field($0, "threads")
  if (!((w, t) in seen)) { seen[w, t] = 1; order[++n] = w SUBSEP t }
  if (!(t in nthreads)) { nthreads[t] = 1; nt++ }
  # kiln-compile is a cost, not an implementation to compare with.
  if (impl != "kiln-fused" && impl != "kiln-compile" && !(impl in col)) { col[impl] = ++ncol; impls[ncol] = impl }
  median[w, t, impl] = field($0, "median_ms")
  gbps[w, t, impl] = field($0, "gbps")
}

function known(v) { return v != "" && v != "null" && v + 0 > 0 }

function ratio(key, impl,    f, o) {
  f = gbps[key, "kiln-fused"]; o = gbps[key, impl]
  if (known(f) && known(o)) return sprintf("%.3f", f / o)
  f = median[key, "kiln-fused"]; o = median[key, impl]
  return (known(f) && known(o)) ? sprintf("%.3f", o / f) : "-"
}

END {
  head = "workload"
  for (c = 1; c <= ncol; c++) head = head " \"vs " impls[c] "\""
  print head
  for (i = 1; i <= n; i++) {
    split(order[i], wt, SUBSEP)
    row = ""; any = 0
    for (c = 1; c <= ncol; c++) {
      r = ratio(order[i], impls[c])
      row = row " " r
      if (r != "-") any = 1
    }
    # A workload with nothing to compare with (W8, say) gets no bars.
    if (any) print (nt > 1 ? wt[1] "/" wt[2] "t" : wt[1]) row
  }
}
