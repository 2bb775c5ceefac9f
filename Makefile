# Wraps CMake: `make` builds the libraries and examples; `make demo`, `make
# test` and `make bench` each install what is missing
# (scripts/install-deps.sh), configure, build and run; `make install
# PREFIX=dir` installs kiln under dir (default /usr/local); `make docs`
# writes the API reference to $(BUILD)/docs/html (Doxygen).
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)
PREFIX ?= /usr/local

.PHONY: all deps configure build demo test bench docs install clean
all: configure
	cmake --build $(BUILD) -j $(JOBS) --target kiln kiln_shared kiln_examples
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
install: all
	cmake --install $(BUILD) --prefix $(PREFIX)
clean:
	rm -rf $(BUILD)
