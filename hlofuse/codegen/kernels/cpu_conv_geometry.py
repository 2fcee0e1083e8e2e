"""The geometry of a convolution as the direct kernel (cpu_conv.py) loops over it: sizes and
element strides of each operand (`ConvGeometry`, `conv_geometry`), the type it accumulates in,
and which fused computations a convolution kernel computes (`find_convolution`: a convolution
of parameters, alone or with an elementwise epilogue). The GEMM and oneDNN convolution paths
(cpu_conv_gemm.py, cpu_conv_onednn.py) read the same geometry; `window_tap` emits a window
tap's input index and whether it lies on the input, for the direct and GEMM kernels.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from ...emitters.elemental import supported_type
from ...emitters.ir_helpers import const_i64, row_major_strides
from ...hlo.attributes import ConvDimensionNumbers, Window, WindowDimension
from ...hlo.dtypes import ElementType, element_type
from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.walk import first_non_elementwise_use

# Largest output feature count a kernel keeps accumulators for (a stack array of this many
# f64 is 512 KiB, far inside a thread's stack).
MAX_FEATURES = 1 << 16


@dataclass(frozen=True)
class ConvGeometry:
    """A convolution as loops: sizes, and element strides of the operands and the result."""

    batch: int  # output batch
    features: int  # output features O
    groups: int  # feature_group_count * batch_group_count
    group_features: int  # output features per group (og)
    group_inputs: int  # input features per group (ci, the kernel's input feature size)
    out_spatial: tuple[int, ...]
    window: tuple[WindowDimension, ...]
    dilated_input: tuple[int, ...]  # input spatial sizes after lhs dilation (before padding)
    x_batch: int
    x_feature: int
    x_spatial: tuple[int, ...]
    x_group: int  # offset between the input slices of consecutive groups
    w_out: int
    w_in: int
    w_spatial: tuple[int, ...]
    o_batch: int
    o_feature: int
    o_spatial: tuple[int, ...]
    o_dims: tuple[int, ...]  # the result's dimensions, and where batch, feature, spatial sit in them
    o_axes: tuple[int, ...]
    lhs_type: ElementType
    rhs_type: ElementType
    out_type: ElementType
    acc_type: ElementType

    @property
    def channels_innermost(self) -> bool:
        """The loop order rule (module docstring): groups innermost when there are more
        groups than output features per group."""
        return self.groups > self.group_features

    @property
    def units(self) -> int:
        """Work units: output batch x first output spatial dimension."""
        return self.batch * (self.out_spatial[0] if self.out_spatial else 1)

    @property
    def unit_work(self) -> int:
        """Multiply-adds per work unit (for the launcher's thread split)."""
        rest = math.prod(self.out_spatial[1:]) if self.out_spatial else 1
        taps = math.prod(d.size for d in self.window)
        return max(1, rest * self.features * self.group_inputs * taps)


def dimension_numbers(inst: HloInstruction) -> ConvDimensionNumbers:
    """The convolution's dim_labels as ConvDimensionNumbers (the parser may keep text)."""
    return ConvDimensionNumbers.of(inst.attrs.get("dim_labels"))


def accumulation_type(lhs: ElementType, rhs: ElementType, out: ElementType) -> ElementType | None:
    """The element type a convolution with these types accumulates in (module docstring), or
    None when the kernel does not handle it."""
    if any(not supported_type(t) or t.is_complex or t.is_pred for t in (lhs, rhs, out)):
        return None
    if out.is_float:
        wide = any(t.name == "f64" for t in (lhs, rhs, out))
        return element_type("f64" if wide else "f32")
    if lhs.is_float or rhs.is_float:
        return None  # float operands, integer result: left to the library rule
    return element_type(("s" if out.is_signed else "u") + str(max(out.bits, 8)))


def conv_geometry(inst: HloInstruction) -> ConvGeometry | None:
    """The loops of convolution `inst`, or None when the kernel does not handle it."""
    lhs, rhs = (op.shape for op in inst.operands)
    out = inst.shape
    if not (lhs.is_array and rhs.is_array and out.is_array):
        return None
    acc = accumulation_type(lhs.dtype, rhs.dtype, out.dtype)
    if acc is None:
        return None
    dn = dimension_numbers(inst)
    nsp = len(dn.input_spatial)
    window = inst.attrs.get("window") or Window(tuple(WindowDimension() for _ in range(nsp)))
    dims = tuple(window.dimensions)
    fgc = int(inst.attrs.get("feature_group_count", 1))
    bgc = int(inst.attrs.get("batch_group_count", 1))
    if len(dims) != nsp or (fgc > 1 and bgc > 1):
        return None
    ld, rd, od = tuple(lhs.dims), tuple(rhs.dims), tuple(out.dims)
    sl, sw, so = row_major_strides(ld), row_major_strides(rd), row_major_strides(od)
    features = od[dn.output_feature]
    groups = fgc * bgc
    if features > MAX_FEATURES or groups <= 0 or features % groups:
        return None
    batch = od[dn.output_batch]
    ci = rd[dn.kernel_input_feature]
    x_group = batch * sl[dn.input_batch] if bgc > 1 else ci * sl[dn.input_feature]
    dilated = tuple((ld[a] - 1) * d.base_dilation + 1 if ld[a] > 0 else 0 for a, d in zip(dn.input_spatial, dims))
    return ConvGeometry(
        batch=batch, features=features, groups=groups, group_features=features // groups, group_inputs=ci,
        out_spatial=tuple(od[a] for a in dn.output_spatial), window=dims, dilated_input=dilated,
        x_batch=sl[dn.input_batch], x_feature=sl[dn.input_feature], x_spatial=tuple(sl[a] for a in dn.input_spatial),
        x_group=x_group, w_out=sw[dn.kernel_output_feature], w_in=sw[dn.kernel_input_feature],
        w_spatial=tuple(sw[a] for a in dn.kernel_spatial), o_batch=so[dn.output_batch],
        o_feature=so[dn.output_feature], o_spatial=tuple(so[a] for a in dn.output_spatial),
        o_dims=od, o_axes=(dn.output_batch, dn.output_feature, *dn.output_spatial),
        lhs_type=lhs.dtype, rhs_type=rhs.dtype, out_type=out.dtype, acc_type=acc)


def _epilogue_ok(comp: HloComputation, conv: HloInstruction) -> bool:
    """Whether every path from `conv` to the root of `comp` is elementwise ops of the
    convolution's dimensions (so the epilogue reads each result element once, at its own
    index), the root is one array of those dimensions, and the rest has element generators."""
    dims = tuple(conv.shape.dims)
    if not comp.root.shape.is_array or tuple(comp.root.shape.dims) != dims:
        return False
    for inst in comp.instructions:
        if inst is conv or inst.opcode == "parameter":
            continue
        if not inst.info.fits_an_epilogue or inst.info.elemental is None:
            return False
    return first_non_elementwise_use(conv, dims) is None


def find_convolution(comp: HloComputation) -> HloInstruction | None:
    """The convolution a conv kernel computes for `comp`, or None: the computation holds one
    convolution of two parameters that the kernel handles, and it is the root or the rest is
    its elementwise epilogue (bias add, activation, residual add, convert: kOutput fusions);
    every parameter is an array."""
    convs = [i for i in comp.instructions if i.opcode == "convolution"]
    if len(convs) != 1 or any(not p.shape.is_array for p in comp.parameters):
        return None
    conv = convs[0]
    if any(op.opcode != "parameter" for op in conv.operands) or conv_geometry(conv) is None:
        return None
    return conv if comp.root is conv or _epilogue_ok(comp, conv) else None


def always_inside(d: WindowDimension, positions: int, limit: int) -> bool:
    """Whether every tap of window dimension `d` at each of `positions` output positions lies
    on one of `limit` input elements (no padding reached, no lhs dilation)."""
    last = (positions - 1) * d.stride + (d.size - 1) * d.window_dilation - d.padding_low
    return d.base_dilation == 1 and d.padding_low <= 0 and last < limit and positions > 0


def window_tap(b: ir.IRBuilder, p: ir.Value, k: ir.Value, d: WindowDimension, limit: int,
               positions: int | None = None) -> tuple[ir.Value, ir.Value]:
    """(input index, in-bounds flag) of window offset `k` at output position `p` (i64 values)
    along window dimension `d` over `limit` lhs-dilated input elements: off the padding and,
    with lhs dilation, on an input element rather than a hole between two. Given the output
    `positions` along `d`, a flag that `always_inside` shows true is the constant true."""
    q = p if d.stride == 1 else b.mul(p, const_i64(d.stride))
    q = b.add(q, k if d.window_dilation == 1 else b.mul(k, const_i64(d.window_dilation)))
    if d.padding_low:
        q = b.add(q, const_i64(-d.padding_low))
    if positions is not None and always_inside(d, positions, limit):
        return q, ir.Constant(ir.IntType(1), 1)
    ok = b.and_(b.icmp_signed(">=", q, const_i64(0)), b.icmp_signed("<", q, const_i64(limit)))
    if d.base_dilation != 1:
        ok = b.and_(ok, b.icmp_signed("==", b.srem(q, const_i64(d.base_dilation)), const_i64(0)))
        q = b.sdiv(q, const_i64(d.base_dilation))
    return q, ok
