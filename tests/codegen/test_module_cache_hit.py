"""What a module cache hit does and does not do (compiler.compile, codegen/module_cache.py): it
prints the module once, without operand shapes, for its key; it reads the fusion log only when
a report asks for it; it makes no ctypes function per kernel until the step interpreter calls
one. And the key sees every change made to a module after it was parsed, so a hit never runs
code compiled for another module."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse import compiler
from hlofuse.codegen import cache, module_cache
from hlofuse.hlo import printer
from hlofuse.hlo.ir import HloModule
from hlofuse.runtime.io import random_inputs

# Fusions (so the log has entries), a reduction, a constant, a compare and a select.
TEXT = """HloModule hit

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[32,16] parameter(0)
  q = f32[32,16] parameter(1)
  c = f32[32,16] constant({...})
  e = f32[32,16] exponential(q)
  x = f32[32,16] add(p, e)
  y = f32[32,16] multiply(x, c)
  lt = pred[32,16] compare(x, y), direction=LT
  m = f32[32,16] select(lt, x, y)
  z = f32[] constant(0)
  ROOT r = f32[32] reduce(m, z), dimensions={1}, to_apply=add
}
"""


def _text() -> str:
    values = np.linspace(-2.0, 2.0, 32 * 16, dtype=np.float32).reshape(32, 16)
    rows = ", ".join("{" + ", ".join(repr(float(v)) for v in row) + "}" for row in values)
    return TEXT.replace("{...}", "{" + rows + "}")


def test_a_hit_prints_the_module_once_without_operand_shapes_and_reads_no_log(cache_dir, monkeypatch):
    first = hlofuse.compile(hlofuse.parse_hlo(_text()), "cpu")
    assert not first.from_cache and len(first.fusion_log) > 0
    cache.memory_cache.clear()  # from disk

    prints: list[bool] = []
    module_to_text = printer.module_to_text

    def counted(module, operand_shapes=True):
        prints.append(operand_shapes)
        return module_to_text(module, operand_shapes)

    def no_full_text(self):
        raise AssertionError("a hit printed the whole module")

    reads: list[int] = []
    read = module_cache._Rest._read_logs

    def counted_read(self):
        reads.append(1)
        return read(self)

    monkeypatch.setattr(module_cache._Rest, "_read_logs", counted_read)
    with monkeypatch.context() as printing:
        printing.setattr(printer, "module_to_text", counted)
        printing.setattr(HloModule, "to_text", no_full_text)
        exe = hlofuse.compile(hlofuse.parse_hlo(_text()), "cpu")
    assert exe.from_cache
    assert prints == [False] and reads == []
    # the log is read when a report asks for it, once, and is the one the planner held
    assert exe.report() == first.report() and exe.report() == first.report()
    assert len(reads) == 1
    assert exe.fusion_log is exe.fused_module.fusion_log is exe.program.code.planner.log
    assert [e.to_dict() for e in exe.fusion_log] == [e.to_dict() for e in first.fusion_log]


def test_a_loaded_program_makes_kernel_functions_only_for_the_step_interpreter(cache_dir):
    module = hlofuse.parse_hlo(_text())
    hlofuse.compile(module, "cpu")
    cache.memory_cache.clear()
    exe = hlofuse.compile(hlofuse.parse_hlo(_text()), "cpu")
    assert exe.from_cache and exe.program.loaded
    assert all(k._fn is None for k in exe.program.loaded.values())
    args = random_inputs(module, seed=4)
    driver = exe(*args)
    assert all(k._fn is None for k in exe.program.loaded.values())  # the driver calls by address
    stepped = exe.program.run_interpreted(list(args))
    assert [x.tobytes() for x in stepped] == [x.tobytes() for x in driver]
    assert any(k._fn is not None for k in exe.program.loaded.values())


def _find(module: HloModule, name: str):
    return next(i for c in module.computations for i in c.instructions if i.name == name)


def _change(module: HloModule, change: str) -> None:
    """Edit the parsed module in place, as a user of the API may."""
    if change == "literal in place":
        _find(module, "c").literal[3, 5] = 9.0
    elif change == "attribute":
        _find(module, "lt").attrs["direction"] = "GT"
    elif change == "opcode":
        _find(module, "e").opcode = "tanh"
    elif change == "operand":
        _find(module, "y").replace_operand(1, _find(module, "p"))
    elif change == "reduced dimension":
        r = _find(module, "r")
        r.attrs["dimensions"] = (0,)
        r.shape = r.shape.with_dims((16,), r.shape.layout)
    else:  # a control edge: scheduling, which the driver's order follows
        _find(module, "e").control_predecessors = [_find(module, "c")]


@pytest.mark.parametrize("change", ["literal in place", "attribute", "opcode", "operand", "reduced dimension",
                                    "control edge"])
def test_the_key_sees_a_change_made_after_parsing(cache_dir, change):
    """The key is the module as it is now, not the text it was parsed from: a module edited
    after parsing misses, and computes what the interpreter computes for the edited module."""
    module = hlofuse.parse_hlo(_text())
    key = compiler._entry_key(module, "cpu", True, None)
    assert hlofuse.compile(module, "cpu").from_cache is False
    _change(module, change)
    assert compiler._entry_key(module, "cpu", True, None) != key
    exe = hlofuse.compile(module, "cpu")
    assert not exe.from_cache
    args = random_inputs(module, seed=7)
    want = hlofuse.compile(module, "interpreter")(*args)
    for got, ref in zip(exe(*args), want):
        np.testing.assert_allclose(got, ref, rtol=2e-6, atol=1e-6)


_FRESH = """
import sys, hlofuse
from hlofuse.runtime import jit_builtins
exe = hlofuse.compile(hlofuse.parse_hlo(open(sys.argv[1]).read()), "cpu")
print(exe.from_cache, "scipy.linalg" in sys.modules, bool(jit_builtins._registered), bool(jit_builtins._scratch))
"""


def test_a_new_process_registers_only_what_the_loaded_kernels_call(cache_dir, tmp_path):
    """Loading a program registers the half builtins (an LLVM compile), the scratch allocator
    and BLAS (importing scipy) only when a kernel calls them; a program with no GEMM and no half
    precision, loaded in a new process, needs none. With an f64 -> f16 convert and a dot it needs both
    (and still computes the interpreter's results: tests/runtime/test_cpu_libcalls.py)."""
    import subprocess
    import sys

    plain = tmp_path / "plain.hlo"
    plain.write_text(_text())
    half = tmp_path / "half.hlo"
    # f64 -> f16 is a call of __truncdfhf2 on every x86-64 (jit_builtins.py); the dot calls dgemm
    half.write_text("HloModule half\nENTRY e {\n  a = f64[64,64] parameter(0)\n  b = f64[64,64] parameter(1)\n"
                    "  d = f64[64,64] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                    "  ROOT h = f16[64,64] convert(d)\n}\n")
    env = {**__import__("os").environ, "HLOFUSE_CACHE_DIR": str(cache_dir), "HLOFUSE_GEMM": "openblas"}
    seen = {}
    for path in (plain, half):
        for _ in range(2):  # compiled, then loaded whole from the module entry
            out = subprocess.run([sys.executable, "-c", _FRESH, str(path)], capture_output=True, text=True, env=env,
                                 check=True).stdout.split()
            seen.setdefault(path.stem, []).append(out)
    assert seen["plain"] == [["False", "False", "False", "False"], ["True", "False", "False", "False"]]
    assert [o[0] for o in seen["half"]] == ["False", "True"]
    assert all(o[1:3] == ["True", "True"] for o in seen["half"]), seen["half"]


_QUIET = """
import subprocess, sys
import hlofuse
from hlofuse.runtime import jit_builtins
from hlofuse.runtime.io import random_inputs
module = hlofuse.parse_hlo(open(sys.argv[1]).read())
def refuse(*args, **kwargs):
    raise AssertionError("a cached compile started a subprocess")
subprocess.Popen = refuse  # ctypes.util.find_library runs ldconfig through it
exe = hlofuse.compile(module, "cpu")
exe(*random_inputs(module, seed=1))
print(exe.from_cache, bool(jit_builtins._scratch), "importlib.metadata" in sys.modules)
"""

# A convolution whose GEMM kernel packs its input in scratch memory: loading it registers libc's
# allocator (jit_builtins.register_scratch_allocator), and the driver runs on libgomp.
CONV = """HloModule conv
ENTRY e {
  x = f32[4,28,28,128] parameter(0)
  w = f32[3,3,128,128] parameter(1)
  c = f32[4,28,28,128] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  ROOT t = f32[4,28,28,128] tanh(c)
}
"""


def test_a_new_processs_hit_starts_no_subprocess_and_reads_no_package_metadata(cache_dir, tmp_path):
    """What a hit in a new process asks of the machine is cheap: libgomp and libc by their
    sonames or the process's own symbols, not through ctypes.util.find_library (an ldconfig
    subprocess, 9-22 ms of wall time), and neither the hlofuse version nor libdnnl's path
    through importlib.metadata (an import and a walk of the installed distributions: 13-15 ms
    of CPU)."""
    import subprocess
    import sys

    path = tmp_path / "conv.hlo"
    path.write_text(CONV)
    hlofuse.compile(hlofuse.parse_hlo(CONV), "cpu")  # the entry
    env = {**__import__("os").environ, "HLOFUSE_CACHE_DIR": str(cache_dir)}
    out = subprocess.run([sys.executable, "-c", _QUIET, str(path)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    # (if this convolution stops using scratch memory, pick one that does: the allocator's
    # registration is what this test is about)
    assert out.stdout.split() == ["True", "True", "False"]
