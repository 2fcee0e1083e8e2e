"""f32 convolutions (with their fused epilogue) through a oneDNN convolution primitive: the
mapping, the plan and the rule (the kernel: cpu_conv_onednn_kernel.py).

    mapped = onednn_convolution(comp)     # OneDnnConv: the description and its buffers, or None
    plans = plan_onednn_conv(comp, name)  # (kernels, temporaries): custom="onednn_conv" first
    prefers_onednn(comp)                  # the rule, by shape class

A kOutput fusion of a convolution (the fusion passes decide it, passes/fusion/conv_fusion.py)
runs as one call of a oneDNN primitive when `prefers_onednn` says so (docs/convolutions.md).
The primitive is described by `ConvDescription` (runtime/onednn_primitives.py), created when
the program loads, and found by the kernel through the external symbol `desc.symbol`.

- **Layouts** are strides: the operands' row-major HLO layouts under the dimension numbers
  become oneDNN's (N, C, spatial...) and ([G,] O, I, spatial...) strides, so every dimension
  numbering maps without a copy (oneDNN runs many of them only with its reference loops,
  which the planner refuses: `fast_implementation`). The weights go to the layout oneDNN
  picks (`format_any`) and are reordered each call into per-call scratch.
- **The epilogue** becomes post-ops where each op maps exactly (`_Epilogue`): a bias add
  (oneDNN's bias when it comes first), adds, subtracts and multiplies with a scalar constant
  (eltwise linear) or with a per-feature operand (a parameter, a constant, or an expression
  of parameters such as batch norm's scale, computed by the kernel) or one of the output's
  shape (binary post-ops: residual add, per-channel scale). The rest of the epilogue, from
  the first op that does not map (max, min and clamp included: oneDNN's relu and clip give
  the bound for a NaN where XLA gives NaN, `NAN_EXACT`), runs as a loop kernel over the
  primitive's result (`OneDnnConv.split`, `epilogue_note`).
- Not expressible (they keep our kernels): batch groups, lhs dilation (transposed
  convolutions), window reversal, negative padding, more than three spatial dimensions,
  other types than f32 throughout. No spatial dimension is one of size 1.

Threads: the kernel is one work unit; oneDNN splits the call over libgomp's threads itself
(omp_set_num_threads around the call, the count from the primitive's thread cell: the
program's thread count, 1 in a forked child). oneDNN's worker threads do not get the kernel
skeleton's flush-to-zero mode: a denormal intermediate may stay denormal there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...emitters.ir_helpers import row_major_strides
from ...hlo.attributes import WindowDimension
from ...hlo.ir import HloComputation, HloInstruction
from ...runtime import onednn_primitives as dnnl
from ..planning import KernelPlan, plan_fusion, rebuild
from .cpu_conv import conv_geometry, dimension_numbers, find_convolution

F32_MAX = float(np.finfo(np.float32).max)
# Whether epilogues keep XLA's NaN semantics: oneDNN's relu and clip (vmaxps / vminps) turn a
# NaN into the bound, where XLA's maximum, minimum and clamp give NaN, so these ops run in our
# loop kernel after the primitive (docs/convolutions.md has the cost of both choices).
NAN_EXACT = True
# Whether oneDNN picks the weights' layout (reordered each call) rather than reading them as
# they are (docs/convolutions.md has both measured).
WEIGHTS_ANY = True


# Where an execution argument's memory comes from, besides a parameter's number.
OUTPUT, CONSTANT = -1, -2


@dataclass(frozen=True)
class OneDnnConv:
    """A convolution fusion as a oneDNN primitive: its description, and for each execution
    argument (`desc.arguments()` order) where its memory is: a parameter number, OUTPUT,
    CONSTANT (values in the handle block), or a broadcast instruction of the fusion whose O
    per-feature values the kernel computes into scratch before the call."""

    desc: dnnl.ConvDescription
    sources: tuple
    # The last instruction the primitive computes when the rest of the epilogue is not
    # post-ops (`tail` says why): that rest runs as our loop kernel over its result.
    split: HloInstruction | None = None
    tail: str | None = None


def _tensor(dims: tuple[int, ...], axes: list[int]) -> dnnl.Tensor:
    """The row-major array of `dims` seen in the logical order `axes`."""
    strides = row_major_strides(dims)
    return dnnl.Tensor(tuple(dims[a] for a in axes), tuple(strides[a] for a in axes))


def _scalar(inst: HloInstruction) -> float | None:
    """The value of a scalar f32 constant, or of a broadcast of one; None otherwise."""
    if inst.opcode == "broadcast" and not inst.operands[0].shape.dims:
        inst = inst.operands[0]
    if inst.opcode != "constant" or inst.shape.dims or inst.literal is None:
        return None
    return float(np.asarray(inst.literal, np.float32).reshape(()))


class _Epilogue:
    """The post-ops of a convolution's epilogue chain, built op by op (`add`)."""

    def __init__(self, conv: HloInstruction) -> None:
        dn = dimension_numbers(conv)
        self.dims = tuple(conv.shape.dims)
        self.out_axes = [dn.output_batch, dn.output_feature, *dn.output_spatial]
        self.feature = dn.output_feature
        self.post_ops: list[dnnl.PostOp] = []
        self.sources: list[int] = []  # per binary post-op, its parameter
        self.bias: int | None = None  # the bias parameter

    def _feature_vector(self, inst: HloInstruction):
        """For a broadcast along the output feature dimension alone: ("param", number) of a
        parameter, ("const", values) of a constant, or ("expr", inst) of any other expression
        of parameters and constants (batch norm's scale and shift: the kernel computes its O
        values with their element generators before the call, as our kernels compute them);
        None otherwise."""
        if inst.opcode != "broadcast" or tuple(inst.attrs.get("dimensions", ())) != (self.feature,):
            return None
        src = inst.operands[0]
        if src.opcode == "parameter":
            return "param", src.parameter_number
        if src.opcode == "constant" and src.literal is not None:
            return "const", tuple(float(v) for v in np.asarray(src.literal, np.float32).reshape(-1))
        if _independent(src):
            return "expr", inst
        return None

    def _binary(self, alg: int, other: HloInstruction) -> str | None:
        """Append binary post-op `alg` with `other` (per-feature or full-shape) as operand."""
        vec = self._feature_vector(other)
        n_features = self.dims[self.feature]
        per_feature = dnnl.Tensor(tuple(n_features if k == 1 else 1 for k in range(len(self.dims))),
                                  tuple(1 if k else n_features for k in range(len(self.dims))))
        if vec is not None and vec[0] in ("param", "expr"):
            self.post_ops.append(dnnl.PostOp("binary", alg, operand=per_feature))
            self.sources.append(vec[1])
        elif vec is not None:
            self.post_ops.append(dnnl.PostOp("binary", alg, operand=per_feature, constant=vec[1]))
        elif other.opcode == "parameter" and tuple(other.shape.dims) == self.dims:
            self.post_ops.append(dnnl.PostOp("binary", alg, operand=_tensor(self.dims, self.out_axes)))
            self.sources.append(other.parameter_number)
        else:
            return (f"{other.opcode} operand is neither a scalar constant, a per-feature broadcast nor "
                    "of the output's shape")
        return None

    def add(self, inst: HloInstruction, x: HloInstruction) -> str | None:
        """Map `inst`, whose operand `x` is the chain so far; None, or why it does not map."""
        if inst.shape.dtype.name != "f32":
            return f"{inst.opcode} to {inst.shape.dtype.name}"
        op = inst.opcode
        if op in ("clamp", "maximum", "minimum") and NAN_EXACT:
            return "oneDNN's max, min and clip give the bound, not NaN, for a NaN input"
        if op == "clamp" and inst.operands[1] is x:
            lo, hi = _scalar(inst.operands[0]), _scalar(inst.operands[2])
            if lo is None or hi is None:
                return "clamp with bounds that are not scalar constants"
            self.post_ops.append(dnnl.PostOp("eltwise", dnnl.ELTWISE_CLIP, lo, hi))
            return None
        if len(inst.operands) != 2 or op not in ("add", "subtract", "multiply", "maximum", "minimum"):
            return f"{op} has no oneDNN post-op here"
        other = inst.operands[1] if inst.operands[0] is x else inst.operands[0]
        if other is x:
            return f"{op} of the convolution with itself"
        if op == "subtract" and inst.operands[0] is not x:
            return "subtract from the convolution's operand side"
        c = _scalar(other)
        if c is not None:  # eltwise: exact (x + c, c * x, bounds), as XLA computes them
            eltwise = {"add": (dnnl.ELTWISE_LINEAR, 1.0, c), "subtract": (dnnl.ELTWISE_LINEAR, 1.0, -c),
                       "multiply": (dnnl.ELTWISE_LINEAR, c, 0.0),
                       "maximum": (dnnl.ELTWISE_RELU, 0.0, 0.0) if c == 0 else (dnnl.ELTWISE_CLIP, c, F32_MAX),
                       "minimum": (dnnl.ELTWISE_CLIP, -F32_MAX, c)}[op]
            self.post_ops.append(dnnl.PostOp("eltwise", *eltwise))
            return None
        vec = self._feature_vector(other)
        if op == "add" and not self.post_ops and self.bias is None and vec is not None and vec[0] in ("param", "expr"):
            self.bias = vec[1]  # oneDNN's own bias, added to the accumulator before the post-ops
            return None
        alg = {"add": dnnl.BINARY_ADD, "subtract": dnnl.BINARY_SUB, "multiply": dnnl.BINARY_MUL,
               "maximum": dnnl.BINARY_MAX, "minimum": dnnl.BINARY_MIN}[op]
        return self._binary(alg, other)


def _independent(inst: HloInstruction) -> bool:
    """Whether `inst` is computed from parameters and constants alone (no convolution) by ops
    with element generators."""
    stack, seen = [inst], set()
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if i.opcode in ("parameter", "constant"):
            continue
        if i.opcode == "convolution" or i.info.elemental is None:
            return False
        stack.extend(i.operands)
    return True


def _chain(comp: HloComputation, conv: HloInstruction) -> list[HloInstruction] | str:
    """The epilogue's ops from the convolution to the root, each reading the one before it; or
    why the epilogue is not such a chain."""
    chain, x = [], conv
    while x is not comp.root:
        users = [u for u in comp.instructions if x in u.operands]
        if len(users) != 1:
            return f"{x.name} has {len(users)} users in the epilogue"
        x = users[0]
        chain.append(x)
    return chain


def why_not_onednn(comp: HloComputation) -> str | None:
    """Why the convolution fusion `comp` cannot run as a oneDNN primitive (None: it can,
    `onednn_convolution`)."""
    result = _map(comp)
    return result if isinstance(result, str) else None


def epilogue_note(comp: HloComputation) -> str | None:
    """How the epilogue of convolution fusion `comp` runs when oneDNN computes the
    convolution: None when all of it is post-ops, else from which instruction on it is our
    loop kernel, and why."""
    result = _map(comp)
    if isinstance(result, str) or result.split is None:
        return None
    return f"the epilogue from {result.tail} runs in a loop kernel after the oneDNN primitive"


def onednn_convolution(comp: HloComputation) -> OneDnnConv | None:
    """The oneDNN primitive computing `comp` (a convolution of parameters with its elementwise
    epilogue), or None when it cannot (`why_not_onednn`)."""
    result = _map(comp)
    return None if isinstance(result, str) else result


def _map(comp: HloComputation) -> OneDnnConv | str:
    conv = find_convolution(comp)
    if conv is None:
        return "not a convolution fusion"
    if any(op.shape.dtype.name != "f32" for op in conv.operands) or conv.shape.dtype.name != "f32":
        return "not f32 throughout"
    dn = dimension_numbers(conv)
    nsp = len(dn.input_spatial)
    if nsp > 3:
        return f"{nsp} spatial dimensions (oneDNN: up to 3)"
    if int(conv.attrs.get("batch_group_count", 1)) != 1:
        return "batch groups"
    window = conv.attrs.get("window")
    dims = tuple(window.dimensions) if window is not None else ()
    if len(dims) != nsp:
        return "a window of another rank"
    if any(d.base_dilation != 1 for d in dims):
        return "lhs dilation"
    if any(d.window_reversal for d in dims):
        return "window reversal"
    if any(d.padding_low < 0 or d.padding_high < 0 for d in dims):
        return "negative padding"
    xd, wd, od = (tuple(s.dims) for s in (conv.operands[0].shape, conv.operands[1].shape, conv.shape))
    if 0 in xd or 0 in wd or 0 in od:
        return "empty"
    groups = int(conv.attrs.get("feature_group_count", 1))
    src = _tensor(xd, [dn.input_batch, dn.input_feature, *dn.input_spatial])
    w = _tensor(wd, [dn.kernel_output_feature, dn.kernel_input_feature, *dn.kernel_spatial])
    if groups > 1:  # ([G,] O/G, I/G, spatial): groups split the output features, major
        o = w.dims[0] // groups
        w = dnnl.Tensor((groups, o, *w.dims[1:]), (o * w.strides[0], *w.strides))
    dst = _tensor(od, [dn.output_batch, dn.output_feature, *dn.output_spatial])
    if nsp == 0:  # a matrix product: one spatial position of size 1 (oneDNN needs one)
        src, w, dst = (dnnl.Tensor(t.dims + (1,), t.strides + (1,)) for t in (src, w, dst))
        dims = (WindowDimension(),)
    chain = _chain(comp, conv)
    epi, x, tail = _Epilogue(conv), conv, None
    if isinstance(chain, str):
        chain, tail = [], chain
    for inst in chain:
        tail = epi.add(inst, x)
        if tail is not None:
            tail = f"{inst.opcode} {inst.name}: {tail}"
            break
        x = inst
    bias = None if epi.bias is None else dnnl.Tensor((od[dn.output_feature],), (1,))
    desc = dnnl.ConvDescription(
        src, w, bias, dst, tuple(d.stride for d in dims), tuple(d.window_dilation - 1 for d in dims),
        tuple(d.padding_low for d in dims), tuple(d.padding_high for d in dims), tuple(epi.post_ops),
        weights_any=WEIGHTS_ANY)
    params = {"src": conv.operands[0].parameter_number, "weights": conv.operands[1].parameter_number,
              "bias": epi.bias, "dst": OUTPUT}
    binaries = iter(epi.sources)
    sources = []
    for _, name in desc.arguments():
        if name.startswith("post"):
            post = desc.post_ops[int(name[4:])]
            sources.append(CONSTANT if post.constant is not None else next(binaries))
        else:
            sources.append(params[name])
    return OneDnnConv(desc, tuple(sources), None if x is comp.root else x, tail)


def fast_implementation(desc: dnnl.ConvDescription) -> bool:
    """Whether oneDNN has an optimized implementation for `desc` in this process: not none, and
    not its reference one ("ref:any", a plain loop nest: jax's weight gradients as forward
    convolutions get only that, several times slower than our kernels)."""
    impl = dnnl.implementation(desc)
    return impl is not None and not impl.startswith("ref")


def conv_flops(comp: HloComputation) -> int:
    """Multiply-adds of the convolution of `comp` (for the kernel's work estimate)."""
    conv = find_convolution(comp)
    wd = conv.operands[1].shape.dims
    dn = dimension_numbers(conv)
    return math.prod(conv.shape.dims) * math.prod(wd[a] for a in dn.kernel_spatial) * wd[dn.kernel_input_feature]


def plan_onednn_conv(comp: HloComputation, name: str) -> tuple[list[KernelPlan], list] | None:
    """(kernels, temporaries' shapes) computing `comp` through oneDNN: one kernel (one work
    unit: oneDNN threads the call), followed by a loop kernel for the part of the epilogue
    that is not post-ops (`OneDnnConv.split`); None when oneDNN cannot run it (no mapping, or
    no fast implementation in this process)."""
    mapped = onednn_convolution(comp)
    if mapped is None or not fast_implementation(mapped.desc):
        return None
    n = len(comp.parameters)  # every parameter is an array (find_convolution)
    inputs = [("in", i) for i in range(n)]
    if mapped.split is None:
        return [KernelPlan(comp, [0], 1, conv_flops(comp), None, inputs=inputs, results=[("out", 0)],
                           name=f"{name}_dnnl", custom="onednn_conv")], []
    # The primitive writes the split instruction's value to a temporary; the rest of the
    # epilogue is a fusion of its own reading it (a new last parameter).
    head = rebuild(comp, mapped.split, [], f"{comp.name}.dnnl")
    tail = rebuild(comp, comp.root, [mapped.split], f"{comp.name}.epilogue")
    kernels, temps = plan_fusion(tail, f"{name}_epilogue")
    slot = len(temps)
    for k in kernels:
        k.inputs = [("tmp", slot) if kind == "in" and i == n else (kind, i) for kind, i in k.inputs]
    temps.append(mapped.split.shape)
    dnnl_kernel = KernelPlan(head, [0], 1, conv_flops(comp), None, inputs=inputs, results=[("tmp", slot)],
                             name=f"{name}_dnnl", custom="onednn_conv")
    return [dnnl_kernel] + kernels, temps


# ---- the rule ----------------------------------------------------------------------------------

# A call costs about 10-15 us beyond its arithmetic (memory objects, the scratchpad, the
# weights' reorder): below this many multiply-adds our kernels stay ahead.
MIN_ONEDNN_MACS = 1 << 22
# Dense convolutions: rows (batch x output positions) over which the per-call reorder of the
# weights is amortized (49-196 rows measured 1.2-1.7x slower than our GEMM kernel, 392 0.7-0.9x).
MIN_ONEDNN_ROWS = 256
# Dense convolutions: fewer output features than this gained nothing (16: 0.98-1.12x).
MIN_ONEDNN_FEATURES = 32
# (Dense convolutions of fewer rows with `01oi` weights, jax's input gradients, took oneDNN
# from 2^26 multiply-adds while our GEMM kernel packed those weights with a loop kernel on every
# call; it now runs one GEMM per window tap on the weights in place, 0.59-0.62x oneDNN's time
# for haiku ResNet-18's 3x3 512 -> 512 over 64 rows: docs/convolutions.md.)


def onednn_class(comp: HloComputation) -> str | None:
    """The shape class by which `prefers_onednn` decides (docs/convolutions.md): "grouped"
    (depthwise included) or "dense"; None when oneDNN does not run it: no mapping, no fast
    implementation, or one that is neither oneDNN's direct JIT kernels ("brg..", "brdgmm..", "jit..")
    nor measured (its im2col GEMM for channels-first data)."""
    mapped = onednn_convolution(comp)
    if mapped is None or not fast_implementation(mapped.desc):
        return None
    if not dnnl.implementation(mapped.desc).startswith(("brg", "brdgmm", "jit")):
        return None
    conv = find_convolution(comp)
    return "grouped" if int(conv.attrs.get("feature_group_count", 1)) > 1 else "dense"


def prefers_onednn(comp: HloComputation) -> bool:
    """The rule (docs/convolutions.md; by shape class, never timed at run time): the
    convolution fusion `comp` runs as a oneDNN primitive when f32 GEMMs are oneDNN's
    (runtime/gemm_provider.py, decided at compile time), oneDNN runs it with its direct JIT
    kernels (`onednn_class`), it has at least MIN_ONEDNN_MACS multiply-adds, and it is
      * grouped with more than one input feature per group (oneDNN 0.6-0.8x our direct
        kernel's time; depthwise convolutions keep it), or
      * dense with a window of more than one tap (1x1 convolutions keep the GEMM kernel,
        which reads their input in place: 0.9-1.4x), at least 8 input features (the
        stems keep the direct kernel: 1.05-1.16x), MIN_ONEDNN_FEATURES output features and
        MIN_ONEDNN_ROWS rows (0.7-0.9x).
    Everything else keeps our kernels (cpu_conv_gemm.plan_convolution)."""
    from ...runtime.gemm_provider import gemm_provider

    if gemm_provider("f32") != "onednn":
        return False
    cls = onednn_class(comp)
    if cls is None:
        return False
    geo = conv_geometry(find_convolution(comp))
    taps = math.prod(d.size for d in geo.window)
    if conv_flops(comp) < MIN_ONEDNN_MACS:
        return False
    if cls == "grouped":
        # Depthwise (one input feature per group) stays on our direct kernel: alone, oneDNN's
        # brdgmm_dw took 0.4-0.9x its time, but inside keras MobileNetV2 on two threads of
        # this shared machine its four largest depthwise steps took 1.3-7.7x (and the model
        # 1.10-1.11x) in every run.
        return geo.group_inputs > 1
    rows = geo.batch * math.prod(geo.out_spatial)
    if taps == 1 or geo.group_inputs < 8 or geo.features < MIN_ONEDNN_FEATURES:
        return False
    return rows >= MIN_ONEDNN_ROWS
