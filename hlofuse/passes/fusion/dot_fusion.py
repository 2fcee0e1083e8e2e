"""CPU output (epilogue) fusion of dots: a dot fused into its elementwise consumers (kOutput).

XLA:CPU fuses `add(dot, x)` into a matrix-vector dot as an output fusion and a cheap producer
into a matrix-vector dot's small operand (cpu_instruction_fusion.cc); hlofuse goes further: any
float dot fuses into a chain of elementwise consumers of its own dimensions (bias add,
activation, residual add, scale, convert), and the CPU runs the fusion as one kernel that calls
BLAS on a block (a row panel, or a row and column panel of a short matrix) and then runs the
epilogue on that block while it is in cache
(codegen/kernels/cpu_gemm.py), or, for a small dot, as an in-order reduction with the epilogue
fused. Producers of the dot's operands may join the fusion too (its GEMM kernel packs the
operand through them; a small dot's reduction reads them through element generators).

Two questions, asked by the producer-consumer rules (producer_consumer.py):
- `dot_into_consumer`: may dot `producer` fuse into `consumer` (the consumer's fusion then
  becomes kOutput)? Only when every read of the dot, on every path to the fusion's root, is an
  elementwise op of the dot's dimensions, so the epilogue reads each GEMM result element once,
  at its own index; the root is one array, perhaps a transpose of such a value (attention's
  `bhqd -> bqhd` after its second dot: the GEMM writes each element where the transpose puts
  it, through BLAS's leading dimension when the layout allows, so no transpose pass runs),
  perhaps under a reshape (`bqhd -> bq(hd)`: row-major, it moves no element);
  no second dot or reduction is in the fusion.
- `into_dot_fusion`: may a producer join an existing kOutput dot fusion? Not a reduction (an
  epilogue never recomputes one per element) and not a second dot.
"""
from __future__ import annotations

from ...hlo.ir import HloInstruction
from ...hlo.walk import first_non_elementwise_use
from .decisions import Decision
from .fusion_utils import operand_index

refuse = Decision.refuse
ALLOW = Decision.allow()
# Element types a fused dot may have (BLAS's, and the 16-bit floats computed through f32).
_DOT_TYPES = frozenset({"f16", "bf16", "f32", "f64", "c64", "c128"})


def is_dot_output_fusion(inst: HloInstruction) -> bool:
    """Whether `inst` is a kOutput fusion (a dot with its epilogue, on the CPU)."""
    return inst.opcode == "fusion" and inst.attrs.get("kind") == "kOutput"


def _root_chain(root: HloInstruction) -> list[HloInstruction]:
    """The root reshape and/or transpose an output fusion writes through (a row-major reshape
    moves no element; the GEMM writes the transpose's layout), outermost first; [] if none."""
    chain, inst = [], root
    if inst.opcode == "reshape" and inst.shape.is_array:
        chain.append(inst)
        inst = inst.operands[0]
    if inst.opcode == "transpose" and inst.shape.is_array and (not chain or len(inst.users) == 1):
        chain.append(inst)
    return chain


def dot_into_consumer(producer: HloInstruction, consumer: HloInstruction) -> Decision:
    """CPU: may dot `producer` be output-fused into `consumer`? (see the module doc)"""
    p, c = producer.name, consumer.name
    types = [producer.shape.dtype] + [op.shape.dtype for op in producer.operands]
    if any(t.name not in _DOT_TYPES for t in types):
        return refuse("dot-output-type", f"dot {p} of {producer.shape.dtype.name} has no BLAS type; it runs as a "
                                         f"library call and {c} reads its result from memory")
    dims = tuple(producer.shape.dims)
    # A transpose and/or reshape at the root is written through by the GEMM (its output
    # layout), so the fusion's result has the dot's dimensions permuted or regrouped.
    chain = _root_chain(consumer.fused_computation.root if consumer.opcode == "fusion" else consumer)
    if chain:
        value_dims = tuple(chain[-1].operands[0].shape.dims)
    else:
        value_dims = tuple(consumer.shape.dims) if consumer.shape.is_array else None
    if not consumer.shape.is_array or value_dims != dims:
        return refuse("dot-output-shape", f"{c} does not produce one array of dot {p}'s dimensions (or their "
                                          f"transpose), so it cannot be dot {p}'s epilogue")
    if consumer.opcode in ("transpose", "reshape"):
        return ALLOW
    if consumer.opcode != "fusion":
        if not consumer.info.elementwise:
            return refuse("dot-output-elementwise", f"{c} ('{consumer.opcode}') is not elementwise, so it cannot be "
                                                    f"dot {p}'s epilogue")
        return ALLOW
    comp = consumer.fused_computation
    held = [i.name for i in comp.instructions if not i.info.fits_an_epilogue]
    if held:
        return refuse("dot-output-epilogue", f"fusion {c} holds {', '.join(held)}, which an epilogue of dot {p} "
                                             f"would recompute per element")
    param = comp.parameter(operand_index(consumer, producer))
    # a root transpose/reshape chain is written through by the GEMM, not recomputed
    bad = first_non_elementwise_use(param, dims, allowed=set(_root_chain(comp.root)[-1:]))
    if bad is not None:
        return refuse("dot-output-elementwise", f"{bad.name} (in {c}) reads dot {p} other than elementwise at its own "
                                                f"index, so the fusion cannot be its epilogue")
    return ALLOW


def into_dot_fusion(producer: HloInstruction, consumer: HloInstruction) -> Decision:
    """CPU: may `producer` join kOutput fusion `consumer`? (see the module doc)"""
    if not producer.info.fits_an_epilogue:
        return refuse("dot-output-producer", f"{producer.name} ('{producer.opcode}') is not fused into output "
                                             f"fusion {consumer.name}")
    return ALLOW


def output_fusion_note(producer: HloInstruction, kind: str) -> str:
    """The reason to add to a fusion log entry that made or grew a kOutput fusion."""
    if kind != "kOutput" or producer.opcode != "dot":
        return ""
    return (f"; output fusion: the epilogue runs on each block of dot {producer.name} while it is in "
            f"cache, its result is written once")
