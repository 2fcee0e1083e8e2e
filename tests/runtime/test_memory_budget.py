"""Modules too big for the machine are refused before anything is allocated (ResourceError,
exit 2), with what they need and what the machine has; normal modules are unaffected.

The huge modules here need terabytes: an allocation attempt would fail with MemoryError (not
ResourceError) on any machine, so a passing test shows none was made."""
from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

import hlofuse
from hlofuse.cli import main
from hlofuse.hlo.errors import ResourceError
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime import memory_budget
from hlofuse.runtime.memory_budget import (Available, available_memory, check_compiled, check_memory,
                                           estimate_memory, format_bytes)
from repo_paths import REPO

ROOT = str(REPO)
EXAMPLES = os.path.join(ROOT, "examples")
BACKENDS = ["interpreter", "cpu", "gpu-emulated"]
N = 1_000_000_000_000  # elements: 4 TB of f32

HUGE_PARAMETER = f"""HloModule huge_parameter

ENTRY main {{
  p0 = f32[{N}]{{0}} parameter(0)
  ROOT n = f32[{N}]{{0}} negate(p0)
}}
"""

HUGE_RESULT = f"""HloModule huge_result

ENTRY main {{
  p0 = f32[4]{{0}} parameter(0)
  ROOT b = f32[4,{N // 4}]{{1,0}} broadcast(p0), dimensions={{0}}
}}
"""

# Small parameters and result; the sort's operand and result are temporaries of 4 TB each.
TEMPORARY = """HloModule huge_temporary

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

lt {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}}

ENTRY main {{
  p0 = f32[4]{{0}} parameter(0)
  b = f32[4,{M}]{{1,0}} broadcast(p0), dimensions={{0}}
  e = f32[4,{M}]{{1,0}} exponential(b)
  s = f32[4,{M}]{{1,0}} sort(e), dimensions={{1}}, to_apply=lt
  z = f32[] constant(0)
  ROOT r = f32[4]{{0}} reduce(s, z), dimensions={{1}}, to_apply=add
}}
"""
HUGE_TEMPORARY = TEMPORARY.format(M=N // 4)
SMALL_TEMPORARY = TEMPORARY.format(M=1000)

HUGE = {"parameter": HUGE_PARAMETER, "result": HUGE_RESULT, "temporary": HUGE_TEMPORARY}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(HUGE))
def test_huge_module_is_refused_at_compile_with_both_numbers(case, backend):
    module = parse_hlo(HUGE[case])
    with pytest.raises(ResourceError) as info:
        hlofuse.compile(module, target=backend)
    text = str(info.value)
    assert module.name in text and f"{backend} backend" in text
    assert "available" in text and "MemAvailable" in text
    assert "\n" not in text  # one paragraph
    # What it needs is at least the one 4 TB array of the case.
    assert format_bytes(N * np.dtype(np.float32).itemsize) in text


@pytest.mark.parametrize("dtype,numpy_dtype", [("f32", np.float32), ("f16", np.float16), ("bf16", np.uint16),
                                               ("f64", np.float64), ("s8", np.int8), ("u32", np.uint32),
                                               ("c64", np.complex64), ("pred", np.bool_)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_parameters_and_results_are_counted_in_bytes_of_their_types(dtype, numpy_dtype, backend):
    text = f"""HloModule m

ENTRY main {{
  p0 = {dtype}[3,5]{{1,0}} parameter(0)
  p1 = {dtype}[7]{{0}} parameter(1)
  ROOT t = ({dtype}[3,5]{{1,0}}, {dtype}[7]{{0}}) tuple(p0, p1)
}}
"""
    exe = hlofuse.compile(parse_hlo(text), target=backend)
    estimate = estimate_memory(exe.fused_module, backend, exe.program)
    itemsize = np.dtype(numpy_dtype).itemsize
    assert estimate.parameters == (15 + 7) * itemsize
    assert estimate.results == (15 + 7) * itemsize


@pytest.mark.parametrize("backend", ["cpu", "gpu-emulated"])
def test_compiled_estimate_includes_the_arena_of_its_buffer_assignment(backend):
    """The fusion feeding the sort lives in the arena (16 kB), the sort's result outside it."""
    exe = hlofuse.compile(parse_hlo(SMALL_TEMPORARY), target=backend)
    arena = sum(p.assignment.arena_bytes for p in exe.program._planner.plans.values())
    estimate = estimate_memory(exe.fused_module, backend, exe.program)
    assert arena >= 4 * 1000 * 4
    assert estimate.temporaries >= arena + 4 * 1000 * 4


def _real_run_bytes(exe, inputs) -> int:
    """Bytes a first run really allocates (numpy reports its buffers to tracemalloc)."""
    tracemalloc.start()
    try:
        exe(*inputs)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("example", ["softmax.hlo", "layer_norm.hlo", "lstm_cell.hlo", "temporary"])
def test_estimate_is_a_lower_bound_of_what_a_run_allocates(example, backend):
    """Never refuse a module that fits: what the estimate says a run needs beyond its inputs
    is no more than a real first run allocates."""
    from hlofuse.runtime.io import random_inputs

    if example == "temporary":
        module = parse_hlo(SMALL_TEMPORARY)
    else:
        module = hlofuse.load(os.path.join(EXAMPLES, example))
    exe = hlofuse.compile(module, target=backend)
    estimate = estimate_memory(exe.fused_module, backend, exe.program)
    inputs = random_inputs(module, 0)
    needed = estimate.total - estimate.parameters
    assert 0 < needed <= _real_run_bytes(exe, inputs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_refused_exactly_when_the_need_exceeds_what_is_available(backend):
    module = hlofuse.load(os.path.join(EXAMPLES, "softmax.hlo"))
    exe = hlofuse.compile(module, target=backend)  # fits this machine: not refused
    estimate = estimate_memory(exe.fused_module, backend, exe.program)
    check_memory(estimate, Available(estimate.total, "test"))
    with pytest.raises(ResourceError, match="has 1 B available"):
        check_memory(estimate, Available(1, "test"))
    with pytest.raises(ResourceError):
        check_memory(estimate, Available(estimate.total - 1, "test"))


def test_compile_asks_the_machine(monkeypatch):
    module = hlofuse.load(os.path.join(EXAMPLES, "softmax.hlo"))
    monkeypatch.setattr(memory_budget, "available_memory", lambda: Available(1000, "a test's machine"))
    with pytest.raises(ResourceError, match="a test's machine"):
        hlofuse.compile(module, target="cpu")
    monkeypatch.setattr(memory_budget, "available_memory", lambda: None)  # unknown: not refused
    check_compiled(module, "interpreter")


def test_available_memory_reads_meminfo_then_sysconf(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       1000 kB\nMemFree:         10 kB\nMemAvailable:     250 kB\n")
    assert available_memory(str(meminfo)).bytes == 250 * 1024
    fallback = available_memory(str(tmp_path / "none"))
    assert fallback.bytes == os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("n,text", [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (3 << 30, "3.0 GiB")])
def test_format_bytes(n, text):
    assert format_bytes(n) == text


# ---- through the command line ------------------------------------------------------------
@pytest.fixture
def huge_files(tmp_path):
    out = {}
    for case, text in HUGE.items():
        path = tmp_path / f"huge_{case}.hlo"
        path.write_text(text)
        out[case] = str(path)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(HUGE))
def test_cli_refuses_before_random_inputs(case, backend, huge_files, monkeypatch, capsys):
    import hlofuse.runtime.io as io

    def no_inputs(*a, **k):
        raise AssertionError("random inputs generated before the memory check")

    monkeypatch.setattr(io, "random_inputs", no_inputs)
    assert main(["run", huge_files[case], "--backend", backend]) == 2
    err = capsys.readouterr().err
    assert "needs at least" in err and "available" in err and "Traceback" not in err


def test_cli_checks_the_random_inputs_scratch(tmp_path, monkeypatch, capsys):
    """f32[1000] parameter: the run needs 8 kB, drawing its input in float64 4 + 8 kB."""
    path = tmp_path / "m.hlo"
    path.write_text("HloModule m\n\nENTRY main {\n  p0 = f32[1000]{0} parameter(0)\n"
                    "  ROOT n = f32[1000]{0} negate(p0)\n}\n")
    monkeypatch.setattr(memory_budget, "available_memory", lambda: Available(10_000, "test"))
    assert main(["run", str(path), "--backend", "interpreter"]) == 2  # interpreter: 12 kB with its copy
    assert main(["run", str(path), "--backend", "cpu"]) == 2
    assert "to generate its random inputs" in capsys.readouterr().err
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=np.ones(1000, np.float32))
    out = tmp_path / "out.npz"
    assert main(["run", str(path), "--backend", "cpu", "--inputs", str(inputs), "-o", str(out)]) == 0
    with np.load(out) as data:
        np.testing.assert_array_equal(data["out0"], -np.ones(1000, np.float32))


def test_cli_compare_counts_the_interpreter_too(monkeypatch, capsys):
    module_file = os.path.join(EXAMPLES, "softmax.hlo")
    exe = hlofuse.compile(hlofuse.load(module_file), target="cpu")
    alone = estimate_memory(exe.fused_module, "cpu", exe.program).total
    params = 32 * 1000 * 4
    enough = max(alone, params + 32 * 1000 * 8)  # the run, and drawing the random input
    monkeypatch.setattr(memory_budget, "available_memory", lambda: Available(enough, "test"))
    assert main(["run", module_file, "--backend", "cpu"]) == 0
    assert main(["run", module_file, "--backend", "cpu", "--compare"]) == 2
    assert "--compare" in capsys.readouterr().err


def test_cli_subprocess_huge_parameter_exit_2_no_traceback_no_output(tmp_path, huge_files):
    out = tmp_path / "out.npz"
    proc = subprocess.run([sys.executable, "-m", "hlofuse.cli", "run", huge_files["parameter"], "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
    assert "needs at least" in proc.stderr and "parameter p0" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in huge_files.values())


def test_cuda_backend_checks_device_memory_for_the_entry_kernel_outputs(monkeypatch):
    """Without a GPU here: the plan of the CUDA backend (build_only), its device estimate, and
    the check against a small device."""
    from hlofuse.compiler import optimize
    from hlofuse.runtime.gpu_executor import GpuProgram

    fused, _ = optimize(parse_hlo(SMALL_TEMPORARY), "gpu")
    program = GpuProgram.compile(fused, emulated=False, build_only=True)
    device = memory_budget.estimate_gpu_device(fused, program)
    assert device.parameters == 16 and device.results == 16
    assert device.temporaries >= 4 * 1000 * 4  # the fusion feeding the sort stays on the device
    monkeypatch.setattr(memory_budget, "_device_available", lambda: Available(1000, "a small device"))
    with pytest.raises(ResourceError, match="on the CUDA device to run on the gpu backend.*a small device"):
        check_compiled(fused, "gpu", program)
    monkeypatch.setattr(memory_budget, "_device_available", lambda: None)  # no device: nothing to check
    assert check_compiled(fused, "gpu", program).temporaries == 0  # the host holds inputs and results only
