# Wraps CMake: `make demo`, `make test` and `make bench` each install what is
# missing (scripts/install-deps.sh), configure, build and run; `make docs`
# writes the API reference to $(BUILD)/docs/html (Doxygen).
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

.PHONY: deps configure build demo test bench docs clean
deps:
	@bash scripts/install-deps.sh
configure: deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)
build: configure
	cmake --build $(BUILD) -j $(JOBS)
demo: build
	./$(BUILD)/examples/demo
	./$(BUILD)/examples/fundamentals
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
# The JSON becomes a small table (bench/speedups.awk) that gnuplot draws as a
# bar chart of kiln-fused's speed-ups: build/bench.png.
bench: build
	./$(BUILD)/bench/kiln_bench --json $(BUILD)/bench.json
	awk -f bench/speedups.awk $(BUILD)/bench.json > $(BUILD)/bench.dat
	gnuplot -e "dat='$(BUILD)/bench.dat'; out='$(BUILD)/bench.png'" bench/plot.gp
docs: configure
	cmake --build $(BUILD) --target docs
clean:
	rm -rf $(BUILD)
