"""What would let a refused fusion happen, per refusal rule: the hints `hlofuse explain` gives."""

# What would let a refused fusion happen, per refusal rule ({p}: producer, {c}: consumer).
HINTS = {
    "producer-not-fusible": "{p} cannot be fused into a consumer: only elementwise and data-movement producers "
                            "can (a reduction only roots an input fusion; dot, convolution, sort, custom calls "
                            "never fuse). Computing its value with such ops would let it fuse.",
    "consumer-not-fusible": "{c} cannot root a fusion; a fusible consumer (elementwise or reduce) would.",
    "not-fusible-into-all-users": "{p} feeds a user that cannot fuse it, so fusing it elsewhere would recompute it "
                                  "and add traffic. Giving {p} only fusible users (or one user) allows the fusion.",
    "no-duplication": "this pass never duplicates a producer with several users; a later pass (with duplication "
                      "or multi-output fusion) decides again. A single user of {p} avoids the duplication.",
    "expensive-duplicate": "{p} is expensive, so it is duplicated into its users only when every one of them can "
                           "fuse it (and only into a few): make every user of {p} fusible (an output, library "
                           "call or re-reading consumer keeps it in memory), or give it fewer users.",
    "expensive-reused": "{c} reads each element of {p} several times, so fusing would recompute the expensive {p} "
                        "per read. Materialising {p} once (as now) is cheaper; a cheaper {p} would fuse.",
    "window-reduction": "XLA:CPU's rule (TargetParams.fuse_window_reductions off) runs every reduce-window as a "
                        "kernel of its own; hlofuse's CPU and GPU rules fuse it with its producers and consumers.",
    "window-duplicate": "{p} is a window reduction read by several users; copying it into each would reduce every "
                        "window again. With a single user (or one user reading the others' values) it fuses.",
    "heavy-computation": "fusing would recompute a heavy computation per output element of {c}; reduce the reuse "
                         "(e.g. broadcast after, not before, the expensive part).",
    "budget": "the fused kernel would exceed the target's operand/output or reduction budget; fewer distinct "
              "inputs (or splitting the work) keeps it within budget.",
    "cycle": "a path leaves the fusion and comes back into it; fuse the instructions on that path too, or remove "
             "the dependence through them.",
    "root": "{p} is the computation's root (its value must be materialised as the output).",
    "constant": "large constants stay buffers and scalar constants only join existing fusions; nothing to change.",
    "reduce-epilogue": "on the GPU only converts/bitcasts fuse after a reduction (its epilogue; under priority "
                       "fusion, any one-operand ops); {c} is not one. A single user of the reduction that is such "
                       "an op would fuse.",
    "duplicated-indexing": "{c} would emit {p}'s code at more than 15 distinct indices (each slice, broadcast or "
                           "reshape of a value asks for it at new ones); fewer reads of {p} at different indices "
                           "(e.g. one slice instead of two) would let it merge.",
    "unprofitable": "the performance model says fusing {p} into its users costs more time (recomputing it per "
                    "element they read) than it saves in traffic and launches; a cheaper {p}, or users that read "
                    "each of its elements once, would fuse.",
    "transpose-into-reduce": "a physically transposing {p} feeding a reduction makes the reduction uncoalesced; "
                             "change the layout so the transpose is a bitcast.",
    "producer-is-fusion": "GPU instruction fusion does not fuse fusions into consumers; the fusion merger and "
                          "multi-output fusion may still merge them.",
    "producer-multi-output": "{p} is a multi-output fusion; its outputs are read by their users from memory.",
    "concatenate": "the CPU keeps wide or multiply-used concatenates unfused; fewer operands or a single user "
                   "would let it fuse.",
    "fusion-too-large": "one kernel holds at most a few hundred instructions (LLVM compiles bigger ones slowly); "
                        "the chain continues in the next kernel.",
    "too-many-reductions": "the CPU limits reductions per fusion; split the reductions over several computations.",
    "different-loop-shapes": "the two would iterate over different shapes; make their output shapes (or reduction "
                             "input shapes) agree.",
    "incompatible-reductions": "the reductions reduce different dimensions or shapes; align them to fuse.",
    "transpose-and-reduce": "a tiled transpose and a reduction need different tilings, so XLA never puts them in one "
                            "kernel.",
    "incompatible-transposes": "the two transposes permute different dimensions; one tiling cannot serve both.",
    "bitcast-width": "a bitcast-convert that changes the element width changes the indexing; it stays a kernel "
                     "boundary.",
    "disjoint-slices": "the two read disjoint slices of their common operand, so one kernel would save no reads; "
                       "overlapping slices would fuse.",
    "sibling": "{p} cannot take part in sibling (multi-output) fusion.",
    "cpu-sibling-kernel-kinds": "on the CPU only two reductions of one input, or two plain loops (elementwise and "
                                "data movement, no reduce or in-place update), share a kernel; a loop and a "
                                "reduction, or a library call, stay separate kernels.",
    "cpu-loop-dims": "a CPU loop kernel walks one output shape and {p} and {c} write different ones; only loops "
                     "writing outputs of the same dimensions share a kernel.",
    "cpu-reread": "{c} reads {p} other than element by element (a broadcast, slice or transpose of it), so as "
                  "{c}'s extra output {p} would be computed again per read; it stays in memory.",
    "dynamic-update-slice": "in-place dynamic-update-slice roots cannot share a multi-output fusion.",
    "in-place": "{c} updates a buffer in place; a second read of that buffer (or a producer reading it other "
                "than at exactly the updated window) would see overwritten elements, and two in-place updates stay "
                "apart.",
    "scatter-operand": "{c} scatters into its operand's buffer in place, so only the producers of its indices and "
                       "updates fuse into it; computing the updates without reading that operand would let {p} fuse.",
    "scatter-output": "nothing fuses into the output of a scatter; its users read the scattered result from memory.",
    "consumer-not-mof-root": "{c} cannot root a multi-output fusion.",
    "transposing": "a physically transposing producer is not fused into multi-output fusions; a bitcast "
                   "transpose (layout change) would be.",
    "mof-more-bytes": "the multi-output fusion would move more bytes than it saves (its outputs written beside "
                      "the reads it shares).",
    "user-not-fusion": "the fusion merger only merges into users that are all loop or input fusions; make every "
                       "user of {p} fusible.",
    "more-bytes": "merging would make the users read more bytes than the merge saves.",
    "not-launch-bound": "horizontal fusion only groups small kernels whose cost is the launch; {p} is big enough.",
    "layout": "horizontal fusion needs row-major layouts.",
    "shared-parameter": "horizontally fused kernels may not share a parameter; give them distinct inputs.",
    # Convolution epilogue (kOutput) fusion on the CPU (passes/fusion/conv_fusion.py).
    "conv-output-type": "complex and pred convolutions run as library calls; a real or integer {p} would fuse.",
    "conv-output-users": "{p} has several users and a convolution is never computed twice; a single elementwise "
                         "user of {p} would become its epilogue.",
    "conv-output-shape": "an epilogue has the convolution's dimensions; {c} changes them (reshape, slice, "
                         "reduce): apply it after the elementwise part.",
    "conv-output-elementwise": "an epilogue reads each result element once at its own index; {c} (or an op in it) "
                               "reads {p} otherwise.",
    "conv-output-kind": "only an elementwise loop fusion becomes a convolution's epilogue; {c} is another kind.",
    "conv-output-epilogue": "{c} holds a reduction, dot or other heavy op the epilogue would recompute per "
                            "element; split it off.",
    "conv-output-producer": "a convolution fusion's epilogue takes no heavy producer ({p}); it runs as its own kernel.",
    "conv-output-operand": "the conv kernel reads its operands from memory, so {p}, which the convolution reads, "
                           "runs before it; nothing to change.",
    "conv-epilogue-duplicate": "{p} ends a convolution's epilogue chain; a copy of it in {c} would give the "
                               "convolution a second user and cost it the epilogue, so {c} reads {p} from memory; "
                               "nothing to change.",
    # Dot epilogue (kOutput) fusion on the CPU (passes/fusion/dot_fusion.py).
    "dot-output-type": "integer, predicate and f8 dots run as library calls; a float dot {p} would fuse.",
    "dot-output-shape": "an epilogue has the dot's dimensions (or, at the root, their transpose); {c} changes them "
                        "(reshape, slice, broadcast): apply it after the elementwise part.",
    "dot-output-elementwise": "an epilogue reads each GEMM result element once at its own index; {c} (or an op in "
                              "it) reads {p} otherwise (a reduction, a transpose that is not the root).",
    "dot-output-epilogue": "{c} holds a reduction, dot or other heavy op the epilogue would recompute per "
                           "element; split it off.",
    "dot-output-producer": "a dot fusion's epilogue takes no heavy producer ({p}); it runs as its own kernel.",
}
