"""The real GPU's oracle in the graph fuzzer (tests/fuzz/cases.py): the interpreter keeping
denormals, as XLA:GPU does; a GPU answer that the flushing semantics give instead is counted
apart as denormal-only (the GPU's functions need not produce or keep a denormal: its logistic
is 1 / (1 + exp(-x)), 0 below -88.7 where the exact value is a denormal), and any other
difference stays a mismatch."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import hlofuse
from hlofuse.runtime.interpreter import evaluate
from tests.fuzz import outcomes as oc
from tests.fuzz.cases import _against_interpreter, _oracle

LOGISTIC_REMAINDER = """HloModule m
ENTRY e {
  x = f32[6] parameter(0)
  l = f32[6] logistic(x)
  ROOT r = f32[6] remainder(l, l)
}
"""


def test_a_gpu_answer_of_the_flushing_semantics_is_denormal_only():
    module = hlofuse.parse_hlo(LOGISTIC_REMAINDER)
    x = np.array([-95.0, -100.0, 0.5, -2.0, 3.0, -90.0], np.float32)  # logistic: denormals first
    keep = evaluate(module, [x], denormals="keep")
    flush = evaluate(module, [x])
    assert not np.array_equal(np.isnan(keep[0]), np.isnan(flush[0]))  # fmod(d, d) = 0, fmod(0, 0) NaN
    reference = _oracle(module, [x], "gpu", (None, None))
    assert _against_interpreter(module, [x], [np.asarray(flush[0])], "gpu", 0, reference)["outcome"] == oc.DENORMAL
    wrong = np.asarray(keep[0]).copy()
    wrong[2] = 7.0  # a normal element wrong: no semantics excuses it
    assert _against_interpreter(module, [x], [wrong], "gpu", 0, reference)["outcome"] == oc.MISMATCH


@pytest.mark.parametrize("ty,dtype,x0", [("f32", np.float32, -95.0), ("bf16", ml_dtypes.bfloat16, -91.0)])
def test_each_element_may_follow_either_semantics_on_the_gpu(ty, dtype, x0):
    """The GPU keeps a denormal input (fmod(d, d) = 0, as the keeping oracle) while its logistic
    loses a denormal result (fmod(0, 0) NaN, as the flushing semantics): the seed-65 case on an
    H200, neither reference whole. Element by element each is excused; a wrong normal element
    still is not. Seed 65's large graph was this in bf16 (57 elements differed from the one
    reference, 275 from the other, none from both), whose arrays are numpy kind "V" and were
    not judged element by element, so the case stayed a mismatch."""
    text = f"""HloModule m
ENTRY e {{
  x = {ty}[4] parameter(0)
  y = {ty}[4] parameter(1)
  l = {ty}[4] logistic(x)
  a = {ty}[4] remainder(l, l)
  b = {ty}[4] remainder(y, y)
  ROOT r = ({ty}[4], {ty}[4]) tuple(a, b)
}}
"""
    module = hlofuse.parse_hlo(text)
    x = np.array([x0, 0.5, -2.0, 3.0], dtype)  # logistic(x0): a denormal when kept
    y = np.array([1e-40, 2.5, -3e-39, 1.0], dtype)  # denormal divisors kept on the GPU
    keep = [np.asarray(o) for o in evaluate(module, [x, y], denormals="keep")]
    flush = [np.asarray(o) for o in evaluate(module, [x, y])]
    assert np.isnan(np.asarray(flush[0], np.float32)[0]) and not np.isnan(np.asarray(keep[0], np.float32)[0])
    gpu = [flush[0], keep[1]]  # logistic lost its denormal, the inputs' denormals were kept
    reference = _oracle(module, [x, y], "gpu", (None, None))
    assert _against_interpreter(module, [x, y], gpu, "gpu", 0, reference)["outcome"] == oc.DENORMAL
    wrong = [flush[0], keep[1].copy()]
    wrong[1][1] = dtype(1.0)  # fmod(2.5, 2.5) is 0
    assert _against_interpreter(module, [x, y], wrong, "gpu", 0, reference)["outcome"] == oc.MISMATCH


def test_a_ptxas_miscompile_is_kept_apart_with_its_reproducer(tmp_path):
    """A real-GPU mismatch that ptxas -O0 does not make is the assembler's: counted apart from
    the failures (the run's exit status), listed with its reproducer for the vendor."""
    from tests.fuzz.report import Summary, record

    summary = Summary()
    case = {"payload": {"text": LOGISTIC_REMAINDER}}
    result = {"outcome": oc.PTXAS_MISCOMPILE, "signature": "gpu vs interpreter: reduce -> int32",
              "message": "out0: int32[1] MISMATCH"}
    record(summary, "graphs", case, result, tmp_path, lambda c: [np.zeros(6, np.float32)])
    assert summary.failure_count() == 0
    assert oc.PTXAS_MISCOMPILE not in oc.FAILURES
    kept = list(tmp_path.rglob("case.hlo"))
    assert len(kept) == 1 and kept[0].read_text() == LOGISTIC_REMAINDER
    text = summary.render()
    assert "ptxas miscompile [graphs] gpu vs interpreter: reduce -> int32" in text
    assert str(kept[0].parent) in text
    assert "0 distinct failure signatures" in text


def test_a_bool_read_off_a_denormal_may_follow_either_semantics_on_the_gpu():
    """Seed 85 on an H200: convert(1e-40) to pred was false on the GPU (the flushing semantics)
    and true in the keeping oracle, beside a float output that kept its denormals, so neither
    reference was whole. A bool element is excused where it is exactly the flushing semantics'
    answer; one that neither semantics gives is still a mismatch."""
    text = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  p = pred[4] convert(x)
  r = f32[4] remainder(y, y)
  ROOT t = (pred[4], f32[4]) tuple(p, r)
}
"""
    module = hlofuse.parse_hlo(text)
    x = np.array([1e-40, 0.0, 2.0, -3e-39], np.float32)
    y = np.array([1e-40, 2.5, -3e-39, 1.0], np.float32)
    keep = [np.asarray(o) for o in evaluate(module, [x, y], denormals="keep")]
    flush = [np.asarray(o) for o in evaluate(module, [x, y])]
    assert keep[0][0] and not flush[0][0]  # the denormal is true when kept, false when flushed
    gpu = [flush[0], keep[1]]
    reference = _oracle(module, [x, y], "gpu", (None, None))
    assert _against_interpreter(module, [x, y], gpu, "gpu", 0, reference)["outcome"] == oc.DENORMAL
    wrong = [flush[0].copy(), keep[1]]
    wrong[0][2] = False  # convert(2.0) is true in both semantics
    assert _against_interpreter(module, [x, y], wrong, "gpu", 0, reference)["outcome"] == oc.MISMATCH
