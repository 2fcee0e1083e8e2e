"""The IREE column of the benchmarks (benchmarks/iree_reference.py, `--iree` in run.py and
real_models.py): the flag, the note when IREE is missing, the table cells and ratios run
everywhere; compiling and running through IREE only where the `iree` extra is installed."""
from __future__ import annotations

import argparse
import sys

import numpy as np
import pytest

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import iree_reference as ir  # noqa: E402
from run import format_table  # noqa: E402


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    ir.add_iree_flag(p)
    return p


def test_flag_is_off_by_default_and_on_when_given():
    assert _parser().parse_args([]).iree is False
    assert _parser().parse_args(["--iree"]).iree is True


def test_missing_iree_is_a_note_not_an_error(monkeypatch):
    # a None entry in sys.modules makes `import iree.compiler` raise ImportError, as when the
    # packages are not installed
    monkeypatch.setitem(sys.modules, "iree", None)
    monkeypatch.setitem(sys.modules, "iree.compiler", None)
    note = ir.iree_status()
    assert note is not None and "IREE not installed" in note and ir.INSTALL_HINT in note
    said: list[str] = []
    assert ir.resolve_iree_flag(True, said.append) is False
    assert said == [note]


def test_flag_not_given_says_nothing(monkeypatch):
    monkeypatch.setitem(sys.modules, "iree", None)
    said: list[str] = []
    assert ir.resolve_iree_flag(False, said.append) is False
    assert said == []


def test_runtime_flags_and_threads():
    assert ir.runtime_flags(3) == ["--task_topology_group_count=3", "--task_worker_spin_us=0"]
    with pytest.raises(ValueError, match="at least one worker"):
        ir.runtime_flags(0)
    assert ir.default_threads() >= 1


def test_ratio_columns():
    assert ir.ratio_columns(2.0, 4.0, None) == {"hlofuse/XLA": 0.5}
    cols = ir.ratio_columns(2.0, 4.0, 1.0)
    assert cols == {"hlofuse/XLA": 0.5, "IREE/XLA": 0.25, "hlofuse/IREE": 2.0}


def test_cells_say_failed_or_missing():
    assert ir.format_cell({"iree_ratio": 0.25}).strip() == "0.25"
    assert ir.format_cell({"iree_error": "CompileError: x"}).strip() == "failed"
    assert ir.format_cell({}).strip() == "-"


def test_check_against_counts_and_values():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    ok, lines = ir.check_against([a], [a.copy()])
    assert ok and lines == []
    b = a.copy()
    b[1, 2] += 1.0
    ok, lines = ir.check_against([a], [b])
    assert not ok and len(lines) == 1
    ok, lines = ir.check_against([a, a], [a])
    assert not ok and "2 outputs" in lines[0]


def test_error_summary_names_the_diagnostic():
    # the shape of iree-compile's message for an operation it cannot lower
    msg = ("Error invoking IREE compiler tool iree-compile\nError code: 1\nDiagnostics:\n"
           "<stdin>:2470:13: error: failed to legalize operation 'stablehlo.select_and_scatter' that was "
           "explicitly marked illegal: %5962 = ...\n\nInvoked with:\n iree-compile ...")
    got = ir.error_summary(RuntimeError(msg))
    assert got.startswith("RuntimeError: failed to legalize operation 'stablehlo.select_and_scatter'")
    assert ir.error_summary(ValueError("first\nsecond")) == "ValueError: first"
    assert ir.error_summary(ValueError("")) == "ValueError: "
    assert len(ir.error_summary(ValueError("x" * 500), limit=50)) == len("ValueError: ") + 50


def _row(name: str, **extra) -> dict:
    row = {"workload": name, "kind": "transcendental", "in_bytes": 8e6, "out_bytes": 8e6, "hlofuse_s": 2e-3,
           "xla_s": 4e-3, "ratio": 0.5, "hlofuse_GBps": 8.0, "xla_GBps": 4.0, "hlofuse_Gelem_s": 1.0,
           "xla_Gelem_s": 0.5, "compile_s": 0.1, "matches_interpreter": True, "agrees_with_xla": True}
    row.update(extra)
    return row


def test_table_has_iree_columns_only_with_iree_rows():
    plain = format_table([_row("w1")], ref_bw=16e9)
    assert "IREE" not in plain
    rows = [_row("w1", iree_s=1e-3, iree_ratio=0.25, hlofuse_over_iree=2.0, iree_match=True),
            _row("w2", iree_error="CompileError: no"),
            _row("w3", iree_s=8e-3, iree_ratio=2.0, hlofuse_over_iree=0.25, iree_match=False)]
    text = format_table(rows, ref_bw=16e9)
    head = text.splitlines()[0]
    assert "IREE ms" in head and "IREE/XLA" in head and "t/IREE" in head
    w1 = next(line for line in text.splitlines() if line.startswith("| w1"))
    assert w1.endswith("|    1.000 |     0.25 |   2.00 |")
    w2 = next(line for line in text.splitlines() if line.startswith("| w2"))
    assert "failed" in w2
    w3 = next(line for line in text.splitlines() if line.startswith("| w3"))
    assert "IREE differs from XLA" in w3
    # geometric means over the rows that have the figure: (0.25 * 2.0) ** 0.5
    assert "IREE/XLA:CPU time over 2 workloads: 0.71x" in text
    assert "hlofuse/IREE time over 2 workloads: 0.71x" in text


# ---- with IREE installed ----------------------------------------------------------------------

def _needs_iree():
    pytest.importorskip("iree.compiler")
    pytest.importorskip("iree.runtime")
    pytest.importorskip("jax")


def test_iree_runs_a_function_as_numpy_computes_it():
    _needs_iree()
    import jax.numpy as jnp

    def f(x, y):
        return x * 2.0 + y, jnp.sum(x, axis=1)

    r = np.random.default_rng(0)
    x = r.standard_normal((8, 33)).astype(np.float32)
    y = r.standard_normal((8, 33)).astype(np.float32)
    want = [x * np.float32(2) + y, x.sum(axis=1, dtype=np.float32)]
    fields, call = ir.prepare(f, [x, y], want)
    assert "iree_error" not in fields, fields
    assert fields["iree_match"] is True and fields["iree_compile_s"] > 0
    got = ir.IreeExecutable.to_numpy(call())
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5)


def test_iree_disagreement_is_reported():
    _needs_iree()

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    fields, call = ir.prepare(lambda a: a + 1.0, [x], [x + 2.0])
    assert fields["iree_match"] is False and fields["iree_mismatch"]
    assert call is not None


def test_iree_compile_error_is_a_cell():
    _needs_iree()

    fields, call = ir.prepare(lambda a: a, [np.zeros(3, np.float32)], [np.zeros(3, np.float32)],
                              stablehlo="this is not MLIR")
    assert call is None
    assert "Error invoking" not in fields["iree_error"]  # the compiler's diagnostic, not its generic first line


def test_iree_on_a_benchmark_workload_agrees_with_xla():
    _needs_iree()
    import jax

    from workloads import WORKLOADS

    w = WORKLOADS["depthwise_conv"]
    args = w.inputs("small")
    want = [np.asarray(o) for o in jax.tree_util.tree_leaves(jax.jit(w.fn)(*args))]
    fields, call = ir.prepare(w.fn, args, want)
    assert fields.get("iree_match") is True, fields
