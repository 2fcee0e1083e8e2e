#!/usr/bin/env python3
"""Print what each golden-text case's pipeline produces, to help a person write its checks.

    scripts/update_golden.py                                   # every case under testdata/hlo_text
    scripts/update_golden.py testdata/hlo_text/dce/basic.hlo   # the cases of one file
    scripts/update_golden.py testdata/hlo_text/fusion/cpu.hlo:3
    scripts/update_golden.py --check                           # also run each case's checks

For each case it prints the case's comments (its `// Claim:` among them), its RUN spec and the
printed module after the pipeline ran. It never writes to the golden files: the CHECK lines of
a case are written by a person, state the case's claim and nothing more (fusion kind, members
of a fused computation, CHECK-NOT for what must not fuse), and are reviewed like code. See the
"Golden tests" section of docs/passes.md.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "support"))

from golden_harness import DIRECTIVE, FileCheckFailure, check_case, golden_files, run_case, split_cases  # noqa: E402


def _select(spec: str) -> tuple[str, int | None]:
    """`path` or `path:index`."""
    path, sep, index = spec.rpartition(":")
    if sep and index.isdigit():
        return path, int(index)
    return spec, None


def main(argv: list[str] | None = None) -> int:
    """Print each selected case's output; with --check, also FileCheck it (exit 1 on a failure)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="golden files, or FILE:INDEX for one case (default: all)")
    parser.add_argument("--check", action="store_true", help="also run each case's CHECK lines and report")
    args = parser.parse_args(argv)
    failed = 0
    for spec in args.files or golden_files():
        path, only = _select(spec)
        with open(path) as f:
            cases = split_cases(f.read(), path)
        for case in cases:
            if only is not None and case.index != only:
                continue
            print(f"===== {case.id}  (line {case.first_line})  RUN: {case.run or '(default)'}")
            for line in case.lines:
                if line.lstrip().startswith("//") and not DIRECTIVE.search(line) and "RUN:" not in line:
                    print(line)
            try:
                output = run_case(case)
            except Exception as e:  # report and go on with the other cases
                print(f"error: {type(e).__name__}: {e}")
                failed += 1
                continue
            print(output, end="" if output.endswith("\n") else "\n")
            if args.check:
                try:
                    check_case(case, output)
                    print("----- checks pass")
                except FileCheckFailure as e:
                    print("----- checks FAIL\n" + str(e).split("\n\ninput:", 1)[0])
                    failed += 1
            print()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
