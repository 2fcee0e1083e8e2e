"""The pass table and the one pass runner.

`PASSES` names every pass; `PIPELINES` names lists of passes (the fusion passes of a target)
that can stand wherever a pass name can. A pass spec is a name with optional options in
braces, as MLIR writes them: `simplifier{max_fold_elements=8}`, `fusion{target=cpu}`;
`parse_pass_list("simplifier,cse,dce")` builds a list. Options are the pass's dataclass
fields; an option no pass takes is an error, never dropped.

`PassPipeline` runs passes in order and is the only runner: it verifies after each pass when
asked, dumps the module before and after each pass, and records per-pass wall times.
"""
from __future__ import annotations

import os
import re
import time
from typing import Any, Callable, Iterable

from ..files import write_text_atomically
from ..hlo.errors import HloError
from ..hlo.ir import HloModule
from .batchnorm_expander import BatchNormExpander
from .constant_folding import ConstantFolding
from .contraction_types import ContractionTypes
from .cse import CommonSubexpressionElimination
from .dce import DeadCodeElimination
from .fusion import (FUSION_ALGORITHMS, CallInliner, FusionMerger, HorizontalLoopFusion, InstructionFusion,
                     MultiOutputFusion, NonDuplicatingFusion, PriorityFusion, SiblingFusion, fusion_passes)
from .fusion.horizontal_input_fusion import HorizontalInputFusion
from .legacy_indices import LegacyIndexVectors
from .pass_base import HloPass
from .reshape_mover import ReshapeMover
from .conditional_to_select import ConditionalToSelect
from .nested_fusion_flattener import NestedFusionFlattener
from .oversized_fusion_splitter import OversizedFusionSplitter
from .reduce_window_rewriter import ReduceWindowRewriter
from .lapack_call_expander import LapackCallExpander
from .ragged_dot_expander import RaggedDotExpander
from .shuffle_expander import ShuffleExpander
from .stochastic_convert_decomposer import StochasticConvertDecomposer
from .scan_expander import ScanExpander
from .scatter_simplifier import ScatterToDynamicUpdateSlice
from .simplifier import AlgebraicSimplifier
from .tree_reduction_rewriter import TreeReductionRewriter

# Every pass hlofuse has, by the name `--passes` and the golden files use.
PASSES: dict[str, type[HloPass]] = {
    "batchnorm-expander": BatchNormExpander,
    "legacy-index-vectors": LegacyIndexVectors,
    "scan-expander": ScanExpander,
    "conditional-to-select": ConditionalToSelect,
    "stochastic-convert-decomposer": StochasticConvertDecomposer,
    "shuffle-expander": ShuffleExpander,
    "ragged-dot-expander": RaggedDotExpander,
    "nested-fusion-flattener": NestedFusionFlattener,
    "oversized-fusion-splitter": OversizedFusionSplitter,
    "reduce-window-rewriter": ReduceWindowRewriter,
    "lapack-call-expander": LapackCallExpander,
    "simplifier": AlgebraicSimplifier,
    "algsimp": AlgebraicSimplifier,  # XLA's name for it
    "constant-folding": ConstantFolding,
    "cse": CommonSubexpressionElimination,
    "scatter-simplifier": ScatterToDynamicUpdateSlice,
    "contraction-types": ContractionTypes,
    "dce": DeadCodeElimination,
    "call-inliner": CallInliner,
    "reshape-mover": ReshapeMover,
    "fusion": InstructionFusion,
    "fusion-no-duplication": NonDuplicatingFusion,
    "fusion-merger": FusionMerger,
    "multi-output-fusion": MultiOutputFusion,
    "sibling-fusion": SiblingFusion,
    "horizontal-fusion": HorizontalLoopFusion,
    "horizontal-input-fusion": HorizontalInputFusion,
    "priority-fusion": PriorityFusion,
    "tree-reduction-rewriter": TreeReductionRewriter,
}

# Named lists of passes: `--passes fusion-pipeline{target=cpu}` runs the fusion passes of the CPU;
# `fusion-pipeline{algorithm=legacy}` the GPU's instruction fusion / merger sequence instead of
# priority fusion (passes/fusion/__init__.py).
PIPELINES: dict[str, Callable[..., list[HloPass]]] = {
    "fusion-pipeline": fusion_passes,
}
PIPELINE_OPTIONS = ("target", "algorithm")


class UnknownPassError(HloError):
    """A pass name that is not in the table, or an option the pass does not take."""


class PipelineVerifyError(HloError):
    """The verifier rejected the module after a pass; the message names the pass."""


def registered_passes() -> list[str]:
    """Names of all passes and pipelines, sorted."""
    return sorted([*PASSES, *PIPELINES])


def pass_options(name: str) -> tuple[str, ...]:
    """The options the pass or pipeline `name` takes."""
    if name in PIPELINES:
        return PIPELINE_OPTIONS
    return _options_of(_lookup(name))


def _options_of(cls: type[HloPass]) -> tuple[str, ...]:
    return cls.option_names()


FUSION_TARGETS = ("cpu", "gpu")


def _check_values(what: str, cls: type[HloPass] | None, options: dict[str, Any]) -> None:
    """UnknownPassError for an option value the pass cannot take: one of another type than the
    option's default (a spec's `max_fold_elements=abc` would otherwise reach the pass as a
    string), or a target that is not a fusion target."""
    import inspect

    defaults = {n: p.default for n, p in inspect.signature(cls).parameters.items()} if cls else {}
    for key, value in options.items():
        if key == "target" and value not in FUSION_TARGETS:
            raise UnknownPassError(f"{what} has no target '{value}'; targets are {', '.join(FUSION_TARGETS)}")
        if key == "algorithm" and value not in FUSION_ALGORITHMS:
            raise UnknownPassError(f"{what} has no fusion algorithm '{value}'; algorithms are "
                                   f"{', '.join(FUSION_ALGORITHMS)}")
        default = defaults.get(key, inspect.Parameter.empty)
        if default is inspect.Parameter.empty or default is None:
            continue
        if type(value) is not type(default):
            kind = {bool: "true or false", int: "a whole number"}.get(type(default), type(default).__name__)
            raise UnknownPassError(f"{what}: option {key}={value} should be {kind}")


def _lookup(name: str) -> type[HloPass]:
    if name in PIPELINES:
        raise UnknownPassError(f"'{name}' is a pipeline, not one pass: expand it with expand() or name it in a "
                               f"pass list (parse_pass_list, --passes)")
    try:
        return PASSES[name]
    except KeyError:
        raise UnknownPassError(f"unknown pass '{name}'; known passes: {', '.join(registered_passes())}") from None


def get_pass(name: str, **options: Any) -> HloPass:
    """A fresh pass `name` built with `options` (each must be one of the pass's options)."""
    name = name.strip()
    cls = _lookup(name)
    known = _options_of(cls)
    unknown = sorted(set(options) - set(known))
    if unknown:
        takes = f"it takes {', '.join(known)}" if known else "it takes no options"
        raise UnknownPassError(f"pass '{name}' has no option {', '.join(unknown)}; {takes}")
    _check_values(f"pass '{name}'", cls, options)
    return cls(**options)


def expand(name: str, **options: Any) -> list[HloPass]:
    """The passes a name stands for: one pass, or every pass of a named pipeline."""
    name = name.strip()
    if name in PIPELINES:
        unknown = sorted(set(options) - set(PIPELINE_OPTIONS))
        if unknown:
            raise UnknownPassError(f"pipeline '{name}' has no option {', '.join(unknown)}; it takes "
                                   f"{', '.join(PIPELINE_OPTIONS)}")
        _check_values(f"pipeline '{name}'", None, options)
        return list(PIPELINES[name](options.get("target", "gpu"), options.get("algorithm")))
    return [get_pass(name, **options)]


_SPEC = re.compile(r"\s*([A-Za-z0-9_.-]+)\s*(?:\{([^{}]*)\})?\s*$")


def parse_pass_list(spec: str, defaults: dict[str, Any] | None = None, **shared: Any) -> list[HloPass]:
    """Passes for a comma-separated list of specs (`"simplifier{max_fold_elements=8},cse,dce"`).

    `shared` options (the golden files' `max_fold_elements=8`) go to every pass that takes them;
    each must be taken by at least one pass of the list, or it is an error. `defaults` (the
    compile target) go to the passes that take them and may be taken by none."""
    passes: list[HloPass] = []
    for key, value in (defaults or {}).items():
        shared.setdefault(key, value)
    used: set[str] = set()
    for item in _split_specs(spec):
        m = _SPEC.match(item)
        if m is None:
            raise UnknownPassError(f"malformed pass spec '{item}'; expected name or name{{option=value,...}}")
        name, body = m.group(1), m.group(2)
        own = _parse_options(name, body) if body else {}
        takes = set(pass_options(name))
        given = {k: v for k, v in shared.items() if k in takes}
        used |= set(given)
        passes += expand(name, **{**given, **own})
    unused = sorted(set(shared) - used - set(defaults or {}))
    if unused:
        raise UnknownPassError(f"no pass of '{spec}' takes option {', '.join(unused)}")
    return passes


def _split_specs(spec: str) -> list[str]:
    items, depth, cur = [], 0, ""
    for ch in spec:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    return [i for i in items if i.strip()]


def _parse_options(name: str, body: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for word in body.split(","):
        key, sep, value = word.partition("=")
        if not sep or not key.strip():
            raise UnknownPassError(f"option '{word.strip()}' of pass '{name}' is not key=value")
        options[key.strip()] = _option_value(value.strip())
    return options


def _option_value(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        return text


def file_safe(name: str) -> str:
    """`name` with every run of characters unsafe in a file name replaced by '_' (dump file names)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "module"


class PassPipeline(HloPass):
    """Passes run in order. Options: verify after each pass, dump the module before and after
    each pass to `dump_dir` (XLA's numbering: `0000.<module>.before_optimizations.hlo`, then
    `NNNN.<module>.<pass>.hlo`); per-pass wall times are always recorded in `timings` as
    (name, seconds, changed)."""

    def __init__(self, passes: Iterable[HloPass], verify: bool = False, dump_dir: str | None = None,
                 name: str = "pipeline") -> None:
        self.passes = list(passes)
        self.verify = verify
        self.dump_dir = dump_dir
        self.pipeline_name = name
        self.timings: list[tuple[str, float, bool]] = []

    def _dump(self, module: HloModule, index: int, label: str) -> None:
        if not self.dump_dir:
            return
        path = os.path.join(self.dump_dir, f"{index:04d}.{file_safe(module.name)}.{file_safe(label)}.hlo")
        write_text_atomically(path, module.to_text(), create_dirs=True)  # --dump-dir makes its folder

    def _verify(self, module: HloModule, after: str) -> None:
        from ..hlo.verifier import verify

        try:
            verify(module)
        except HloError as e:
            raise PipelineVerifyError(f"the module is invalid after pass '{after}': {e}") from e

    def run(self, module: HloModule) -> bool:
        """Run every pass on `module`; True if any changed it."""
        self.timings = []
        self._dump(module, 0, "before_optimizations")
        changed_any = False
        for k, p in enumerate(self.passes, start=1):
            start = time.perf_counter()
            changed = bool(p.run(module))
            self.timings.append((p.name, time.perf_counter() - start, changed))
            changed_any |= changed
            if self.verify:
                self._verify(module, p.name)
            self._dump(module, k, p.name)
        return changed_any

    def __repr__(self) -> str:
        return f"<pipeline {self.pipeline_name}: {', '.join(p.name for p in self.passes)}>"


def standard_pipeline(target: str = "cpu", fusion: bool = True, verify: bool = False,
                      dump_dir: str | None = None, algorithm: str | None = None,
                      expand_scans: bool = True) -> PassPipeline:
    """batchnorm-expander, scan-expander, conditional-to-select, stochastic-convert-decomposer,
    shuffle-expander, ragged-dot-expander, nested-fusion-flattener, oversized-fusion-splitter,
    reduce-window-rewriter, lapack-call-expander, legacy-index-vectors,
    scatter-simplifier, contraction-types, call-inliner, simplifier, reshape-mover, simplifier,
    cse, dce, for the GPU tree-reduction-rewriter (its reduction kernels fold at most about
    sqrt(R) partials into one accumulator), then (with `fusion`) the fusion passes for `target`
    (by `algorithm`, "legacy" or "priority"; None: the target's default), then dce. `expand_scans` False leaves out the
    passes from the scan expander to the nested fusion flattener (the interpreter runs those
    ops itself, as the oracle of the compiled backends' rewrites); the scan expander runs
    before the call inliner, which inlines the calls of to_apply it makes.

    Calls are inlined before the simplifier, as XLA's pipelines do, so that it sees through
    JAX's nested jits (a `jnp.where` of a constant predicate, a reduce computed in two calls);
    the reshape mover's reshapes meet and cancel in the second simplifier, and CSE then
    merges what the two leave equal. The inliner runs once: no later pass makes a call, so
    the fusion passes' own inliner (which `--passes fusion-pipeline` alone needs) is left out."""
    compiled_only = ([ScanExpander(), ConditionalToSelect(), StochasticConvertDecomposer(), ShuffleExpander(),
                      RaggedDotExpander(), NestedFusionFlattener(), OversizedFusionSplitter(),
                      ReduceWindowRewriter(), LapackCallExpander()]
                     if expand_scans else [])
    passes: list[HloPass] = [BatchNormExpander(), *compiled_only, LegacyIndexVectors(),
                             ScatterToDynamicUpdateSlice(), ContractionTypes(),
                             CallInliner(target), AlgebraicSimplifier(), ReshapeMover(), AlgebraicSimplifier(),
                             CommonSubexpressionElimination(),
                             DeadCodeElimination()]
    if target == "gpu":
        passes.append(TreeReductionRewriter())
    if fusion:
        passes += fusion_passes(target, algorithm, inline_calls=False)
    passes.append(DeadCodeElimination())
    return PassPipeline(passes, verify=verify, dump_dir=dump_dir, name=f"standard-{target}")
