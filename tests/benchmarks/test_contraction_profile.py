"""benchmarks/contraction_profile.py: the shape classes it reports for dots and convolutions,
and the per-step minimum profile it divides their flops by."""
from __future__ import annotations

import sys

import numpy as np

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import contraction_profile as cp  # noqa: E402

import hlofuse  # noqa: E402

CONVS = """HloModule m
ENTRY e {
  x = f32[2,9,9,16] parameter(0)
  w = f32[3,3,16,32] parameter(1)
  c3 = f32[2,5,5,32] convolution(x, w), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  w1 = f32[1,1,16,8] parameter(2)
  c1 = f32[2,9,9,8] convolution(x, w1), window={size=1x1}, dim_labels=b01f_01io->b01f
  wd = f32[3,3,1,16] parameter(3)
  dw = f32[2,9,9,16] convolution(x, wd), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=16
  wg = f32[3,3,4,16] parameter(4)
  g4 = f32[2,9,9,16] convolution(x, wg), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=4
  q = f32[4,6,32,8] parameter(5)
  k = f32[4,6,32,8] parameter(6)
  qk = f32[4,6,32,32] dot(q, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}
  ROOT t = (f32[2,5,5,32], f32[2,9,9,8], f32[2,9,9,16], f32[2,9,9,16], f32[4,6,32,32]) tuple(c3, c1, dw, g4, qk)
}
"""


def test_describe_names_each_class_and_its_sizes():
    # rows are batch x output positions (2 x 5 x 5 = 50 at stride 2, 2 x 9 x 9 = 162), input
    # features count every group's; the dot is batch x M x N x K with the batch dims multiplied
    insts = {i.name: i for i in hlofuse.parse_hlo(CONVS).entry.instructions}
    assert cp.describe(insts["c3"]) == ("conv 3x3", "3x3 s2x2 16->32 rows 50")
    assert cp.describe(insts["c1"]) == ("conv 1x1", "1x1 16->8 rows 162")
    assert cp.describe(insts["dw"]) == ("conv depthwise", "3x3 16->16 rows 162 g16")
    assert cp.describe(insts["g4"]) == ("conv grouped", "3x3 16->16 rows 162 g4")
    assert cp.describe(insts["qk"]) == ("dot", "24 x 32x32x8")


def test_gemm_sizes_are_the_convolutions_and_dots_matrix_products():
    # c3: 50 rows x 32 features x (9 taps x 16 inputs); c1: 162 x 8 x 16; the batched dot per
    # batch element: 24 x (32 x 32 x 8); grouped convolutions have no single GEMM
    insts = {i.name: i for i in hlofuse.parse_hlo(CONVS).entry.instructions}
    assert cp.gemm_sizes(insts["c3"]) == (1, 50, 32, 144)
    assert cp.gemm_sizes(insts["c1"]) == (1, 162, 8, 16)
    assert cp.gemm_sizes(insts["qk"]) == (24, 32, 32, 8)
    assert cp.gemm_sizes(insts["dw"]) is None and cp.gemm_sizes(insts["g4"]) is None


def test_profile_minimum_is_per_step_and_per_call(dot_tanh):
    # a dot and its tanh: every kernel step gets a time, none more than the least whole run,
    # and exactly one step is the dot's, whose shape contraction_of and describe report
    exe, args = dot_tanh
    steps, best, calls, wall = cp.profile_minimum(exe, args, 3)
    kernel_steps = [ns for ns in steps if ns.id in best]
    assert kernel_steps and all(0 < best[ns.id] <= wall for ns in kernel_steps)
    assert all(calls[ns.id] == 1 for ns in kernel_steps)
    dots = [ns for ns in kernel_steps if cp.contraction_of(ns) is not None]
    assert len(dots) == 1 and cp.describe(cp.contraction_of(dots[0])) == ("dot", "1 x 64x32x128")
    # 64 x 128 x 32: 262,144 multiply-adds, under one thread's share of the GEMM partition: one unit
    assert cp.work_units(dots[0]) == "1"
