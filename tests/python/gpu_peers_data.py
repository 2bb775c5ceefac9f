"""gpu_peers_data.py: scripts/gpu_peers.py gives PyTorch kiln_bench's own
inputs: its splitmix64 floats, rebuilt in vectors of int64 (run here with
NumPy, on the GPU with torch) and in plain Python, must be the floats that
bench/kiln_bench.c's fill_floats writes, bit for bit. The expected values
were printed by that C code (rng_next and fill_floats, compiled alone).
Usage: gpu_peers_data.py path/to/scripts/gpu_peers.py (exit 77: skipped
without NumPy)."""
import importlib.util
import struct
import sys

# seed, lo, hi, element index, fill_floats' float (printed with %a)
FROM_C = [(1, -2.0, 2.0, 0, "0x1.10a2dep-2"), (1, -2.0, 2.0, 1, "0x1.f75c6ep-1"), (1, -2.0, 2.0, 2, "0x1.e24e8cp+0"),
          (1, -2.0, 2.0, 29997, "-0x1.fba4e4p+0"), (1, -2.0, 2.0, 69993, "0x1.732d4ep+0"),
          (5, -2.0, 2.0, 0, "-0x1.cfcc5p-2"), (5, -2.0, 2.0, 9999, "-0x1.2a9afap+0"),
          (5, -2.0, 2.0, 59994, "-0x1.ee44f4p-2"), (12, 0.0, 1.0, 0, "0x1.287ff4p-1"),
          (12, 0.0, 1.0, 39996, "0x1.c85ac6p-6"), (12, 0.0, 1.0, 69993, "0x1.0a4bap-1")]
N = 70000


def bits(x):
    return struct.pack("<f", float(x))


def main(script):
    try:
        import numpy
    except ImportError:
        print("skipped: no NumPy")
        return 77
    spec = importlib.util.spec_from_file_location("gpu_peers", script)
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)
    for seed, lo, hi in sorted({(s, lo, hi) for s, lo, hi, _, _ in FROM_C}):
        vec = peers.floats(numpy, N, seed, lo, hi)
        one = peers.floats_python(N, seed, lo, hi)
        assert vec.dtype == numpy.float32 and vec.shape == (N,), (vec.dtype, vec.shape)
        for s, l, h, i, want in FROM_C:
            if s == seed:
                assert bits(vec[i]) == bits(float.fromhex(want)), f"seed {seed}, element {i}: {vec[i]!r}, C {want}"
                assert bits(one[i]) == bits(float.fromhex(want)), f"seed {seed}, element {i}: {one[i]!r}, C {want}"
        bad = next((i for i in range(N) if bits(vec[i]) != bits(one[i])), None)
        assert bad is None, f"seed {seed}: the vector and the plain generator differ at {bad}"
        peers.check_generator(vec, N, seed, lo, hi)   # what gpu_peers.py checks on the GPU
    print(f"the generator matches kiln_bench's: {len(FROM_C)} values from its C code, {N} elements each of 3 seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
