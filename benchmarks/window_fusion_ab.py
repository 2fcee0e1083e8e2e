"""Window reductions fused or not: one model compiled twice by hlofuse, timed interleaved beside XLA:CPU.

    KERAS_BACKEND=jax python benchmarks/window_fusion_ab.py [--models flax_mnist_cnn,flax_mnist_cnn_train]
        [--rounds 40] [--threads 1]

For each model of benchmarks/model_zoo.py, the same HLO text is fused twice after the same
passes: by hlofuse's CPU rules ("fused": reduce-window fused with its producers and consumers,
passes/fusion/window_fusion.py) and by XLA:CPU's ("apart": `fuse_window_reductions=False`, every
pool a kernel of its own). The rest (compile, check against each other and XLA, rotated
rounds, the row) is benchmarks/fusion_ab.py's.
"""
from __future__ import annotations

import sys

from fusion_ab import ab_main, fused_by


def _fuse(unfused, label: str):
    """`unfused` fused by hlofuse's CPU rules ("fused") or with pools apart as XLA:CPU ("apart")."""
    import dataclasses

    from hlofuse.passes.fusion import fusion_passes
    from hlofuse.passes.fusion.cost_model import CPU

    params = CPU if label == "fused" else dataclasses.replace(CPU, fuse_window_reductions=False)
    return fused_by(unfused, fusion_passes(params))


if __name__ == "__main__":
    sys.exit(ab_main(__doc__, _fuse, ("fused", "apart"), models="flax_mnist_cnn,flax_mnist_cnn_train",
                     rounds=40, threads=0))
