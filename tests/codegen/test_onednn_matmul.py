"""Batched f32 dots through oneDNN's matmul primitive (codegen/kernels/cpu_gemm_onednn.py,
runtime/onednn_primitives.py) against the reference interpreter.

The oneDNN path is forced (`prefers_onednn_matmul` patched to say yes where the dot maps; no
compile cache) on dots of every dimension-number layout test_gemm.py names and on random ones
(those the primitive cannot express keep the sgemm kernels, and must still be right), and on
attention's two dots as jax lowers them (the second one's root transpose written through
strides). Also: the same bits from primitives made for 1-3 threads, a program loaded from the
module cache in a fresh process, the rule's shape classes, and the sgemm path under
HLOFUSE_GEMM=openblas. oneDNN sums in its own blocked order, so results agree with the
interpreter's float64 sums to float rounding (hlofuse.runtime.compare's tolerance).

oneDNN v3.2 has brgemm matmul kernels for f32 on AVX-512 hosts only: on an AVX2 host (the
Zen 1) every description here gets its generic "gemm:jit:f32", which the rule refuses, so the
dots keep the sgemm kernels there; the tests of the mapping, the kernel and the runtime force
the primitive on such a host, and state where gemm:jit's bits differ from brgemm's (its sums
follow the thread count its primitive was made for).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import cpu_gemm_onednn
from hlofuse.codegen.schedule import wrap_instruction
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime import onednn_primitives
from hlofuse.runtime.compare import compare_arrays
from hlofuse.runtime.gemm_provider import gemm_provider

from test_gemm import LAYOUTS, _dot_module, _random, _random_layout

from forked_child import call_in_forked_child  # noqa: E402

pytestmark = pytest.mark.skipif(gemm_provider("f32") != "onednn",
                                reason="libdnnl not loaded (or HLOFUSE_GEMM=openblas)")


# Whether oneDNN has its brgemm matmul kernels on this host (AVX-512); elsewhere every f32
# matmul gets "gemm:jit" (`_host_implementation`).
BRGEMM_HOST = "+avx512f" in CpuTarget().cpu_features.split(",")


def _force(monkeypatch) -> None:
    monkeypatch.setattr(cpu_gemm_onednn, "prefers_onednn_matmul",
                        lambda comp: (m := cpu_gemm_onednn.onednn_matmul(comp)) is not None
                        and onednn_primitives.implementation(m.desc) is not None)


@pytest.fixture
def forced(monkeypatch):
    """The matmul primitive for every dot fusion it can express, whatever implementation oneDNN
    picks (a batch dimension in the middle gets its generic "gemm:jit", which the rule refuses):
    the mapping of layouts to strides is what is tested."""
    _force(monkeypatch)


@pytest.fixture
def forced_without_brgemm(monkeypatch):
    """`forced` on a host where oneDNN has no brgemm matmul kernels (AVX2), where the rule
    takes no dot: the runtime's handling of the primitive is tested there too."""
    if not BRGEMM_HOST:
        _force(monkeypatch)


def _host_implementation(comp) -> str:
    """oneDNN's implementation for `comp`'s matmul, checked against this host's: brgemm on
    AVX-512, the generic gemm:jit on AVX2 (measured on the Zen 1 host, oneDNN v3.2)."""
    impl = onednn_primitives.implementation(cpu_gemm_onednn.onednn_matmul(comp).desc)
    assert impl.startswith("brg" if BRGEMM_HOST else "gemm:jit"), impl
    return impl


def _customs(exe) -> list:
    return [k.custom for k in exe.program._planner.kernels]


def check(text: str, seed: int = 0) -> list:
    """`text` on cpu agrees with the interpreter; the kernels' custom kinds."""
    rng = np.random.default_rng(seed)
    module = parse_hlo(text)
    args = [_random(rng, tuple(p.shape.dims), "f32") for p in module.entry.parameters]
    want = hlofuse.compile(parse_hlo(text), target="interpreter")(*args)
    exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    got = exe(*args)
    for k, (g, w) in enumerate(zip(got, want)):
        c = compare_arrays(g, w, k)
        assert c.ok, c.line() + "\n" + text
    return _customs(exe)


def _maps(text: str) -> bool:
    return cpu_gemm_onednn.onednn_matmul(wrap_instruction(parse_hlo(text).entry.root)) is not None


@pytest.mark.parametrize("layout", LAYOUTS, ids=[str(i) for i in range(len(LAYOUTS))])
def test_dimension_numbers(forced, layout):
    """Every layout class of test_gemm.py: those with strided matrices per batch element run as
    the primitive (transposes and batch dimensions anywhere as strides), the rest keep sgemm."""
    ld, rd, lb, lc, rb, rc, packs = layout
    text = _dot_module(ld, rd, lb, lc, rb, rc, "f32")
    customs = check(text, seed=len(ld))
    if packs == 0:
        assert customs == ["onednn_matmul"], text
    if packs:
        assert not _maps(text) and "onednn_matmul" not in customs


def test_the_batched_layouts_map():
    """The mapping itself (independent of oneDNN's choice of kernel): batched, batch in the
    middle, two batch and two contracting dimensions, transposed operands."""
    for i in (0, 1, 2, 3, 4, 5, 6, 9):
        ld, rd, lb, lc, rb, rc, _ = LAYOUTS[i]
        assert _maps(_dot_module(ld, rd, lb, lc, rb, rc, "f32")), LAYOUTS[i]
    ld, rd, lb, lc, rb, rc, _ = LAYOUTS[5]  # [70, 4, 33] x [4, 33, 90], batch dim 1 of the lhs
    desc = cpu_gemm_onednn.onednn_matmul(wrap_instruction(
        parse_hlo(_dot_module(ld, rd, lb, lc, rb, rc, "f32")).entry.root)).desc
    assert desc.src == onednn_primitives.Tensor((4, 70, 33), (33, 132, 1))
    assert desc.weights == onednn_primitives.Tensor((4, 33, 90), (2970, 90, 1))
    assert desc.dst == onednn_primitives.Tensor((4, 70, 90), (6300, 90, 1))


@pytest.mark.parametrize("seed", range(24))
def test_random_dimension_numbers(forced, seed):
    """Random dimension numbers (every role anywhere), sizes scaled up so that most take a
    kernel rather than the small-dot loop."""
    rng = np.random.default_rng(2000 + seed)
    ld, rd, lb, lc, rb, rc = _random_layout(rng)
    check(_dot_module(ld, rd, lb, lc, rb, rc, "f32"), seed)


def _attention_module(b: int, h: int, s: int, d: int) -> str:
    """Attention's two dots as jax lowers them: q.k^T from [b,s,h,d] operands to [b,h,s,s],
    and p.v to [b,h,s,d] transposed to [b,s,h,d]."""
    return (f"HloModule att\nENTRY e {{\n  q = f32[{b},{s},{h},{d}] parameter(0)\n"
            f"  k = f32[{b},{s},{h},{d}] parameter(1)\n  v = f32[{b},{s},{h},{d}] parameter(2)\n"
            f"  p = f32[{b},{h},{s},{s}] parameter(3)\n"
            f"  qk = f32[{b},{h},{s},{s}] dot(q, k), lhs_batch_dims={{0,2}}, lhs_contracting_dims={{3}}, "
            f"rhs_batch_dims={{0,2}}, rhs_contracting_dims={{3}}\n"
            f"  pv = f32[{b},{h},{s},{d}] dot(p, v), lhs_batch_dims={{0,1}}, lhs_contracting_dims={{3}}, "
            f"rhs_batch_dims={{0,2}}, rhs_contracting_dims={{1}}\n"
            f"  t = f32[{b},{s},{h},{d}] transpose(pv), dimensions={{0,2,1,3}}\n"
            f"  ROOT r = (f32[{b},{h},{s},{s}], f32[{b},{s},{h},{d}]) tuple(qk, t)\n}}\n")


def _jax_pv_module(b: int, h: int, s: int, d: int) -> str:
    """p.v as jax lowers einsum("bhqk,bkhd->bqhd"): dot(v, p) to [b,h,d,q], transposed to
    [b,q,h,d] (the dot's result column-major per batch element)."""
    return (f"HloModule pv\nENTRY e {{\n  v = f32[{b},{s},{h},{d}] parameter(0)\n"
            f"  p = f32[{b},{h},{s},{s}] parameter(1)\n"
            f"  pv = f32[{b},{h},{d},{s}] dot(v, p), lhs_batch_dims={{0,2}}, lhs_contracting_dims={{1}}, "
            f"rhs_batch_dims={{0,1}}, rhs_contracting_dims={{3}}\n"
            f"  ROOT t = f32[{b},{s},{h},{d}] transpose(pv), dimensions={{0,3,1,2}}\n}}\n")


def test_attention_dots(forced):
    """Both attention dots through the primitive (the transposed output as strides)."""
    assert check(_attention_module(2, 3, 64, 16)).count("onednn_matmul") == 2


def test_a_column_major_result_is_computed_transposed(monkeypatch):
    """jax's p.v writes its dot's result column-major: the description is C^T = B^T A^T
    (oneDNN has only reference loops for a column-major dst), and the rule takes it where
    oneDNN has brgemm kernels (else sgemm; forced, the C^T form still gets the answer)."""
    text = _jax_pv_module(4, 6, 512, 64)
    mapped = cpu_gemm_onednn.onednn_matmul(parse_hlo(text).entry)  # the dot with its root transpose
    assert mapped.sources == (1, 0, cpu_gemm_onednn.OUTPUT)  # p is the src, v the weights
    assert mapped.desc.dst == onednn_primitives.Tensor((4, 6, 512, 64), (196608, 64, 384, 1))
    assert (mapped.m, mapped.n) == (512, 64)
    _host_implementation(parse_hlo(text).entry)
    assert check(text) == ["onednn_matmul" if BRGEMM_HOST else "gemm"]
    if not BRGEMM_HOST:
        _force(monkeypatch)
        assert check(text) == ["onednn_matmul"]


def test_the_rule_takes_narrow_batched_dots(monkeypatch):
    """The rule's classes: attention's p.v (batched, N = d) goes to the primitive, q.k^T (N = s)
    and an unbatched dot keep sgemm, a tiny batched one stays below MIN_MATMUL_MACS. Without
    brgemm kernels (AVX2) the rule takes none of them; its classes are then checked with
    oneDNN's choice pinned to a brgemm kernel."""
    text = _attention_module(4, 6, 512, 64)
    customs = check(text)
    assert sorted(customs) == ["gemm", "onednn_matmul" if BRGEMM_HOST else "gemm"]
    assert check(_dot_module((512, 256), (256, 64), [], [1], [], [0], "f32")) == ["gemm"]
    if not BRGEMM_HOST:
        pv = parse_hlo(_jax_pv_module(4, 6, 512, 64)).entry
        _host_implementation(pv)
        assert not cpu_gemm_onednn.prefers_onednn_matmul(pv)
        monkeypatch.setattr(cpu_gemm_onednn, "fast_implementation", lambda desc: True)
    small = _dot_module((2, 32, 32), (2, 32, 16), [0], [2], [0], [1], "f32")
    assert not cpu_gemm_onednn.prefers_onednn_matmul(wrap_instruction(parse_hlo(small).entry.root))
    # jax's p.v: N = d of 32 to 128 the primitive; d = 16 (it lost up to 1.26x) sgemm
    for d, want in ((16, False), (32, True), (64, True), (128, True), (256, False)):
        comp = parse_hlo(_jax_pv_module(4, 6, 512, d)).entry
        assert cpu_gemm_onednn.prefers_onednn_matmul(comp) == want, d
    # p.v to a row-major [b,h,d,q] (its transpose not fused): M = d of 16 to 128 the primitive
    for d, want in ((8, False), (16, True), (128, True), (256, False)):
        text = _dot_module((4, 6, 512, d), (4, 6, 512, 512), [0, 1], [2], [0, 1], [3], "f32")
        comp = wrap_instruction(parse_hlo(text).entry.root)
        assert cpu_gemm_onednn.prefers_onednn_matmul(comp) == want, d


def test_same_bits_on_1_to_3_threads(forced):
    """Attention's p.v gives the compiled kernel's bits from primitives made for 1, 2 and 3
    threads (oneDNN fixes its split over threads when it makes a primitive)."""
    text = _dot_module((4, 6, 128, 256), (4, 256, 6, 64), [0, 1], [3], [0, 2], [1], "f32")
    module = parse_hlo(text)
    rng = np.random.default_rng(7)
    a, w = (_random(rng, tuple(p.shape.dims), "f32") for p in module.entry.parameters)
    exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    assert _customs(exe) == ["onednn_matmul"]
    (got,) = exe(a, w)
    desc = cpu_gemm_onednn.onednn_matmul(wrap_instruction(module.entry.root)).desc
    for n in (1, 2, 3):
        out = np.empty_like(got)
        onednn_primitives._create(desc, n).run_numpy({"src": a, "weights": w, "dst": out})
        np.testing.assert_array_equal(out.view(np.uint32), got.view(np.uint32), err_msg=f"{n} threads")


_CACHED_RUN = """
import sys, numpy as np, hlofuse
from hlofuse.codegen.kernels import cpu_gemm_onednn
if sys.argv[1:] == ["force"]:  # every dot the primitive maps (a host without brgemm kernels)
    cpu_gemm_onednn.prefers_onednn_matmul = lambda comp: cpu_gemm_onednn.onednn_matmul(comp) is not None
text = sys.stdin.read()
exe = hlofuse.compile(hlofuse.parse_hlo(text), 'cpu')
rng = np.random.default_rng(0)
args = [rng.standard_normal(tuple(p.shape.dims)).astype(np.float32) for p in hlofuse.parse_hlo(text).entry.parameters]
got = exe(*args)
print(exe.program.code.compiled_count, sorted(k.custom for k in exe.program._planner.kernels),
      repr(sum(float(g.sum()) for g in got)))
"""


def test_module_cache_round_trip(tmp_path):
    """Compiled in one process, loaded from the module cache in another: the primitive is made
    again from its description; the same results (forced in both where the rule takes no dot:
    AVX2)."""
    text = _attention_module(2, 4, 256, 32)
    env = {**os.environ, "HLOFUSE_CACHE_DIR": str(tmp_path / "cache"), "HLOFUSE_MODULE_CACHE": "1"}
    force = [] if BRGEMM_HOST else ["force"]
    runs = [subprocess.run([sys.executable, "-c", _CACHED_RUN, *force], input=text, capture_output=True, text=True,
                           env=env, check=True).stdout.split(" ", 1) for _ in range(2)]
    assert int(runs[0][0]) > 0 and runs[1][0] == "0", runs  # the second process compiled nothing
    assert runs[0][1] == runs[1][1] and "'onednn_matmul'" in runs[1][1]


def test_without_onednn_the_sgemm_path_runs(monkeypatch):
    """HLOFUSE_GEMM=openblas (as a process without libdnnl): no oneDNN kernel, same results."""
    monkeypatch.setenv("HLOFUSE_GEMM", "openblas")
    customs = check(_attention_module(4, 6, 512, 64))
    assert customs == ["gemm", "gemm"]


@pytest.mark.parametrize("perm", [(0, 2, 1, 3), (0, 3, 1, 2), (1, 0, 3, 2), (3, 2, 1, 0), (2, 0, 3, 1)])
def test_root_transposes(forced, perm):
    """A batched dot under a root transpose: written through the result's strides, as C or as
    C^T (when the transpose makes the result column-major), or by the sgemm kernels."""
    dims = (3, 5, 40, 24)  # [b0, b1, M, N] of a [3,5,40,16] x [3,5,16,24] dot
    out = tuple(dims[p] for p in perm)
    text = ("HloModule t\nENTRY e {\n  a = f32[3,5,40,16] parameter(0)\n  b = f32[3,5,16,24] parameter(1)\n"
            "  d = f32[3,5,40,24] dot(a, b), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, "
            "rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n"
            f"  ROOT t = f32[{','.join(map(str, out))}] transpose(d), dimensions={{{','.join(map(str, perm))}}}\n}}\n")
    customs = check(text, seed=sum(perm))
    if cpu_gemm_onednn.onednn_matmul(parse_hlo(text).entry) is not None:
        assert "onednn_matmul" in customs


def _one_thread_bits(text: str, args: list) -> np.ndarray:
    """`text`'s matmul (a root transpose at most) from a primitive made for one thread."""
    comp = parse_hlo(text).entry
    mapped = cpu_gemm_onednn.onednn_matmul(comp)
    out = np.empty(tuple(comp.root.shape.dims), np.float32)
    named = dict(zip(("src", "weights"), (args[i] for i in mapped.sources[:2])))
    onednn_primitives._create(mapped.desc, 1).run_numpy({**named, "dst": out})
    return out


def test_a_forked_child_runs_the_primitive_on_one_thread(forced_without_brgemm):
    """A forked child (libgomp is not fork-safe) remakes the matmul primitive for one thread,
    as it does convolutions' (onednn_primitives._after_fork_in_child), and gets the answer:
    a one-thread primitive's bits, which are the parent's where brgemm runs it (it does not
    cut K)."""
    text = _jax_pv_module(4, 6, 256, 64)
    rng = np.random.default_rng(3)
    args = [_random(rng, tuple(p.shape.dims), "f32") for p in parse_hlo(text).entry.parameters]
    exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    assert _customs(exe) == ["onednn_matmul"]
    want = exe(*args)[0]  # the parent has run oneDNN's team
    got, threads = call_in_forked_child(exe, args)
    assert threads == {1}
    np.testing.assert_array_equal(got.view(np.uint32), _one_thread_bits(text, args).view(np.uint32))
    if BRGEMM_HOST:
        np.testing.assert_array_equal(got, want)
    else:
        assert compare_arrays(got, want, 0).ok


def test_programs_loaded_under_different_thread_counts_keep_their_own_primitive(monkeypatch,
                                                                                 forced_without_brgemm):
    """oneDNN fixes a primitive's split over threads when it is made: a program loaded under
    HLOFUSE_CPU_THREADS=1 after one loaded on two threads must not hand the first a primitive
    made for one thread (nor change the count its calls run with). The whole product in one
    call (not cut into batch units), the form where oneDNN splits the call."""
    text = _jax_pv_module(4, 6, 256, 64)
    monkeypatch.setattr(cpu_gemm_onednn, "SPLIT_BATCH", False)
    monkeypatch.delenv("HLOFUSE_CPU_THREADS", raising=False)
    two = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "1")
    one = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    (desc,) = two.program.primitives
    made = {t: p for (d, t), p in onednn_primitives._primitives.items() if d == desc}
    assert set(made) >= {1} and made[1].threads_cell.value == 1
    from hlofuse.runtime.cpu_threads import kernel_threads
    monkeypatch.delenv("HLOFUSE_CPU_THREADS")
    many = kernel_threads()
    if many > 1:
        assert made[many].threads == made[many].threads_cell.value == many
    rng = np.random.default_rng(5)
    args = [_random(rng, tuple(p.shape.dims), "f32") for p in parse_hlo(text).entry.parameters]
    got_one = one(*args)[0]
    np.testing.assert_array_equal(got_one.view(np.uint32), _one_thread_bits(text, args).view(np.uint32))
    if BRGEMM_HOST or many == 1:  # brgemm does not cut K: the same bits on any count
        np.testing.assert_array_equal(two(*args)[0], got_one)
    else:
        assert compare_arrays(two(*args)[0], got_one, 0).ok


@pytest.mark.parametrize("shapes", [
    ((3, 6, 128, 256), (3, 256, 6, 64), [0, 1], [3], [0, 2], [1]),  # p.v, [b,q,h,d] operands
    ((5, 2, 64, 32), (5, 2, 32, 48), [0, 1], [3], [0, 1], [2]),  # row-major, 5 units of 2
    ((1, 4, 64, 32), (1, 4, 32, 48), [0, 1], [3], [0, 1], [2]),  # outer batch of 1: one call
])
def test_batch_units_give_the_whole_calls_bits(forced, monkeypatch, shapes):
    """A matmul kernel runs one work unit per element of the outermost batch dimension, each
    a call of a one-thread primitive on that slice (the driver's threads share the units):
    the interpreter's answer, and bit for bit the whole product's single call, on 1-3 kernel
    threads. An outermost batch of one element keeps the single call. On AVX2 (gemm:jit, the
    Zen 1 host) the whole call's bits follow its thread count (233 of 30,720 elements of the
    first shape differ between 3 threads and 1): there the units match the one-thread call."""
    lhs, rhs, lb, lc, rb, rc = shapes
    text = _dot_module(lhs, rhs, lb, lc, rb, rc, "f32")
    rng = np.random.default_rng(11)
    args = [_random(rng, tuple(p.shape.dims), "f32") for p in parse_hlo(text).entry.parameters]
    assert check(text, 11) == ["onednn_matmul"]
    outs, whole_calls = {}, {}
    for split in (False, True):
        monkeypatch.setattr(cpu_gemm_onednn, "SPLIT_BATCH", split)
        for threads in (1, 2, 3):
            monkeypatch.setenv("HLOFUSE_CPU_THREADS", str(threads))
            exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
            (kernel,) = exe.program._planner.kernels
            assert kernel.units == (lhs[0] if split and lhs[0] > 1 else 1)
            (desc,) = exe.program.primitives
            assert desc.per_unit == (kernel.units > 1)
            if desc.per_unit:
                assert desc.dst.dims[0] == 1
                assert {t for (d, t) in onednn_primitives._primitives if d == desc} == {1}
            outs[split, threads] = exe(*args)[0]
            whole_calls[split, threads] = kernel.units == 1
    want = outs[False, 1].view(np.uint32)
    for key, got in outs.items():
        if BRGEMM_HOST or not whole_calls[key] or key[1] == 1:
            np.testing.assert_array_equal(got.view(np.uint32), want, err_msg=str(key))
        else:  # gemm:jit's whole call sums in an order that follows its thread count (AVX2)
            assert compare_arrays(got, outs[False, 1], 0).ok, key


def test_primitives_made_in_the_background_fill_the_blocks_registered_before(forced, monkeypatch):
    """register_primitives(background=True): a primitive not made yet in this process gets its
    handle block at once, registered under its symbol before the object code links, and a
    thread fills it (the cached compile's load, cpu_executor._load); `wait` returns once it is
    filled, or raises the thread's error."""
    import llvmlite.binding as llvm

    from hlofuse.runtime import cpu_threads

    exe = hlofuse.compile(parse_hlo(_attention_module(2, 3, 64, 16)), "cpu", cache=False)
    (desc, *_) = exe.program.primitives
    monkeypatch.setattr(cpu_threads, "kernel_threads", lambda: 3)  # a count no primitive was made for
    key = (desc, 1 if getattr(desc, "per_unit", False) else 3)
    onednn_primitives._primitives.pop(key, None)
    try:
        wait = onednn_primitives.register_primitives([desc, desc], background=True)
        registered = llvm.address_of_symbol(desc.symbol)
        wait()
        made = onednn_primitives._primitives[key]
        assert made.address == registered and made.block[onednn_primitives.SLOT_PRIMITIVE]
        assert made.threads == key[1] and made.threads_cell.value == key[1]
        # made already: registered at once, nothing left to a thread
        assert onednn_primitives.register_primitives([desc], background=True) is onednn_primitives._nothing_to_wait_for
        onednn_primitives._primitives.pop(key)

        def fails(d, threads):
            raise onednn_primitives.OneDnnError("no implementation")

        monkeypatch.setattr(onednn_primitives, "_create", fails)
        wait = onednn_primitives.register_primitives([desc], background=True)
        with pytest.raises(onednn_primitives.OneDnnError, match="no implementation"):
            wait()
    finally:
        onednn_primitives._primitives.pop(key, None)
