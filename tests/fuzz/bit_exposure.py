"""Mismatches that a bitcast-convert makes out of rounding differences.

A `bitcast-convert` of a float array shows its bits: an exponential that is 1 ULP away from
the interpreter's (numpy's exp against XLA's and hlofuse's polynomial, each within the ULP
bounds of tests/emitters/test_cpu_math.py) is then a different integer, and whatever integer
arithmetic follows differs by any amount (the HLO mutation fuzzer, seed 39: `bitcast-convert`
of exp(x) to u8[16,4], then adds and multiplies; the CPU equal to XLA:CPU bit for bit, the
interpreter one ULP off in the last byte). Such a mismatch says nothing about the ops after the
bitcast, so the fuzzer checks what it can say something about: the floats the bitcasts read,
computed by the same backend and by the interpreter, compared with the float tolerance; and
the ops after them: the interpreter rerun from the backend's own floats at those points (each
source instruction cut out and fed as a parameter) must give the backend's outputs. Where
both hold and every mismatching output depends on such a bitcast, the case is counted apart
(outcomes.BITS_EXPOSED), as denormal-only and order-sensitive cases are; where the floats
themselves differ, it stays a mismatch.

A `compare` of floats with `type=TOTALORDER` exposes bits too: it orders a -NaN below every
number and a +NaN above, so it reads a NaN's sign, which no backend fixes: which NaN an
operation on two NaNs returns is not XLA's contract (XLA:CPU's own `x + y` of +NaN and -NaN
gives the first operand's NaN, and the second's where the first is a constant LLVM moved to
the right; the large-graph fuzzer, seed 68), and the real GPU's NaNs are libdevice's and PTX's
(a `sin(inf)`, a `log1p(-2)`: seed 65 on an H200), not the host libm's that the CPU kernels
reproduce. The floats such a compare reads are checked as a bitcast's are: NaN where the
interpreter has NaN, any sign. The NaN bits the kernels do fix (max, min, clamp, libm's
functions) have tests of their own (tests/emitters/test_nan_bits.py).

On the real GPU a `convert` of floats to integers shows rounding as well: its functions are
libdevice's, not the host libm's that the CPU kernels and the interpreter share, so a `power`
of 1.2e9 one ULP (128) away from the interpreter's converts to an integer 128 away (the
large-graph fuzzer, seed 72 on an H200). Only there: on the CPU targets the floats are the
interpreter's own and such a convert stays a test of the convert.

A `remainder` of floats is discontinuous wherever its divisor divides the dividend, which the
coarse f16 grid hits often: fmod(6.426, 0.459) is 0 and fmod(6.426, 0.4592) is 0.4558 (a
logistic one f16 ULP apart, at an f32 result next to an f16 tie; the large-graph fuzzer, seed
73). So is a `power` in its exponent: pow(-0, 136003) is -0 and pow(-0, 136002.98) +0, whose
reciprocals are -inf and +inf (a row sum one ULP apart in the emulated GPU's reduction order;
seed 74). Their operands are checked as a bitcast's, on every backend; a wrong remainder or
power still fails the rerun from the backend's own operands. Where an operand is a sum that
cancels, its elements may differ as far as other summation orders move the interpreter's
(reassociation.py): such elements of the operands are excused too, and the rerun still
decides.

A `sine`, `cosine` or `tan` of a large argument shows its operand's rounding in the same way:
cos(2.6713738e22) is 0.948 and cos of its float neighbour (one ULP is 2.3e15 radians) anything
in [-1, 1] (the graph fuzzer, seed 80 on an H200: the GPU's rsqrt of a denormal atan2 one ULP
from the interpreter's, then its cosine 0.755 against 0.948). Their operands are checked as a
bitcast's on every backend, and the rerun from the backend's own operands still tests the
function itself (libdevice's and the CPU kernels' argument reductions are exact at any
magnitude).
"""
from __future__ import annotations

from typing import Any

from .values import is_float_dtype


# Functions whose result their operands' rounding can move by any amount (module doc).
ILL_CONDITIONED = ("remainder", "power", "sine", "cosine", "tan")


def float_bitcasts(module, backend: str = "cpu") -> list:
    """The entry's instructions that show a float's bits: `bitcast-convert`s of a float (or
    complex) array, TOTALORDER compares of floats and the ILL_CONDITIONED functions of floats
    (on every backend), and on the real GPU (`backend` "gpu") converts of floats to integers.
    An ILL_CONDITIONED function whose operands already depend on one of these is left out: the
    rerun from the first one's cut recomputes it, so it is still tested (a cosine of a
    remainder: the remainder's operands are cut, the cosine is the interpreter's own)."""
    return _exposing(module, backend)[0]


def _exposing(module, backend: str) -> tuple[list, set[int]]:
    """(`float_bitcasts`, the ids of the entry's instructions that are one of them or depend on
    one): one walk of the entry in post order."""
    from hlofuse.hlo.walk import instruction_post_order

    real_gpu = backend.split(" ")[0] == "gpu"

    def reads_floats(i) -> bool:
        return bool(i.operands) and i.operands[0].shape.is_array and i.operands[0].shape.dtype.kind in ("float", "complex")

    def shows_bits(i) -> bool:
        if i.opcode in ("bitcast-convert",) + ILL_CONDITIONED:
            return True
        if real_gpu and i.opcode == "convert" and i.shape.is_array and i.shape.dtype.kind in ("sint", "uint"):
            return True
        return i.opcode == "compare" and str(i.attrs.get("type", "")) == "TOTALORDER"

    casts, after = [], set()
    for i in instruction_post_order(module.entry):
        after_a_cast = any(id(o) in after for o in i.operands)
        if shows_bits(i) and reads_floats(i) and not (after_a_cast and i.opcode in ILL_CONDITIONED):
            casts.append(i)
            after.add(id(i))
        elif after_a_cast:
            after.add(id(i))
    return casts, after


def _output_producers(module) -> list:
    """For each flattened output of the entry, the instruction that computes it (through tuple
    instructions; a tuple-shaped instruction of another kind stands for all its leaves)."""
    out: list = []
    stack = [module.entry.root]
    while stack:
        inst = stack.pop()
        if inst.opcode == "tuple":
            stack.extend(reversed(inst.operands))
        else:
            out.extend([inst] * max(1, len(inst.shape.leaves())))
    return out


def exposed_outputs(module, backend: str = "cpu") -> set[int]:
    """Indices of the entry's flattened outputs that depend on a float bitcast-convert (or what
    `float_bitcasts` counts as one on `backend`)."""
    from hlofuse.hlo.walk import post_order

    casts = set(float_bitcasts(module, backend))
    if not casts:
        return set()
    return {k for k, inst in enumerate(_output_producers(module))
            if not casts.isdisjoint(post_order([inst], lambda i: i.operands))}


def _sources(casts: list) -> list:
    """The distinct float instructions `casts` read, in order (a compare's and a remainder's
    both operands, a convert's one)."""
    seen: dict[int, Any] = {}
    for c in casts:
        for o in (c.operands if c.opcode in ("compare", "remainder", "power") else c.operands[:1]):
            seen.setdefault(id(o), o)
    return list(seen.values())


def _moved(module, backend: str) -> list[bool]:
    """For each of the sources (`_sources` order): whether it is, or depends in the entry on,
    the result of a cast `float_bitcasts` counts (a TOTALORDER compare of a remainder's result): its
    value moves with the operands' rounding of that earlier cast, so it is held to the values
    the interpreter computes from the backend's own floats at the other sources
    (`_moved_reference`), not to the interpreter's plain run."""
    casts, after = _exposing(module, backend)
    return [id(s) in after for s in _sources(casts)]


def _moved_reference(module, backend: str, args: list, first: list, denormals: str) -> list:
    """The values of the moved sources (`_moved`) that the interpreter computes from `first`,
    the backend's values of the other sources, each cut out as a parameter."""
    from hlofuse.runtime.interpreter import evaluate

    copy = module.clone()
    casts, after = _exposing(copy, backend)
    sources = _sources(casts)
    _cut(copy, [s for s in sources if id(s) not in after])
    _return(copy, [s for s in sources if id(s) in after])
    return list(evaluate(copy, list(args) + list(first), denormals=denormals))


def _cut(copy, sources: list) -> None:
    """Make each of `sources` (instructions of `copy`'s entry) a new entry parameter, in order."""
    for source in sources:
        source.replace_all_uses_with(copy.entry.add_parameter(source.shape, name=f"cut_{source.name}"))


def _return(copy, values: list) -> None:
    """Make `copy`'s entry return `values` (instructions of it) as a tuple."""
    from hlofuse.hlo.instruction import HloInstruction
    from hlofuse.hlo.shapes import TupleShape

    root = HloInstruction("tuple", TupleShape(tuple(v.shape for v in values)), values, name="bitcast_sources")
    copy.entry.add_instruction(root)
    copy.entry.root = root


def sources_module(module, backend: str = "cpu", with_outputs: bool = False):
    """A copy of `module` whose entry returns the floats its bitcast-converts (and what else
    `float_bitcasts` counts) read (a tuple, in entry order; after the entry's own outputs,
    flattened, with `with_outputs`); None when it has none."""
    copy = module.clone()
    casts = float_bitcasts(copy, backend)
    if not casts:
        return None
    sources = _sources(casts)
    if with_outputs:
        old_root = copy.entry.root
        sources = (list(old_root.operands) if old_root.opcode == "tuple" else [old_root]) + sources
    _return(copy, sources)
    return copy


def cut_module(module, backend: str = "cpu"):
    """A copy of `module` in which each float instruction `float_bitcasts` reads is a new entry
    parameter (after the entry's own, in `_sources`' order): the rest of the program run from
    given values at those points."""
    copy = module.clone()
    _cut(copy, _sources(float_bitcasts(copy, backend)))
    return copy


def _nan_signs(floats: list) -> list[list]:
    """`floats` as given, then with every NaN made positive, then negative."""
    import numpy as np

    def signed(negative: bool) -> list:
        out = []
        for f in floats:
            f = np.asarray(f)
            if is_float_dtype(f.dtype) and f.dtype.kind != "c":
                wide = f.astype(np.float64)
                nan = np.isnan(wide)
                f = np.where(nan, np.copysign(np.nan, -1.0 if negative else 1.0), wide).astype(f.dtype) \
                    if nan.any() else f
            out.append(f)
        return out

    return [list(floats), signed(False), signed(True)]


def only_bits_exposed(module, args: list, backend: str, mismatching: list[int], denormals: str,
                      actual: list | None = None) -> bool:
    """Whether every output in `mismatching` depends on a float bitcast-convert, the floats
    those bitcasts read agree between `backend` and the interpreter (run with `denormals`)
    within the float tolerance, and the interpreter run onward from the backend's floats gives
    the backend's outputs (`actual`, the ones being judged; by default the backend's run of the
    module that also returns the floats)."""
    import hlofuse
    from hlofuse.runtime.compare import compare_outputs
    from hlofuse.runtime.interpreter import evaluate

    if not mismatching or not set(mismatching) <= exposed_outputs(module, backend):
        return False
    variant = sources_module(module, backend, with_outputs=True)
    n_out = len(_output_producers(module))
    # `backend` is the fuzzer's label: a target, "(no fusion)" after it for the unfused pipeline
    target, fusion = backend.split(" ")[0], "(no fusion)" not in backend
    judged = None if actual is None else list(actual)
    try:
        got = list(hlofuse.compile(variant, target=target, fusion=fusion)(*args))
        want = evaluate(variant, list(args), denormals=denormals)
        judged = got[:n_out] if judged is None else judged
        # the outputs the interpreter computes from the backend's own floats at those points;
        # the program that returns them is not the one judged (its fusion differs), and the
        # sign of a NaN is no backend's contract, so those NaNs may be of either sign, and of
        # another sign for each output: fusion repeats a producer in each consumer's kernel,
        # and two kernels may make different NaNs of one instruction (the graph fuzzer, seed
        # 84: a TOTALORDER compare of clamp(cos(inf), ...) read one sign in the kernel of one
        # output and the other in the kernel of the other)
        cut = cut_module(module, backend)
        verdicts = [compare_outputs(judged, list(evaluate(cut, list(args) + floats, denormals=denormals)))
                    for floats in _nan_signs(got[n_out:])]
        if not all(any(v[k].ok for v in verdicts) for k in range(len(judged))):
            return False
    except Exception:  # noqa: BLE001 - no comparison of the floats: the mismatch stands
        return False
    sources, wanted = got[n_out:], list(want)[n_out:]
    moved = _moved(module, backend)
    if any(moved):
        first = [v for v, m in zip(sources, moved) if not m]
        try:
            # NaNs at the cut of either sign, as for the outputs above
            candidates = [_moved_reference(module, backend, args, floats, denormals) for floats in _nan_signs(first)]
        except Exception:  # noqa: BLE001 - no reference for the moved floats: the mismatch stands
            return False
        got_moved = [v for v, m in zip(sources, moved) if m]
        if not all(any(compare_outputs([g], [c[k]])[0].ok for c in candidates) for k, g in enumerate(got_moved)):
            return False
        sources = first
        wanted = [w for w, m in zip(wanted, moved) if not m]
    if all(r.ok for r in compare_outputs(sources, wanted)):
        return True
    from .reassociation import only_order_sensitive, other_order_references

    try:
        others = [[v for v, m in zip(outputs[n_out:], moved) if not m]
                  for outputs in other_order_references(variant, list(args), denormals)]
    except Exception:  # noqa: BLE001 - no other order: the floats' difference stands
        return False
    return only_order_sensitive(sources, wanted, *others)
