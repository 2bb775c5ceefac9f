# plot.gp: bar chart of kiln-fused's speed-ups per workload, from the table
# bench/speedups.awk derives from kiln_bench's JSON (`make bench` runs both):
#   gnuplot -e "dat='build/bench.dat'; out='build/bench.png'" bench/plot.gp
# One bar per other implementation in the run (kiln-eager, c-hand, openblas,
# ...), titled from the table's header; a missing bar means the workload has
# no such row.
if (!exists("dat")) dat = 'build/bench.dat'
if (!exists("out")) out = 'build/bench.png'

set terminal pngcairo size 900,500 font ",11"
set output out
set title "kiln-fused speed-up: other median / kiln-fused median, or GB/s ratio (> 1: kiln-fused is faster)"
set ylabel "speed-up (x)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set datafile missing "-"
set key top right autotitle columnhead
set grid ytics
set yrange [0:*]
# The parity line: a bar that ends below it is a row where kiln-fused is slower.
set arrow from graph 0, first 1 to graph 1, first 1 nohead dashtype 2 linewidth 1.5 front

plot for [c=2:*] dat using c:xtic(1)
