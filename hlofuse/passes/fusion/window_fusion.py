"""Window reductions (`reduce-window`: pooling, and the window sums of pooling gradients) in
loop fusions.

XLA:GPU takes reduce-window as any data-movement op (IsUniversallyLoopFusible): it roots a loop
fusion, taking its producers (a pad, a relu), and is fused as a producer into its consumers
(an average pool's divide), its element generator looping over the window per output element.
XLA:CPU's CanBeLoopFused leaves it out: the pool runs as a kernel of its own and its consumers
read it back from memory. hlofuse's CPU fuses it as the GPU does (`TargetParams.
fuse_window_reductions`; off, the CPU decides as XLA:CPU), since its loop kernel emits the
window through the same element generator fused or not: a fused pool saves the pooled tensor's
write and read (the flax MNIST CNN's 2x2 average pools and their divides: one kernel each
instead of two; docs/convolutions.md has the measurements).

What keeps a fused window reduction from costing more than it saves is decided by the rules
every producer meets, and by one of this module's:
- a reduce-window is expensive (XLA's IsExpensive): it is not fused into a consumer that reads
  its elements several times (`reuse`: a broadcast, another overlapping window), and an
  expensive producer is not fused into a window reduction that re-reads it (the same rule);
- `window_reduction` here: a reduce-window is never duplicated (fused into one of several
  users and kept for the others, or copied into each): every copy would reduce each window
  again. XLA never duplicates an expensive producer; hlofuse's refinement for expensive
  elementwise producers (instruction_fusion.expensive_duplication) recomputes one op per
  element per copy, which is bounded; a copied window reduction is not.
"""
from __future__ import annotations

from ...hlo.ir import HloInstruction
from .context import FusionContext
from .decisions import Decision
from .fusion_utils import reader_names

ALLOW = Decision.allow()


def _readers(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> str:
    """Who reads `producer` in `consumer` ("a and b"), for a refusal's reason: named only when
    refusing, since this rule is asked of every producer-consumer pair."""
    return " and ".join(reader_names(producer, consumer, ctx)[0].split(", "))


def window_reduction(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """A reduce-window producer or consumer: refused where the target leaves window reductions
    unfused (XLA:CPU's rule, `fuse_window_reductions` off), and a reduce-window producer is
    never duplicated (refused where it has another user; the root is left to the `base` rule)."""
    p = producer.name
    if not ctx.params.fuse_window_reductions:
        if producer.opcode == "reduce-window":
            readers = _readers(producer, consumer, ctx)
            verb = "reads" if " and " not in readers else "read"
            return Decision.refuse("window-reduction",
                                   f"reduce-window {p} runs as a kernel of its own on this target "
                                   f"(XLA:CPU's CanBeLoopFused leaves window reductions out); {readers} "
                                   f"{verb} it from memory")
        if consumer.opcode == "reduce-window":
            return Decision.refuse("window-reduction",
                                   f"reduce-window {consumer.name} roots no fusion on this target (XLA:CPU's "
                                   f"CanBeLoopFused leaves window reductions out); it reads {p} from memory")
        return ALLOW
    if producer.opcode != "reduce-window" or producer.is_root():
        return ALLOW
    others = [u for u in dict.fromkeys(producer.users) if u is not consumer]
    if others:
        names = ", ".join(ctx.source_name(u) for u in others)
        return Decision.refuse("window-duplicate",
                               f"reduce-window {p} is also read by {names}; fusing it into "
                               f"{_readers(producer, consumer, ctx)} would reduce every window again in "
                               f"each copy (a window reduction is never duplicated)")
    return ALLOW
