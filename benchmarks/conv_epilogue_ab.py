"""Convolution epilogues kept or lost to copies: one model fused twice by hlofuse, timed interleaved beside XLA:CPU.

    KERAS_BACKEND=jax python benchmarks/conv_epilogue_ab.py [--models keras_mobilenet_v2,keras_resnet50]
        [--rounds 30] [--threads 1]

For each model of benchmarks/model_zoo.py, the same HLO text is fused twice after the same
passes: by the CPU rules as they are ("kept": a cheap producer ending a convolution's epilogue
chain is not copied into its other users, conv_fusion.duplicate_keeps_conv_epilogue) and by the
same rules without that check ("copied": the rule `conv_epilogue_copy` left out of
producer_consumer.CPU_RULES while fusing, the behaviour before it). The rest (compile, check
against each other and XLA, rotated rounds, the row) is benchmarks/fusion_ab.py's.
"""
from __future__ import annotations

import sys

from fusion_ab import ab_main, fused_by


def _fuse(unfused, label: str):
    """`unfused` fused for the CPU, with ("kept") or without ("copied") the conv-epilogue copy check."""
    from hlofuse.passes.fusion import fusion_passes, producer_consumer

    rules = producer_consumer.CPU_RULES
    if label == "copied":
        producer_consumer.CPU_RULES = tuple(r for r in rules if r is not producer_consumer.conv_epilogue_copy)
    try:
        return fused_by(unfused, fusion_passes("cpu"))
    finally:
        producer_consumer.CPU_RULES = rules


if __name__ == "__main__":
    sys.exit(ab_main(__doc__, _fuse, ("kept", "copied"), models="keras_mobilenet_v2", rounds=30, threads=1))
