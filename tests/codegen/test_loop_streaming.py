"""Streaming stores in loop kernels (kernels/cpu_loop.py `streams_rows`, the shared helper
kernels/cpu_streaming.py): rows of a loop kernel whose data exceed L3 are written with
non-temporal vector stores, not read for ownership first. The kernels here are small; the
rule's L3 size is set below them (the `from_memory` fixture). Values are checked bit for bit
against the plain loop's and against the interpreter."""
from __future__ import annotations

import platform
import re

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen import generic_kernels
from hlofuse.codegen.kernels import cpu_loop, cpu_row
from hlofuse.runtime.compare import compare_outputs

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 streaming stores")
NONTEMPORAL = re.compile(r"store <\d+ x (?:float|double|i32|i64)> .*!nontemporal")


@pytest.fixture
def from_memory(monkeypatch):
    """An L3 of 64 KiB: every kernel here moves more than that; latency-bound loops stream on
    any host, as with AVX-512 (cpu_loop.NARROW_LATENCY_BOUND_STREAMS)."""
    monkeypatch.setattr(cpu_row, "l3_cache_bytes", lambda: 64 << 10)
    monkeypatch.setattr(cpu_loop, "NARROW_LATENCY_BOUND_STREAMS", True)


def _compile(text: str):
    return hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)


def _streaming(exe) -> bool:
    ir_text = exe.program.llvm_ir()
    found = bool(NONTEMPORAL.search(ir_text))
    assert found == ("llvm.x86.sse.sfence" in ir_text)  # every streaming kernel fences
    return found


def _binary(dims: tuple[int, ...], ty: str = "f32", out: str | None = None) -> str:
    """y + 2.5 x over `dims` of `ty` (converted to `out` when given)."""
    s = f"{ty}[{','.join(map(str, dims))}]"
    lines = [f"  x = {s} parameter(0)", f"  y = {s} parameter(1)", f"  c = {ty}[] constant(2.5)",
             f"  cb = {s} broadcast(c), dimensions={{}}", f"  m = {s} multiply(x, cb)"]
    if out is None:
        lines.append(f"  ROOT a = {s} add(m, y)")
    else:
        lines += [f"  a = {s} add(m, y)", f"  ROOT o = {out}[{','.join(map(str, dims))}] convert(a)"]
    return "HloModule m\n\nENTRY e {\n" + "\n".join(lines) + "\n}\n"


def _two_outputs(dims: tuple[int, ...], second: str) -> str:
    """exp(tanh(x)) and x * 3 as `second`: a multi-output loop kernel."""
    s = f"f32[{','.join(map(str, dims))}]"
    t = f"{second}[{','.join(map(str, dims))}]"
    return ("HloModule m\n\nENTRY e {\n"
            f"  x = {s} parameter(0)\n  t = {s} tanh(x)\n  e = {s} exponential(t)\n"
            f"  c = f32[] constant(3)\n  cb = {s} broadcast(c), dimensions={{}}\n  m = {s} multiply(x, cb)\n"
            f"  mc = {t} convert(m)\n  ROOT r = ({s}, {t}) tuple(e, mc)\n}}\n")


def _inputs(text: str, seed: int) -> list[np.ndarray]:
    module = hlofuse.parse_hlo(text)
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(p.shape.dims) * 2).astype(p.shape.dtype.name if p.shape.dtype.name != "f32"
                                                            else np.float32)
            for p in module.entry.parameters]


def _check(monkeypatch, text: str, seed: int) -> None:
    """Streams; the same bits as the plain loop and the interpreter's values."""
    args = _inputs(text, seed)
    exe = _compile(text)
    assert _streaming(exe)
    got = exe(*args)
    monkeypatch.setattr(cpu_loop, "streams_rows", lambda *a: False)
    plain = _compile(text)
    assert not _streaming(plain)
    for g, p in zip(got, plain(*args)):
        np.testing.assert_array_equal(g, p)
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(*args)
    for r in compare_outputs(list(got), list(want)):
        assert r.ok, r


@pytest.mark.parametrize("dims", [(64, 1024), (201, 32), (41, 4, 48), (200, 16, 3), (64, 3008)])
def test_loop_rows_stream_with_the_plain_loops_values(monkeypatch, from_memory, dims):
    """Rows, a 3-D loop, plane mode (200, 16, 3) and rows of several chunks, the last shorter
    (3008 = 2 x 1024 + 960)."""
    _check(monkeypatch, _binary(dims), seed=dims[0])


@pytest.mark.parametrize("second", ["f32", "s32"])
def test_latency_bound_multi_output_rows_stream(monkeypatch, from_memory, second):
    """Two outputs of one size (a float and an integer one too) stream together; the
    transcendental one keeps its values."""
    _check(monkeypatch, _two_outputs((33, 256), second), seed=5)


@pytest.mark.parametrize("dims", [(64, 1024), (41, 4, 48), (200, 16, 3)])
def test_rows_not_on_a_vector_boundary_are_copied_with_plain_stores(monkeypatch, from_memory, dims):
    """Where an output row does not start on a 64-byte boundary (forced here: the runtime's
    buffers are aligned) the buffered chunk is copied with plain vector stores: the same bits."""
    from hlofuse.codegen.kernels import cpu_streaming
    from llvmlite import ir

    text = _binary(dims)
    args = _inputs(text, 7)
    monkeypatch.setattr(cpu_streaming, "_aligned", lambda b, base, gens: ir.Constant(ir.IntType(1), 0))
    got = _compile(text)(*args)
    monkeypatch.setattr(cpu_loop, "streams_rows", lambda *a: False)
    np.testing.assert_array_equal(got[0], _compile(text)(*args)[0])


@pytest.mark.parametrize("text, why", [
    (_binary((64, 1000)), "rows of 1000 f32 are not whole 64-byte vectors"),
    (_binary((4096, 8, 3)), "plane mode: planes of 24 f32 are not whole 64-byte vectors"),
    (_binary((128, 2048, 3)), "plane mode: a plane's buffers would exceed BUFFER_BYTES"),
    (_binary((64, 1024), out="f16"), "16-bit outputs"),
    (_binary((64, 1024), out="pred"), "pred outputs"),
    (_two_outputs((64, 1024), "f64"), "outputs of two sizes: no vector holds the same lanes of each"),
])
def test_loops_that_do_not_stream(from_memory, monkeypatch, text, why):
    # the loop emitter's rule at each kernel's own shape (a shape-generic kernel walks rows of
    # its own length, codegen/generic_kernels.py: those of 1000 would become rows of 512)
    monkeypatch.setattr(generic_kernels, "GENERIC_KERNELS", False)
    assert not _streaming(_compile(text)), why


def test_loops_in_cache_do_not_stream():
    assert not _streaming(_compile(_binary((64, 1024))))
