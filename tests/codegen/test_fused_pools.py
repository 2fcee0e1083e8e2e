"""Window reductions fused with their producers and consumers in CPU loop kernels
(passes/fusion/window_fusion.py; the element generator of reduce-window, emitters/elemental_data.py):
max and sum pools with padding, strides, base and window dilation, in NHWC and NCHW, over f32,
bf16 and s32, fused with relu, divide and convert. Each module is checked three ways: it fuses
(the pool shares a kLoop fusion with its consumer), its results equal the interpreter's bit for
bit, and equal those of the same module fused by XLA:CPU's rule (the pool a kernel of its own)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import hlofuse
from hlofuse.compiler import optimize
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.fusion import fusion_passes
from hlofuse.passes.fusion.cost_model import CPU
from hlofuse.passes.pipeline import PassPipeline
from hlofuse.runtime.cpu_executor import CpuProgram

from backend_oracle import bits_equal

XLA_CPU = dataclasses.replace(CPU, fuse_window_reductions=False)


@dataclasses.dataclass(frozen=True)
class Pool:
    """One pooled module: `layout` NHWC or NCHW, the window over the two spatial dimensions."""

    name: str
    dtype: str = "f32"
    layout: str = "NHWC"
    reducer: str = "add"  # add | maximum
    size: tuple = (2, 2)
    stride: tuple = (2, 2)
    pad: tuple = ((0, 0), (0, 0))
    base_dilation: tuple = (1, 1)
    window_dilation: tuple = (1, 1)
    consumer: str = "divide"  # divide | relu | convert

    def window(self) -> str:
        def four(pair_n, pair_c, spatial):
            s = list(spatial)
            return [pair_n, s[0], s[1], pair_c] if self.layout == "NHWC" else [pair_n, pair_c, s[0], s[1]]
        size = "x".join(map(str, four(1, 1, self.size)))
        stride = "x".join(map(str, four(1, 1, self.stride)))
        pad = "x".join(f"{lo}_{hi}" for lo, hi in four((0, 0), (0, 0), self.pad))
        lhs = "x".join(map(str, four(1, 1, self.base_dilation)))
        rhs = "x".join(map(str, four(1, 1, self.window_dilation)))
        return f"size={size} stride={stride} pad={pad} lhs_dilate={lhs} rhs_dilate={rhs}"

    def dims(self, n: int, h: int, w: int, c: int) -> list[int]:
        return [n, h, w, c] if self.layout == "NHWC" else [n, c, h, w]

    def out_hw(self, h: int, w: int) -> tuple[int, int]:
        out = []
        for x, k, s, (lo, hi), bd, wd in zip((h, w), self.size, self.stride, self.pad, self.base_dilation,
                                             self.window_dilation):
            span = (x - 1) * bd + 1 + lo + hi
            out.append((span - ((k - 1) * wd + 1)) // s + 1)
        return out[0], out[1]

    def text(self, n: int = 2, h: int = 9, w: int = 10, c: int = 5) -> str:
        t = self.dtype
        ho, wo = self.out_hw(h, w)
        xs = f"{t}[{','.join(map(str, self.dims(n, h, w, c)))}]"
        ys = f"{t}[{','.join(map(str, self.dims(n, ho, wo, c)))}]"
        init = "0" if self.reducer == "add" else ("-inf" if t != "s32" else "-2147483648")
        if self.consumer == "divide":
            tail = (f"  k = {t}[] constant(3)\n  ks = {ys} broadcast(k), dimensions={{}}\n"
                    f"  ROOT out = {ys} divide(pool, ks)")
        elif self.consumer == "relu":
            tail = f"  zs = {ys} broadcast(zero), dimensions={{}}\n  ROOT out = {ys} maximum(pool, zs)"
        else:
            other = "f32" if t != "f32" else "bf16"
            tail = f"  ROOT out = {other}[{ys[len(t) + 1:]} convert(pool)"
        return f"""HloModule {self.name}

red {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT r = {t}[] {self.reducer}(a, b)
}}

ENTRY main {{
  x = {xs} parameter(0)
  zero = {t}[] constant(0)
  zeros = {xs} broadcast(zero), dimensions={{}}
  relu = {xs} maximum(x, zeros)
  init = {t}[] constant({init})
  pool = {ys} reduce-window(relu, init), window={{{self.window()}}}, to_apply=red
{tail}
}}
"""


POOLS = [
    Pool("flax_average"),
    Pool("average_nchw", layout="NCHW"),
    Pool("max_3x3_stride2_same", reducer="maximum", size=(3, 3), stride=(2, 2), pad=((1, 1), (1, 1)), consumer="relu"),
    Pool("max_overlap_nchw", reducer="maximum", size=(3, 3), stride=(1, 1), layout="NCHW", consumer="convert"),
    Pool("sum_dilated_window", size=(2, 3), stride=(1, 2), window_dilation=(2, 2), pad=((1, 0), (0, 2))),
    Pool("sum_base_dilated", size=(2, 2), stride=(1, 1), base_dilation=(2, 2), pad=((1, 1), (1, 1))),
    Pool("bf16_average", dtype="bf16"),
    Pool("bf16_max_convert", dtype="bf16", reducer="maximum", size=(3, 3), stride=(2, 2), consumer="convert"),
    Pool("s32_sum_divide", dtype="s32", size=(3, 2), stride=(2, 1), pad=((0, 1), (1, 0))),
    Pool("s32_max_relu", dtype="s32", reducer="maximum", consumer="relu", layout="NCHW"),
]


def _inputs(pool: Pool, module) -> list[np.ndarray]:
    shape = module.entry.parameter(0).shape
    rng = np.random.default_rng(7)
    if pool.dtype == "s32":
        return [rng.integers(-50, 50, shape.dims).astype(np.int32)]
    x = rng.standard_normal(shape.dims).astype(np.float32)
    if pool.dtype == "bf16":
        import ml_dtypes
        return [x.astype(ml_dtypes.bfloat16)]
    return [x]


def _fused_with(module, params):
    """`module` through the standard passes, fused by `params`' rules, compiled for the CPU.
    XLA:CPU's rule (`XLA_CPU`) runs the passes XLA:CPU has: instruction fusion, not hlofuse's
    CPU sibling fusion, which may compute a plain loop (a pool among them) in its consumer's."""
    unfused, _ = optimize(module, "cpu", fusion=False)
    work = unfused.clone()
    passes = [p for p in fusion_passes(params) if params is not XLA_CPU or p.name != "sibling-fusion"]
    PassPipeline([*passes, DeadCodeElimination()]).run(work)
    return work, CpuProgram.compile(work, cache=False)


def _pool_shares_a_fusion_with_its_consumer(fused) -> bool:
    for inst in fused.entry.instructions:
        if inst.opcode == "fusion" and inst.attrs.get("kind") == "kLoop":
            ops = [i.opcode for i in inst.fused_computation.instructions]
            if "reduce-window" in ops and inst.fused_computation.root.opcode != "reduce-window":
                return True
    return False


@pytest.mark.parametrize("pool", POOLS, ids=[p.name for p in POOLS])
def test_fused_pool_equals_interpreter_and_unfused_pool(pool: Pool):
    module = parse_hlo(pool.text())
    args = _inputs(pool, module)
    want = list(hlofuse.compile(module, target="interpreter")(*args))

    fused, program = _fused_with(module, CPU)
    assert _pool_shares_a_fusion_with_its_consumer(fused), fused.to_text()
    got = program.run(args)

    apart, apart_program = _fused_with(module, XLA_CPU)
    assert any(i.opcode == "reduce-window" for i in apart.entry.instructions), apart.to_text()
    separate = apart_program.run(args)

    for g, s, w in zip(got, separate, want):
        assert bits_equal(g, w).all(), (pool.name, np.asarray(g, np.float64) - np.asarray(w, np.float64))
        assert bits_equal(g, s).all(), pool.name


def test_fused_average_pool_is_one_kernel_per_pool():
    """The flax MNIST CNN's pool and divide: two loop kernels apart, one fused."""
    module = parse_hlo(Pool("flax_average", consumer="divide").text(n=4, h=28, w=28, c=32))
    fused, _ = _fused_with(module, CPU)
    apart, _ = _fused_with(module, XLA_CPU)
    kernels = [i for i in fused.entry.instructions if i.opcode not in ("parameter", "constant")]
    kernels_apart = [i for i in apart.entry.instructions if i.opcode not in ("parameter", "constant")]
    assert len(kernels) == 1 and len(kernels_apart) == 3  # relu loop, pool, divide loop


def test_reshaped_pool_is_walked_at_the_pool_dimensions():
    """A pool fused with its divide and a flattening reshape (the flax MNIST CNN's second pool)
    is walked at the pool's dimensions (cpu_loop.window_reshape_source): rows of 32 channels,
    not of the 4*5*32 flattened elements; and its results are the interpreter's, bit for bit."""
    from hlofuse.codegen.planning import plan_fusion

    pool = Pool("flattened", reducer="maximum", size=(3, 3), stride=(2, 2), pad=((1, 1), (1, 1)))
    text = pool.text(n=3, h=8, w=9, c=32).replace("  ROOT out = f32[3,4,5,32] divide(pool, ks)",
                                                   "  out = f32[3,4,5,32] divide(pool, ks)\n"
                                                   "  ROOT flat = f32[3,640] reshape(out)")
    module = parse_hlo(text)
    fused, program = _fused_with(module, CPU)
    (fusion,) = [i for i in fused.entry.instructions if i.opcode == "fusion"]
    assert fusion.fused_computation.root.opcode == "reshape"
    (kernel,), _ = plan_fusion(fusion.fused_computation, "k")
    assert (kernel.units, kernel.unit_elements) == (3 * 4 * 5, 32)
    args = _inputs(pool, module)
    (want,) = hlofuse.compile(module, target="interpreter")(*args)
    (got,) = program.run(args)
    assert bits_equal(got, want).all()


def _pool_kernel_ir(tmp_path, pad: str) -> str:
    """The unoptimized IR of the loop kernel of a 2x2 average pool over f32[2,8,8,16]."""
    text = f"""HloModule pool
add {{ a = f32[] parameter(0) b = f32[] parameter(1) ROOT s = f32[] add(a, b) }}
ENTRY main {{
  x = f32[2,8,8,16] parameter(0)
  zero = f32[] constant(0)
  ROOT p = f32[2,{4 if pad == '0_0' else 5},{4 if pad == '0_0' else 5},16] reduce-window(x, zero), window={{size=1x2x2x1 stride=1x2x2x1 pad=0_0x{pad}x{pad}x0_0}}, to_apply=add
}}
"""
    from hlofuse.cli import main

    tmp_path.mkdir()
    (tmp_path / "pool.hlo").write_text(text)
    assert main(["compile", str(tmp_path / "pool.hlo"), "--dump-dir", str(tmp_path / "dump"), "--no-cache",
                 "-o", str(tmp_path / "pool.out")]) == 0
    (path,) = [p for p in (tmp_path / "dump").iterdir() if p.name.endswith(".unoptimized.ll")]
    return path.read_text()


def test_windows_that_stay_inside_test_no_position(tmp_path):
    """A window that never reaches padding (2x2, stride 2, no padding) reads its elements with
    no bounds test: straight-line code for LLVM (the flax MNIST CNN's pools: 20% less of its
    optimizer's time); a padded one tests each position. Both equal the interpreter's
    (test_fused_pool_matches_interpreter_and_xla_cpu_rule above, with and without padding)."""
    inside = _pool_kernel_ir(tmp_path / "inside", "0_0")
    padded = _pool_kernel_ir(tmp_path / "padded", "1_1")
    assert "icmp sge" not in inside and "icmp sge" in padded
