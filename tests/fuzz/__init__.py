"""hlofuse's own fuzzing harness.

Three fuzzers, each case run in a pool of worker processes (so a segfault is a CRASH and a
case that does not finish within the timeout a HANG, not the end of the run):

* malformed: byte, token and semantic mutations of the valid modules under testdata/ and
  examples/, through load -> verify -> compile(cpu) -> run; a mutant that still verifies is
  also run on the interpreter and compared.
* graphs: random valid graphs (graphs.py) on the cpu backend with and without fusion and on
  gpu-emulated, each compared with the interpreter (runtime/compare.py's tolerances). With
  `--large-graphs N`, N more of arrays up to graphs.LARGE_ELEMENTS elements (dimensions up to
  4,099), which take the kernels' many-row paths (row tiles, split reductions, windowed sums)
  that the small graphs never reach; about 4 cases a second on two cores. Their first 400
  found a crash (an empty f16 reduce) and a clamp of two NaNs of opposite signs whose sign a
  TOTALORDER compare exposed (the compiled clamp took the operand's NaN, the interpreter and
  XLA:CPU the lower bound's); both fixed. With `--gpu` (on a machine with a CUDA GPU) every
  graph also runs on the real GPU, against the interpreter keeping denormals as XLA:GPU does;
  there an element the flushing semantics give is denormal-only (docs/gpu_device.md, "Eighth
  run"). On every backend a TOTALORDER compare of floats counts as showing bits, as a
  bitcast-convert does (a NaN's sign is no backend's contract: bit_exposure.py).
* edge: every elementwise opcode of the registry on each element type it accepts, on edge
  inputs (NaN, ±inf, ±0, denormals, extremes, integer overflow, out-of-range float->int),
  interpreter, cpu and gpu-emulated against XLA:CPU (tests/support/xla_oracle.py).

Outcome classes: ok, expected-error (an hlofuse.HloError with a message), skipped (too large,
or an op/type XLA refuses), denormal-only (a difference that goes away when denormals are
flushed: XLA:CPU's FTZ/DAZ, a known issue counted apart), long-running (the case timed out and
the interpreter alone, rerun in a fresh worker with the same timeout, does not finish either:
the program itself runs long, e.g. a loop counter that must wrap; counted apart, one reproducer
per fuzzer), ptxas-miscompile (under --gpu, a real-GPU mismatch that goes away with the
kernels assembled by `ptxas -O0`: the assembler's bug, counted apart with its reproducer), and
the failures: unexpected-exception, crash, hang (timed out while the interpreter alone
finishes), mismatch, generator-invalid. Each distinct failure signature (exception type and
innermost hlofuse frame, or backend and op for a mismatch) keeps its shortest reproducer in
OUT/<fuzzer>/<signature>/: case.hlo, case.npz (inputs arg0, arg1, ...) and README.txt with
the `hlofuse run ... --compare` command that reproduces it.

The long run (from the repository root):

    .venv/bin/python -m tests.fuzz --malformed 10000 --graphs 1000 --edge-cases --seed 1 --jobs 2 --out /tmp/fuzz-out

prints a table of counts per outcome per fuzzer and the list of distinct failures, and exits
with status 1 if there is any. A short deterministic run is part of the test suite
(tests/test_fuzz_short.py).
"""
