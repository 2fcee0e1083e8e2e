"""Shape rules of control flow, calls, fusions, tokens, random numbers, i/o, collectives and
async ops. Where XLA cannot infer the result from the operands (custom-call, collectives,
async pairs, i/o), the declared shape is trusted after the checks that can be made."""
from __future__ import annotations

from .dtypes import PRED, S32
from .ir import HloInstruction
from .opcodes import register_shape_rule
from .shape_inference_common import (
    array_operand, array_operands, attr, check_predicate_computation, check_signature, computation, fail,
    is_scalar_of, make_array, root_shape, shapes_compatible, text, tuple_or_single,
)
from .shapes import ArrayShape, Shape, TupleShape, TOKEN_SHAPE

FUSION_KINDS = ("kLoop", "kInput", "kOutput", "kCustom")


def _operand_shapes(inst: HloInstruction) -> list[Shape]:
    return [op.shape for op in inst.operands]


@register_shape_rule("while")
def _while(inst: HloInstruction) -> Shape:
    """while(init), condition: S -> pred[], body: S -> S; the result is S."""
    if len(inst.operands) != 1:
        fail(inst, f"while takes one operand, has {len(inst.operands)}")
    s = inst.operands[0].shape
    check_predicate_computation(inst, computation(inst, "condition"), [s], "condition")
    check_signature(inst, computation(inst, "body"), [s], s, "body")
    return s


@register_shape_rule("conditional")
def _conditional(inst: HloInstruction) -> Shape:
    """conditional(index, args...): branch k takes argument k; all branches return one shape."""
    branches = inst.attrs.get("branch_computations")
    if branches is not None:
        branches = list(branches)
        index_type = S32
    else:
        branches = [computation(inst, "true_computation"), computation(inst, "false_computation")]
        index_type = PRED
    if not branches:
        fail(inst, "conditional needs at least one branch")
    if len(inst.operands) != len(branches) + 1:
        fail(inst, f"expects a branch index and {len(branches)} branch operands, has {len(inst.operands)} operands")
    idx = inst.operands[0].shape
    if not is_scalar_of(idx, index_type):
        fail(inst, f"branch index must be {index_type.name}[], is {idx}")
    result = root_shape(inst, branches[0])
    for k, (comp, arg) in enumerate(zip(branches, inst.operands[1:])):
        check_signature(inst, comp, [arg.shape], result, f"branch {k}")
    return result


@register_shape_rule("call")
def _call(inst: HloInstruction) -> Shape:
    """call(args), to_apply: the computation takes the operands; the result is its root."""
    comp = computation(inst, "to_apply")
    check_signature(inst, comp, _operand_shapes(inst), None, "called")
    return root_shape(inst, comp)


@register_shape_rule("scan")
def _scan(inst: HloInstruction) -> Shape:
    """scan(inputs..., inits...), dimensions={d}, num_carries=C, to_apply: the last C operands
    are the carries' initial values, the others arrays of one length N along d; to_apply takes
    each input's slice at one index of d (the input without d), then the carries, and returns
    (outputs..., carries...); the result is (each output stacked along d, N long..., the final
    carries...)."""
    carries = attr(inst, "num_carries")
    dims = attr(inst, "dimensions")
    if len(dims) != 1:
        fail(inst, f"scan takes one scan dimension, has dimensions={{{','.join(map(str, dims))}}}")
    d = dims[0]
    if not 0 <= carries <= len(inst.operands):
        fail(inst, f"num_carries={carries} is not between 0 and its {len(inst.operands)} operands")
    inputs, inits = inst.operands[:len(inst.operands) - carries], inst.operands[len(inst.operands) - carries:]
    if not inputs:
        fail(inst, "scan needs at least one input to scan over")
    slices, length = [], None
    for k, op in enumerate(inputs):
        x = array_operand(inst, k)
        if not 0 <= d < x.rank:
            fail(inst, f"scan dimension {d} is out of range for input {k} {text(x)}")
        if length is None:
            length = x.dims[d]
        elif x.dims[d] != length:
            fail(inst, f"input {k} {text(x)} has {x.dims[d]} elements along dimension {d}, input 0 has {length}")
        slices.append(make_array(x.dtype, x.dims[:d] + x.dims[d + 1:]))
    comp = computation(inst, "to_apply")
    check_signature(inst, comp, slices + [op.shape for op in inits], None, "scan")
    root = root_shape(inst, comp)
    if not isinstance(root, TupleShape):
        fail(inst, f"scan computation {comp.name} must return a tuple (outputs..., carries...), returns {text(root)}")
    parts = list(root.elements)
    if len(parts) < carries:
        fail(inst, f"scan computation {comp.name} must return its outputs then {carries} carries, returns {text(root)}")
    outputs, new_carries = parts[:len(parts) - carries], parts[len(parts) - carries:]
    for k, (got, init) in enumerate(zip(new_carries, inits)):
        if not shapes_compatible(got, init.shape):
            fail(inst, f"carry {k}: scan computation {comp.name} returns {text(got)} where its initial value is "
                       f"{text(init.shape)}")
    stacked = []
    for k, out in enumerate(outputs):
        if not isinstance(out, ArrayShape) or not 0 <= d <= out.rank:
            fail(inst, f"output {k} of scan computation {comp.name} ({text(out)}) cannot be stacked along dimension {d}")
        stacked.append(make_array(out.dtype, out.dims[:d] + (length,) + out.dims[d:]))
    return TupleShape(tuple(stacked + new_carries))


@register_shape_rule("fusion")
def _fusion(inst: HloInstruction) -> Shape:
    """fusion(args), kind, calls: the fused computation's parameters match the operands;
    the result is its root."""
    kind = attr(inst, "kind")
    if kind not in FUSION_KINDS:
        fail(inst, f"fusion kind must be one of {', '.join(FUSION_KINDS)}, got {kind!r}")
    comp = computation(inst, "calls")
    if comp.fusion_instruction is not inst:
        owner = comp.fusion_instruction.name if comp.fusion_instruction is not None else "nothing"
        fail(inst, f"fused computation {comp.name} must point back at this fusion "
                   f"(its fusion_instruction is {owner})")
    check_signature(inst, comp, _operand_shapes(inst), None, "fused")
    return root_shape(inst, comp)


@register_shape_rule("custom-call")
def _custom_call(inst: HloInstruction) -> Shape:
    """custom-call: the declared shape (the target defines it); a target name is required."""
    target = inst.attrs.get("custom_call_target")
    if not target:
        fail(inst, "custom-call needs a custom_call_target")
    return inst.shape


@register_shape_rule("opt-barrier", "domain")
def _identity(inst: HloInstruction) -> Shape:
    """opt-barrier / domain: the operand's shape."""
    return inst.operands[0].shape if inst.operands else fail(inst, "expects one operand")


@register_shape_rule("add-dependency")
def _add_dependency(inst: HloInstruction) -> Shape:
    """add-dependency(x, token): x's shape."""
    if len(inst.operands) != 2 or not inst.operands[1].shape.is_token:
        fail(inst, "add-dependency takes a value and a token")
    return inst.operands[0].shape


@register_shape_rule("after-all")
def _after_all(inst: HloInstruction) -> Shape:
    """after-all(tokens...): a token."""
    for k, op in enumerate(inst.operands):
        if not op.shape.is_token:
            fail(inst, f"operand {k} ({op.name}) must be a token, is {op.shape}")
    return TOKEN_SHAPE


@register_shape_rule("rng")
def _rng(inst: HloInstruction) -> Shape:
    """rng(a, b), distribution: scalar bounds of the result's element type."""
    a, b = array_operands(inst, range(2))
    out = inst.shape
    if not isinstance(out, ArrayShape):
        fail(inst, f"rng result must be an array, declared {out}")
    dist = str(attr(inst, "distribution"))
    if dist not in ("rng_uniform", "rng_normal"):
        fail(inst, f"distribution must be rng_uniform or rng_normal, got {dist!r}")
    if a.rank or b.rank or a.dtype != out.dtype or b.dtype != out.dtype:
        fail(inst, f"bounds must be {out.dtype.name} scalars, are {text(a)} and {text(b)}")
    if dist == "rng_normal" and not out.dtype.is_float:
        fail(inst, f"rng_normal needs a floating-point type, has {out.dtype.name}")
    return make_array(out.dtype, out.dims)


# State lengths (u64 words) XLA:CPU compiles for each algorithm: three_fry reads a 128-bit key
# and counter, Philox (also rng_default's algorithm on CPU) a 128-bit counter and 64-bit key,
# or just the 128 bits. XLA's parser takes any state, but its RngBitGeneratorExpander refuses
# every other length and every element type other than u64 (s64 too: its arithmetic mixes the
# state with u64 constants), so a module with one would run on no XLA backend.
_RNG_STATE_WORDS = {"rng_three_fry": (2,), "rng_philox": (2, 3), "rng_default": (2, 3)}


@register_shape_rule("rng-bit-generator")
def _rng_bit_generator(inst: HloInstruction) -> Shape:
    """rng-bit-generator(state), algorithm: (new state of the state's shape, declared random
    bits). The state must be u64[2] (three_fry) or u64[2] / u64[3] (philox, rng_default), and
    the bits an integer type of at least 2 bits or a float type: what XLA compiles."""
    state = array_operand(inst, 0)
    out = inst.shape
    if not isinstance(out, TupleShape) or len(out.elements) != 2 or not isinstance(out.elements[1], ArrayShape):
        fail(inst, f"result must be (state, bits), declared {out}")
    algorithm = str(attr(inst, "algorithm"))  # XLA requires it (its parser refuses a module without)
    words = _RNG_STATE_WORDS.get(algorithm)
    if words is None:
        fail(inst, f"algorithm must be one of {', '.join(_RNG_STATE_WORDS)}, got {algorithm!r}")
    if state.dtype.name != "u64" or state.rank != 1 or state.dims[0] not in words:
        allowed = " or ".join(f"u64[{n}]" for n in words)
        fail(inst, f"{algorithm} takes a {allowed} state, as XLA does; the state is {text(state)}")
    bits = out.elements[1]
    # StableHLO's rng_bit_generator (XLA's route to its CPU compiler) types the bits as 2- to
    # 64-bit integers or floats: pred, s1/u1 and complex are refused.
    if not ((bits.dtype.is_integer and bits.dtype.bits >= 2) or bits.dtype.is_float):
        fail(inst, f"random bits must be an integer type of at least 2 bits or a float type, "
                   f"are {bits.dtype.name}")
    return TupleShape((make_array(state.dtype, state.dims), make_array(bits.dtype, bits.dims)))


@register_shape_rule("all-reduce")
def _all_reduce(inst: HloInstruction) -> Shape:
    """all-reduce: the operands' shapes (a tuple for several operands)."""
    return tuple_or_single(_operand_shapes(inst)) if inst.operands else fail(inst, "expects operands")


def _declared(inst: HloInstruction) -> Shape:
    """The declared shape: XLA cannot infer it from the operands for these ops."""
    return inst.shape


# The ops whose result shape is the one written in the HLO text (the i/o ops, the collectives
# without a rule of their own above, the async starts): XLA cannot infer it from the operands.
DECLARED_SHAPE_OPCODES = (
    "infeed", "outfeed", "send", "send-done", "recv", "recv-done",
    "all-reduce-start", "all-gather", "all-gather-start",
    "all-to-all", "ragged-all-to-all", "reduce-scatter", "collective-broadcast",
    "collective-permute", "collective-permute-start",
    "async-start", "async-update", "copy-start", "rng-get-and-update-state")
register_shape_rule(*DECLARED_SHAPE_OPCODES)(_declared)


@register_shape_rule("all-reduce-done")
def _all_reduce_done(inst: HloInstruction) -> Shape:
    """all-reduce-done: the shape of its all-reduce-start operand (XLA's verifier)."""
    if len(inst.operands) != 1:
        fail(inst, "expects one operand (an all-reduce-start)")
    return inst.operands[0].shape


def _done_element(index: int, start: str):
    def rule(inst: HloInstruction) -> Shape:
        if len(inst.operands) != 1:
            fail(inst, f"expects one operand, its {start}")
        operand = inst.operands[0].shape
        if not isinstance(operand, TupleShape) or len(operand.elements) <= index:
            fail(inst, f"expects the tuple its {start} returns, got {text(operand)}")
        return operand.elements[index]

    rule.__doc__ = f"The element {index} of the tuple its {start} operand returns (XLA's verifier)."
    return rule


# The -done half of an asynchronous pair returns one element of the start's tuple: all-gather's
# and collective-permute's (operands, results, ...) and async-start's ((operands), result, context)
# give element 1, copy-start's (destination, source, context) element 0.
register_shape_rule("all-gather-done")(_done_element(1, "all-gather-start"))
register_shape_rule("collective-permute-done")(_done_element(1, "collective-permute-start"))
register_shape_rule("async-done")(_done_element(1, "async-start"))
register_shape_rule("copy-done")(_done_element(0, "copy-start"))
