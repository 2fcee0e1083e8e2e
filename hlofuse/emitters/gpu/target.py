"""GPU targets: NVPTX (PTX through LLVM's NVPTX backend) and the host emulation of a grid.

Both targets feed the SAME kernel bodies (codegen/kernels/gpu_*.py and the shared element
generators); they differ only in what STYLE.md calls target data:

  * GpuTarget: triple `nvptx64-nvidia-cuda`, kernel arguments are `addrspace(1)` typed
    pointers, thread/block ids come from the PTX special registers, transcendental math calls
    libdevice (`__nv_expf`, `__nv_log`, ...), linked from numba-cuda's CUDA wheel with its
    functions set to `linkonce_odr`. Atomics are plain `atomicrmw`/`cmpxchg`, which LLVM's
    NVPTX backend selects as `red.global.add.f32`, `atom.global.cas.b32` and so on.
  * EmulatedGpuTarget: the host triple and the CPU's math (hlofuse's approximations and libm),
    thread/block ids are loop variables of a host driver loop, the same `atomicrmw`/`cmpxchg`.

Why LLVM's NVPTX backend and not libNVVM: libNVVM (CUDA 13, NVVM IR 2.0) rejects IR the shared
element generators produce - `fneg`, `freeze`, `llvm.rint`/`llvm.round`, `atomicrmw fadd`,
16-bit `cmpxchg` - while llvmlite's LLVM 22 accepts all of it and emits PTX that ptxas
assembles for sm_80 and sm_90.
"""
from __future__ import annotations

import functools
import threading

import llvmlite.binding as llvm
from llvmlite import ir

from ..cpu.target import CpuTarget, set_process_options
from ..target import APPROX_F32, Target

NVPTX_TRIPLE = "nvptx64-nvidia-cuda"
NVPTX_DATA_LAYOUT = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
ARCHS = ("sm_80", "sm_90")
DEFAULT_ARCH = "sm_90"
GLOBAL_ADDRSPACE = 1
_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _init_nvptx() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    set_process_options()


@functools.lru_cache(maxsize=None)
def nvptx_target_machine(arch: str = DEFAULT_ARCH) -> llvm.TargetMachine:
    """An O3 NVPTX target machine for `arch` (sm_80 or sm_90), emitting PTX ISA 8.0."""
    if arch not in ARCHS:
        raise ValueError(f"unsupported GPU architecture {arch!r}; expected one of {', '.join(ARCHS)}")
    _init_nvptx()
    target = llvm.Target.from_triple(NVPTX_TRIPLE)
    return target.create_target_machine(cpu=arch, features="+ptx80", opt=3)


@functools.lru_cache(maxsize=None)
def libdevice_bitcode() -> bytes | None:
    """libdevice.10.bc from the CUDA wheel numba-cuda brings (None when it is absent)."""
    try:
        from numba.cuda.cudadrv.libs import get_libdevice

        with open(get_libdevice(), "rb") as f:
            return f.read()
    except Exception:  # noqa: BLE001 - any failure means "no libdevice here"
        return None


class GpuTarget(Target):
    """NVPTX for `arch`: libdevice math, global address space pointers, sreg thread ids."""

    name = "gpu"
    triple = NVPTX_TRIPLE
    data_layout = NVPTX_DATA_LAYOUT
    emulated = False
    pointer_addrspace = GLOBAL_ADDRSPACE
    flushes_denormals = False  # XLA:GPU's default (xla_gpu_ftz=false) keeps f32 denormals

    def __init__(self, arch: str = DEFAULT_ARCH) -> None:
        self.arch = arch

    def library_name(self, fn: str, ty: ir.Type) -> str:
        """libdevice's name: `__nv_exp` for f64, `__nv_expf` for f32."""
        return "__nv_" + (fn if isinstance(ty, ir.DoubleType) else fn + "f")

    def math(self, builder: ir.IRBuilder, fn: str, args: list) -> ir.Value:
        """Transcendentals from libdevice (as XLA's GPU backend does); the rest as on any target."""
        ty = args[0].type
        if fn == "logistic":
            one = ir.Constant(ty, 1.0)
            e = self.library_call(builder, "exp", [builder.fneg(args[0])])
            return builder.fdiv(one, builder.fadd(one, e))
        if fn == "rsqrt":
            return self.library_call(builder, "rsqrt", args)
        if fn == "tanh" and isinstance(ty, ir.FloatType):
            # XLA:GPU's f32 tanh is its branch-free approximation, not __nv_tanhf (whose error
            # adds to the reference's: 4 ULP from XLA on tanh_float32_20_20); ours is the same
            # rational form the CPU uses.
            return APPROX_F32["tanh"](builder, self, *args)
        if fn in APPROX_F32:
            return self.library_call(builder, fn, args)
        return super().math(builder, fn, args)

    def float_max(self, builder: ir.IRBuilder, a: ir.Value, b: ir.Value, is_min: bool = False) -> ir.Value:
        """NaN-propagating maximum/minimum that returns the NaN operand itself. NVPTX lowers
        llvm.maximum/minimum to `max.NaN`/`min.NaN`, which return the canonical NaN: the sign
        of a -NaN operand was lost, and a TOTALORDER compare of the result disagreed with the
        interpreter and the emulated grid (large-graph fuzzer on an H200, seed 61). The host's
        instructions return an operand, so only this target pays the two selects."""
        m = super().float_max(builder, a, b, is_min)
        m = builder.select(builder.fcmp_unordered("uno", b, b), b, m)
        return builder.select(builder.fcmp_unordered("uno", a, a), a, m)

    def float_remainder(self, builder: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
        """libdevice's fmod: NVPTX expands `frem` as x - trunc(x/y)*y with a special case for
        an infinite y that returns x, so fmod(inf, inf) came out inf, not NaN (found on an
        H200: rem_float32_1_float32_1)."""
        return self.library_call(builder, "fmod", [x, y])

    def special_register(self, builder: ir.IRBuilder, name: str) -> ir.Value:
        """Read PTX special register `name` (e.g. "tid.x", "ctaid.x") as an i32."""
        i32 = ir.IntType(32)
        fname = "llvm.nvvm.read.ptx.sreg." + name
        try:
            fn = builder.module.get_global(fname)
        except KeyError:
            fn = ir.Function(builder.module, ir.FunctionType(i32, []), fname)
        return builder.call(fn, [])

    def fingerprint(self) -> str:
        """What identifies the generated code of this target (triple and architecture)."""
        return f"{self.triple}|{self.arch}"


class EmulatedGpuTarget(CpuTarget):
    """The host CPU running a grid: host triple and math, ids from the driver loop."""

    name = "gpu-emulated"
    emulated = True
    pointer_addrspace = 0


def _link_libdevice(llmod: llvm.ModuleRef) -> None:
    declared = {f.name for f in llmod.functions if f.is_declaration and f.name.startswith("__nv_")}
    if not declared:
        return
    bc = libdevice_bitcode()
    if bc is None:
        raise RuntimeError("libdevice is not available (install numba-cuda[cu13]); cannot link " + ", ".join(sorted(declared)))
    lib = llvm.parse_bitcode(bc)
    lib.triple = NVPTX_TRIPLE
    lib.data_layout = NVPTX_DATA_LAYOUT
    for f in lib.functions:
        if not f.is_declaration:
            f.linkage = llvm.Linkage.linkonce_odr
    llmod.link_in(lib)


def compile_ptx(module: ir.Module, arch: str = DEFAULT_ARCH) -> tuple[str, str]:
    """Verify, link libdevice into, optimize (O3) and compile `module` to PTX for `arch`.

    Returns (optimized LLVM IR, PTX)."""
    tm = nvptx_target_machine(arch)
    with _lock:
        llmod = llvm.parse_assembly(str(module))
        llmod.verify()
        _link_libdevice(llmod)
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(llmod, pb)
        return str(llmod), tm.emit_assembly(llmod)
