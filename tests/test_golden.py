"""Golden-text tests: every case of testdata/hlo_text/*.hlo, run and matched by FileCheck."""
from __future__ import annotations

import pytest

from filecheck import FileCheckError, check
from golden_harness import Case, generate_checks, golden_files, parse_run, rewrite_checks, split_cases


def _cases() -> list[Case]:
    cases: list[Case] = []
    for path in golden_files():
        with open(path) as f:
            cases.extend(split_cases(f.read(), path))
    return cases


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_golden(case: Case):
    from golden_harness import run_case

    checks = case.checks()
    assert checks, f"{case.id}: a golden case needs CHECK lines (scripts/update_golden.py writes them)"
    output = run_case(case)
    check(output, checks, case.filename)


def test_there_are_golden_files_for_the_basic_passes():
    names = [c.id for c in CASES]
    for prefix in ("dce_", "cse_", "simplify_"):
        assert any(n.startswith(prefix) for n in names), prefix


# ---- the harness itself -------------------------------------------------------------------------

SAMPLE = """\
// RUN: passes=dce
HloModule m

ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %unused = f32[4]{0} negate(f32[4]{0} %p)
  ROOT %e = f32[4]{0} exponential(f32[4]{0} %p)
}
// CHECK-NOT: negate

// -----

// RUN: passes=simplifier,dce target=gpu max_fold_elements=8
HloModule n

ENTRY %main (p: f32[2]) -> f32[2] {
  ROOT %p = f32[2]{0} parameter(0)
}
// CHECK: parameter(0)
"""


def test_split_cases_and_run_specs():
    cases = split_cases(SAMPLE, "sample.hlo")
    assert [c.id for c in cases] == ["sample.hlo:0", "sample.hlo:1"]
    assert cases[0].options == {"passes": "dce"}
    assert cases[1].options == {"passes": "simplifier,dce", "target": "gpu", "max_fold_elements": 8}
    assert cases[1].first_line == 12  # the blank line after the separator
    # parse errors and check failures point at file lines
    assert cases[1].module_text().splitlines()[13] == "HloModule n"  # file line 14
    assert [d.line for d in cases[0].checks()] == [9]


def test_default_run_is_the_fusion_pipeline():
    assert parse_run("") == {"pipeline": "fusion"}
    assert parse_run("target=gpu") == {"pipeline": "fusion", "target": "gpu"}
    with pytest.raises(ValueError):
        parse_run("passes")


def test_generated_checks_match_their_own_output_and_catch_changes():
    from golden_harness import run_case

    case = split_cases(SAMPLE, "sample.hlo")[0]
    output = run_case(case)
    checks = "\n".join(generate_checks(output))
    assert "// CHECK-LABEL: {{^}}ENTRY %main (" in checks
    assert "[[E:%[^ ]+]] = f32[4]{0} exponential(f32[4]{0} [[P]])" in checks
    check(output, checks)
    # renaming instructions does not break the checks; changing an opcode does
    check(output.replace("%e", "%exp.1").replace("%p", "%arg"), checks)
    with pytest.raises(FileCheckError):
        check(output.replace("exponential", "log"), checks)


def test_generated_checks_escape_braces_and_brackets():
    output = ("ENTRY %main (p: s32[2,2]) -> s32[2,2] {\n"
              "  ROOT %c = s32[2,2]{1,0} constant({{1, 2}, {3, 4}})\n"
              "}\n")
    checks = "\n".join(generate_checks(output))
    check(output, checks)
    with pytest.raises(FileCheckError):
        check(output.replace("{3, 4}", "{3, 5}"), checks)


def test_rewrite_checks_is_idempotent():
    once = rewrite_checks(SAMPLE, "sample.hlo")
    assert "// CHECK-NOT: negate" not in once  # old checks replaced
    assert once.count("// -----") == 1 and "// RUN: passes=dce" in once
    assert rewrite_checks(once, "sample.hlo") == once
    for case in split_cases(once, "sample.hlo"):
        from golden_harness import run_case

        check(run_case(case), case.checks(), case.filename)


def test_parse_errors_point_at_the_golden_file_line():
    from golden_harness import run_case
    from hlofuse.hlo.errors import HloParseError

    text = SAMPLE + "\n// -----\n\n// RUN: passes=dce\nHloModule bad\n\nENTRY %main () -> f32[] {\n  ROOT %c = f32[] bogus-op()\n}\n"
    case = split_cases(text, "bad.hlo")[2]
    with pytest.raises(HloParseError) as info:
        run_case(case)
    assert info.value.line == text.splitlines().index("  ROOT %c = f32[] bogus-op()") + 1
    assert "bad.hlo" in str(info.value)
