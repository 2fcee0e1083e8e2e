# The two newcomer commands: `make demo` (install, then compile and run the LSTM cell example on
# the CPU with the fusion report and the comparison with the interpreter) and `make test`
# (`make test-all`: the long tier too).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-all install install-dev bench install-release-llvm

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# LLVM=release (the default): after pip, llvmlite is rebuilt against a release LLVM where this
# machine allows (scripts/install_release_llvm.py --optional: llvm-NN-dev, cmake, a C++ compiler;
# about 1.5 minutes the first time, a 3-second check after), else the PyPI wheel stays, with a
# warning. LLVM=wheel keeps the wheel without trying. README.md, Dependencies, says why.
LLVM ?= release

install: $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	@if [ "$(LLVM)" = release ]; then $(BIN)/python scripts/install_release_llvm.py --optional; fi

install-dev: $(BIN)/python
	$(BIN)/python -m pip install -q -e ".[dev]"
	@if [ "$(LLVM)" = release ]; then $(BIN)/python scripts/install_release_llvm.py --optional; fi

demo: install
	$(BIN)/hlofuse run examples/lstm_cell.hlo --backend cpu --report --compare

test: install-dev
	$(BIN)/python -m pytest -n 2 -p no:cacheprovider tests

# Everything, the `slow` tier included: the whole cross product of the matrices whose default
# run is a representative subset (tests/conftest.py's _MATRICES), the 20,000- and
# 100,000-instruction chains, the GPU fusion-complexity cases.
test-all: install-dev
	$(BIN)/python -m pytest -n 2 -p no:cacheprovider -m "slow or not slow" tests

bench: install-dev
	$(BIN)/python benchmarks/run.py

# The release-LLVM step alone, failing (exit 1) where it cannot be done: rebuild the venv's
# llvmlite (same version) against a release LLVM of the same major, without assertions
# (Debian/Ubuntu llvm-NN-dev). Cold compiles then take about 0.8x the CPU time; see README.md
# and docs/compile_time.md.
install-release-llvm: $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	$(BIN)/python scripts/install_release_llvm.py
