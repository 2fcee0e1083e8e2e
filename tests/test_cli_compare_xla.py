"""`hlofuse run --compare xla`: the module on XLA:CPU through jaxlib as the reference.

XLA's outputs are checked against numpy and against tests/xla_oracle.py first, so the CLI's
verdicts below rest on a reference that is itself checked."""
from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from xla_oracle import run_on_xla, xla_available

import hlofuse
from hlofuse.cli import main
from hlofuse.runtime import memory_budget, xla_reference
from hlofuse.runtime.io import random_inputs
from hlofuse.runtime.memory_budget import Available, estimate_memory
from repo_paths import REPO

pytestmark = pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA CPU client is not usable here")

ROOT = str(REPO)
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.hlo")))
SOFTMAX = os.path.join(ROOT, "examples", "softmax.hlo")

# Integer, bit-generator and sort modules JAX wrote: XLA's results are exact there, so
# hlofuse must agree bit for bit, not within a tolerance.
EXACT = ["integer_ops.hlo", "unsigned_ops.hlo", "rng_bit_generator.hlo", "argmax_argmin.hlo"]

# A custom call XLA:CPU has no implementation for (hlofuse refuses it too; XLA is asked first).
UNKNOWN_CUSTOM_CALL = """HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  ROOT c = f32[4] custom-call(p), custom_call_target="nonexistent_target"
}
"""
# A computation used before it is defined: hlofuse's parser reads it, XLA's refuses it.
FORWARD_REFERENCE = """HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""
TWO_OUTPUTS = """HloModule two
ENTRY main {
  p0 = f32[8] parameter(0)
  p1 = s32[8] parameter(1)
  e = f32[8] exponential(p0)
  m = s32[8] multiply(p1, p1)
  ROOT t = (f32[8], s32[8]) tuple(e, m)
}
"""
TUPLE_PARAMETER = """HloModule tuple_param
ENTRY main {
  p = (f32[3], s64[2]) parameter(0)
  q = f64[2] parameter(1)
  a = f32[3] get-tuple-element(p), index=0
  b = s64[2] get-tuple-element(p), index=1
  n = f32[3] negate(a)
  c = s64[2] multiply(b, b)
  i = (s64[2], f64[2]) tuple(c, q)
  ROOT r = (f32[3], (s64[2], f64[2])) tuple(n, i)
}
"""


def _write(tmp_path, text: str, name: str = "m.hlo") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _jaxlib_version() -> str:
    import jaxlib.version

    return jaxlib.version.__version__


# ---- the reference itself ----------------------------------------------------------------
@pytest.mark.parametrize("dtype,hlo_type", [(np.float32, "f32"), (np.float64, "f64"), (np.int32, "s32"),
                                            (np.int64, "s64"), (np.uint8, "u8")])
def test_reference_computes_what_numpy_does_and_keeps_64_bit_types(dtype, hlo_type):
    text = (f"HloModule m\nENTRY e {{\n  x = {hlo_type}[5] parameter(0)\n  y = {hlo_type}[5] parameter(1)\n"
            f"  m = {hlo_type}[5] multiply(x, y)\n  ROOT a = {hlo_type}[5] add(m, x)\n}}\n")
    x = np.array([1, 2, 3, 4, 5], dtype)
    y = np.array([7, 0, 2, 9, 3], dtype)
    if np.issubdtype(dtype, np.integer) and np.iinfo(dtype).bits == 64:
        x = x * np.array(2**40, dtype)  # only a true 64-bit run keeps these
    (out,) = xla_reference.compile_for_xla_cpu(text)(x, y)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, x * y + x)


def test_reference_flattens_tuple_parameters_and_results_like_the_oracle():
    module = hlofuse.parse_hlo(TUPLE_PARAMETER)
    inputs = random_inputs(module, 3)
    ours = xla_reference.compile_for_xla_cpu(TUPLE_PARAMETER)(*inputs)
    (a, b), q = inputs
    expected = [-a, b * b, q]
    assert [o.dtype for o in ours] == [e.dtype for e in expected]
    for o, e in zip(ours, expected):
        np.testing.assert_array_equal(o, e)
    for o, e in zip(ours, run_on_xla(TUPLE_PARAMETER, [a, b, q])):
        np.testing.assert_array_equal(o, e)


# ---- --compare xla: agreement --------------------------------------------------------------
@pytest.mark.parametrize("example", EXAMPLES, ids=os.path.basename)
def test_examples_match_xla(example, capsys):
    assert main(["run", example, "--compare", "xla"]) == 0
    out = capsys.readouterr().out
    assert f"comparison of cpu (fusion on) with XLA:CPU (jaxlib {_jaxlib_version()}):" in out
    assert "result: match" in out and "MISMATCH" not in out


@pytest.mark.parametrize("name", EXACT)
def test_exact_modules_agree_bit_for_bit(name, capsys):
    path = os.path.join(ROOT, "testdata", "jax", name)
    assert main(["run", path, "--compare", "xla", "--seed", "5"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if re.match(r"\s+out\d+:", ln)]
    module = hlofuse.load(path)
    exe = hlofuse.compile(module, target="cpu")
    inputs = random_inputs(module, 5)
    reference = xla_reference.compile_for_xla_cpu(open(path, encoding="utf-8").read())(*inputs)
    assert len(lines) == len(reference) > 0
    for ours, theirs in zip(exe(*inputs), reference):
        np.testing.assert_array_equal(ours, theirs)


def test_tuple_parameters_and_nested_results_compare(tmp_path, capsys):
    assert main(["run", _write(tmp_path, TUPLE_PARAMETER), "--compare", "xla"]) == 0
    out = capsys.readouterr().out
    assert "out0: float32[3] ok" in out and "out1: int64[2] ok" in out and "out2: float64[2] ok" in out


# Token results among arrays (XLA's conditional simplifier tests return them): hlofuse returns
# no value for a token, and XLA's token buffer cannot become a numpy array.
TOKEN_RESULTS = """HloModule tokens
ENTRY e {
  p = f32[3] parameter(0)
  t1 = token[] after-all()
  t2 = token[] after-all()
  n = f32[3] negate(p)
  inner = (token[], f32[3]) tuple(t1, n)
  ROOT r = (f32[3], (token[], f32[3]), token[]) tuple(p, inner, t2)
}
"""


def test_token_results_are_left_out_of_the_comparison(tmp_path, capsys):
    assert xla_reference.token_leaves(hlofuse.parse_hlo(TOKEN_RESULTS).entry.root.shape) == (False, True, False, True)
    for backend in ("interpreter", "cpu"):
        assert main(["run", _write(tmp_path, TOKEN_RESULTS), "--backend", backend, "--compare", "xla"]) == 0
        out = capsys.readouterr().out
        assert "out0: float32[3] ok" in out and "out1: float32[3] ok" in out and "out2" not in out, out


def test_stablehlo_input_is_compared_through_its_hlo_text(tmp_path, capsys):
    import jax
    import jax.numpy as jnp

    def f(x, y):
        return jnp.tanh(x) @ y + 1, jnp.argmax(x, axis=1)

    exported = jax.export.export(jax.jit(f))(jax.ShapeDtypeStruct((4, 8), jnp.float32),
                                             jax.ShapeDtypeStruct((8, 3), jnp.float32))
    path = _write(tmp_path, exported.mlir_module(), "f.mlir")
    assert main(["run", path, "--compare", "xla", "--backend", "interpreter"]) == 0
    out = capsys.readouterr().out
    assert "comparison of interpreter (fusion on) with XLA:CPU" in out
    assert "out1: int32[4] ok" in out and "result: match" in out


# ---- --compare xla: disagreement and refusal -----------------------------------------------
def test_a_perturbed_reference_output_is_a_mismatch_naming_it(tmp_path, monkeypatch, capsys):
    real = xla_reference.XlaCpuExecutable.run_placed

    def perturbed(self, buffers):
        out = real(self, buffers)
        return [out[0], np.asarray(out[1]) + 1]

    monkeypatch.setattr(xla_reference.XlaCpuExecutable, "run_placed", perturbed)
    assert main(["run", _write(tmp_path, TWO_OUTPUTS), "--compare", "xla"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"out0: float32\[8\] ok", out)
    assert re.search(r"out1: int32\[8\] MISMATCH .*8 elements differ", out)
    assert "result: MISMATCH" in out


@pytest.mark.parametrize("text,xla_says,stage", [
    (UNKNOWN_CUSTOM_CALL, "No registered implementation for untyped custom call to nonexistent_target",
     "CPU compiler"),
    (FORWARD_REFERENCE, "computation does not exist: add", "HLO parser"),
])
def test_a_module_xla_refuses_is_a_user_error_quoting_xla(tmp_path, capsys, text, xla_says, stage):
    assert main(["run", _write(tmp_path, text), "--compare", "xla"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hlofuse: XLA:CPU (jaxlib {_jaxlib_version()}) refused the module; its {stage} says:")
    assert xla_says in err and "Traceback" not in err


def test_xla_refusal_in_a_subprocess_has_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hlofuse.cli", "run", _write(tmp_path, UNKNOWN_CUSTOM_CALL),
                           "--compare", "xla"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "refused the module" in proc.stderr and "Traceback" not in proc.stderr


def test_xla_aborting_on_a_module_is_a_refusal_not_our_crash(monkeypatch, capsys):
    """XLA stops its process on a failed internal check (SIGABRT: three of XLA's own test
    modules did so in jaxlib 0.10.2). The command line compiles on XLA in a child process
    first, so such a module is exit status 2 naming the signal and XLA's check, and this
    process lives on. The child here aborts as XLA does, after printing a check line."""
    monkeypatch.setattr(xla_reference, "_PROBE", "import os, sys\n"
                        "sys.stderr.write('F1127 map_util.h:50] Check failed: it != collection.end()\\n')\n"
                        "sys.stderr.flush()\nos.abort()\n")
    assert main(["run", SOFTMAX, "--compare", "xla"]) == 2
    err = capsys.readouterr().err
    assert "crashed compiling the module (SIGABRT)" in err and "Check failed: it != collection.end()" in err
    assert "Traceback" not in err


def test_the_child_compile_passes_a_module_xla_compiles(capsys):
    """The same check on a module XLA compiles costs nothing but the child: the comparison runs."""
    assert main(["run", SOFTMAX, "--compare", "xla"]) == 0
    assert "result: match" in capsys.readouterr().out


def test_without_jax_compare_xla_asks_for_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "jax", None)  # `import jax` raises ImportError
    assert main(["run", SOFTMAX, "--compare", "xla"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'hlofuse[jax]'" in err and "Traceback" not in err
    assert main(["run", SOFTMAX, "--compare"]) == 0  # the interpreter needs no JAX


def test_the_memory_check_counts_xla_s_run(monkeypatch, capsys):
    exe = hlofuse.compile(hlofuse.load(SOFTMAX), target="cpu")
    alone = estimate_memory(exe.fused_module, "cpu", exe.program).total
    enough = max(alone, 32 * 1000 * 4 + 32 * 1000 * 8)  # the run, and drawing the random input
    monkeypatch.setattr(memory_budget, "available_memory", lambda: Available(enough, "test"))
    assert main(["run", SOFTMAX]) == 0
    assert main(["run", SOFTMAX, "--compare", "xla"]) == 2
    assert "XLA:CPU's run for --compare xla" in capsys.readouterr().err


# ---- --repeat ------------------------------------------------------------------------------
def test_repeat_times_both_interleaved_after_one_warm_up_each(monkeypatch, capsys):
    calls: list[str] = []
    ours, theirs = hlofuse.compiler.Executable.__call__, xla_reference.XlaCpuExecutable.run_placed
    monkeypatch.setattr(hlofuse.compiler.Executable, "__call__", lambda self, *a: calls.append("h") or ours(self, *a))
    monkeypatch.setattr(xla_reference.XlaCpuExecutable, "run_placed",
                        lambda self, b: calls.append("x") or theirs(self, b))
    places: list[int] = []
    place = xla_reference.XlaCpuExecutable.place
    monkeypatch.setattr(xla_reference.XlaCpuExecutable, "place", lambda self, a: places.append(1) or place(self, a))
    assert main(["run", SOFTMAX, "--compare", "xla", "--repeat", "4"]) == 0
    assert "".join(calls) == "hx" + "hx" * 4 and places == [1]
    out = capsys.readouterr().out
    a = float(re.search(r"^cpu: median ([\d.]+) ms over 4 runs$", out, re.M).group(1))
    b = float(re.search(r"^XLA:CPU: median ([\d.]+) ms over 4 runs$", out, re.M).group(1))
    ratio = float(re.search(r"^ratio cpu/XLA:CPU: ([\d.]+)$", out, re.M).group(1))
    assert a > 0 and b > 0
    assert ratio == pytest.approx(a / b, rel=0.05, abs=0.01)  # the printed times are rounded
    assert "result: match" in out


def test_repeat_with_the_interpreter_times_hlofuse_only(capsys):
    assert main(["run", SOFTMAX, "--compare", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "cpu: median" in out and "XLA:CPU" not in out and "with the interpreter:" in out


# ---- the option's forms --------------------------------------------------------------------
@pytest.mark.parametrize("argv,against", [
    (["run", SOFTMAX, "--compare"], "the interpreter"),
    (["run", "--compare", SOFTMAX], "the interpreter"),  # --compare took no value before
    (["run", SOFTMAX, "--compare", "interpreter"], "the interpreter"),
    (["run", "--compare", "xla", SOFTMAX], "XLA:CPU"),
    (["run", SOFTMAX, "--compare=xla"], "XLA:CPU"),
])
def test_compare_forms(argv, against, capsys):
    assert main(argv) == 0
    assert f"with {against}" in capsys.readouterr().out


def test_an_unknown_comparison_is_a_usage_error(capsys):
    assert main(["run", SOFTMAX, "--compare=gpu"]) == 2
    assert "invalid choice" in capsys.readouterr().err


# ---- failures inside jaxlib ----------------------------------------------------------------
def test_xla_failing_to_run_is_reported_as_xla_s(monkeypatch):
    class Failing:
        def execute(self, buffers):
            raise RuntimeError("INTERNAL: out of scratch space")

    exe = xla_reference.XlaCpuExecutable(Failing(), None, "9.9.9")
    monkeypatch.setattr(xla_reference.XlaCpuExecutable, "place", lambda self, arrays: list(arrays))
    with pytest.raises(xla_reference.XlaRefusedError, match=r"XLA:CPU \(jaxlib 9.9.9\) failed to run the module: "
                                                            r"INTERNAL: out of scratch space"):
        exe(np.ones(3, np.float32))


def test_a_jaxlib_without_the_internals_is_unavailable_not_a_bug(monkeypatch, capsys):
    from jax._src.lib import xla_client

    monkeypatch.delattr(xla_client._xla.mlir, "hlo_to_stablehlo")
    assert main(["run", SOFTMAX, "--compare", "xla"]) == 2
    err = capsys.readouterr().err
    assert "does not offer what --compare xla uses" in err and "Traceback" not in err
