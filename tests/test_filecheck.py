"""The FileCheck matcher: every directive both passing and failing, with LLVM's semantics."""
from __future__ import annotations

import pytest

from filecheck import FileCheckError, check, parse_checks

OUT = """\
HloModule m
ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %e = f32[4]{0} exponential(f32[4]{0} %p)
  ROOT %a = f32[4]{0} add(f32[4]{0} %e, f32[4]{0} %p)
}

%fused_computation (x: f32[2]) -> f32[2] {
  %x = f32[2]{0} parameter(0)
  ROOT %n = f32[2]{0} negate(f32[2]{0} %x)
}
"""


def passes(checks: str, out: str = OUT) -> None:
    check(out, checks)


def fails(checks: str, needle: str, out: str = OUT) -> str:
    with pytest.raises(FileCheckError) as info:
        check(out, checks)
    msg = str(info.value)
    assert needle in msg, msg
    return msg


# ---- CHECK --------------------------------------------------------------------------------------

def test_check_in_order():
    passes("// CHECK: parameter(0)\n// CHECK: exponential\n// CHECK: add(")


def test_check_out_of_order_fails():
    msg = fails("// CHECK: add(\n// CHECK: exponential", "expected string not found")
    # the failing directive, the scan position and the output are in the message
    assert "<checks>:2" in msg and "scanning from here" in msg and "| HloModule m" in msg


def test_check_missing_fails_and_suggests():
    msg = fails("// CHECK: %e = f32[4]{0} exponentiall(", "expected string not found")
    assert "possible intended match" in msg and "<output>:4" in msg


def test_whitespace_runs_are_flexible():
    passes("// CHECK: ROOT   %a =    f32[4]{0}")
    fails("// CHECK: ROOT%a", "expected string not found")


# ---- CHECK-NEXT / CHECK-SAME / CHECK-EMPTY ----------------------------------------------------

def test_next_passes():
    passes("// CHECK: %p = \n// CHECK-NEXT: %e = \n// CHECK-NEXT: ROOT %a")


def test_next_fails_when_a_line_is_skipped():
    fails("// CHECK: %p = \n// CHECK-NEXT: ROOT %a", "is not on the line after the previous match")


def test_next_fails_on_same_line():
    fails("// CHECK: %p = \n// CHECK-NEXT: parameter(0)", "is on the same line as the previous match")


def test_same_passes_and_fails():
    passes("// CHECK: %e = \n// CHECK-SAME: exponential(\n// CHECK-SAME: %p)")
    fails("// CHECK: %e = \n// CHECK-SAME: add(", "not on the same line")


def test_empty_passes_and_fails():
    passes("// CHECK: ROOT %a\n// CHECK-NEXT: {{^}}}\n// CHECK-EMPTY:\n// CHECK-NEXT: %fused_computation")
    fails("// CHECK: %p =\n// CHECK-EMPTY:", "is not empty")


def test_next_as_first_directive_is_an_error():
    fails("// CHECK-NEXT: HloModule", "without previous 'CHECK:' line")


# ---- CHECK-NOT ----------------------------------------------------------------------------------

def test_not_passes_between_matches():
    passes("// CHECK: %p =\n// CHECK-NOT: negate\n// CHECK: ROOT %a")


def test_not_fails_between_matches():
    msg = fails("// CHECK: %p =\n// CHECK-NOT: exponential\n// CHECK: ROOT %a", "excluded string found")
    assert "found here" in msg


def test_not_at_end_checks_rest_of_input():
    passes("// CHECK: ROOT %a\n// CHECK-NOT: exponential")
    fails("// CHECK: ROOT %a\n// CHECK-NOT: negate", "excluded string found")


def test_not_at_start_checks_from_beginning():
    passes("// CHECK-NOT: multiply\n// CHECK: ROOT %a")
    fails("// CHECK-NOT: HloModule\n// CHECK: ROOT %a", "excluded string found")


# ---- CHECK-DAG ----------------------------------------------------------------------------------

def test_dag_any_order():
    passes("// CHECK-DAG: %e = \n// CHECK-DAG: %p = \n// CHECK: ROOT %a")


def test_dag_fails_when_missing():
    fails("// CHECK-DAG: %e = \n// CHECK-DAG: %q = ", "expected string not found")


def test_dag_matches_may_not_overlap():
    out = "a = add\nb = mul\n"
    passes("// CHECK-DAG: add\n// CHECK-DAG: {{a|b}} =", out)  # second finds `b =` after skipping `a = add`
    fails("// CHECK-DAG: add\n// CHECK-DAG: add", "expected string not found", out)


def test_not_between_dag_groups():
    passes("// CHECK-DAG: %p =\n// CHECK-NOT: negate\n// CHECK-DAG: ROOT %a")
    fails("// CHECK-DAG: %p =\n// CHECK-NOT: exponential\n// CHECK-DAG: ROOT %a", "excluded string found")


def test_check_after_dag_continues_after_last_dag_match():
    fails("// CHECK-DAG: %e =\n// CHECK-DAG: %p =\n// CHECK: %p = ", "expected string not found")


# ---- CHECK-LABEL --------------------------------------------------------------------------------

def test_labels_bound_blocks():
    passes("// CHECK-LABEL: ENTRY %main\n// CHECK: ROOT %a\n// CHECK-LABEL: %fused_computation\n// CHECK: negate")


def test_check_may_not_cross_into_next_label_block():
    # `negate` exists, but only after the next label.
    fails("// CHECK-LABEL: ENTRY %main\n// CHECK: negate\n// CHECK-LABEL: %fused_computation", "expected string not found")


def test_missing_label_fails():
    fails("// CHECK-LABEL: %nope\n// CHECK: add", "expected string not found")


def test_next_right_after_label():
    passes("// CHECK-LABEL: %fused_computation\n// CHECK-NEXT: %x = ")
    fails("// CHECK-LABEL: %fused_computation\n// CHECK-NEXT: ROOT %n", "not on the line after")


def test_label_may_not_use_variables():
    with pytest.raises(FileCheckError, match="CHECK-LABEL may not"):
        parse_checks("// CHECK-LABEL: [[X:%[a-z]+]]")


# ---- regexes and variables ----------------------------------------------------------------------

def test_regex_blocks():
    passes("// CHECK: %{{[a-z]}} = f32[{{[0-9]+}}]{0} exponential")
    fails("// CHECK: %{{[0-9]}} = f32", "expected string not found")


def test_regex_with_braces_inside():
    passes("// CHECK: f32[{{[0-9]{1}}}]{0} negate")


def test_regex_special_chars_in_literal_are_literal():
    passes("// CHECK: f32[4]{0} add(")
    fails("// CHECK: f32.4", "expected string not found")


def test_variables_capture_and_use():
    passes("// CHECK: %[[E:[a-z]+]] = f32[4]{0} exponential\n// CHECK: add(f32[4]{0} %[[E]],")
    fails("// CHECK: %[[E:[a-z]+]] = f32[4]{0} parameter\n// CHECK: add(f32[4]{0} %[[E]],", "expected string not found")


def test_variable_used_on_its_own_line():
    passes("// CHECK: add(f32[4]{0} %[[X:[a-z]]], f32[4]{0} %[[Y:[a-z]]])")
    fails("// CHECK: add(f32[4]{0} %[[X:[a-z]]], f32[4]{0} %[[X]])", "expected string not found")


def test_variable_with_brackets_in_regex():
    # As in LLVM, a literal `[` right before `[[` must be written as a regex: `{{\\[}}`.
    passes("// CHECK: %[[V:[a-z]+]] = f32{{\\[}}[[N:[0-9]+]]]{0} exponential\n// CHECK: ROOT %a = f32{{\\[}}[[N]]]")
    passes("// CHECK: %[[V:[a-z]+]] = f32[4]{{[{]}}[[L:[0-9,]+]]}")


def test_undefined_variable_is_an_error():
    fails("// CHECK: [[NOPE]]", "use of undefined variable 'NOPE'")


def test_bad_regex_is_an_error():
    fails("// CHECK: {{[a-}}", "invalid regex")


def test_unclosed_braces_are_an_error():
    fails("// CHECK: {{abc", "without matching")


# ---- parsing ------------------------------------------------------------------------------------

def test_parse_checks_positions_and_kinds():
    text = "x\n// CHECK: a\n  // CHECK-NEXT:   b  \nfoo // CHECK-NOT: c\n// NOTCHECK: z\n// MYCHECK: y\n"
    ds = parse_checks(text, "f.hlo", first_line=10)
    assert [(d.kind, d.pattern, d.line) for d in ds] == [
        ("CHECK", "a", 11), ("CHECK-NEXT", "b", 12), ("CHECK-NOT", "c", 13)]
    assert ds[0].where() == "f.hlo:11"


def test_empty_pattern_is_an_error():
    with pytest.raises(FileCheckError, match="empty check string"):
        parse_checks("// CHECK:   \n")


def test_no_checks_is_an_error():
    fails("nothing here", "no check strings found")
