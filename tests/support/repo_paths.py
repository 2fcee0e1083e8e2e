"""Where the repository's files are, for tests and their helpers: one place that knows the
layout, so a test computes no path from its own location (a test moved to another folder
still finds testdata/, examples/, docs/ and the shared StableHLO files)."""
from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent  # tests/support
TESTS = SUPPORT.parent  # tests/
REPO = TESTS.parent  # the repository root
TESTDATA = REPO / "testdata"
JAX_CORPUS = TESTDATA / "jax"
GOLDEN = TESTDATA / "hlo_text"
EXAMPLES = REPO / "examples"
DOCS = REPO / "docs"
SCRIPTS = REPO / "scripts"
BENCHMARKS = REPO / "benchmarks"
# The StableHLO conformance files shared between checkouts (next to the repository, not in it).
SHARED_STABLEHLO = REPO.parent / "shared" / "stablehlo_testdata"
