#!/usr/bin/env python3
"""Regenerate the CHECK lines of golden-text files from the current pipeline output.

    scripts/update_golden.py                      # every testdata/hlo_text/*.hlo
    scripts/update_golden.py testdata/hlo_text/dce_basic.hlo
    scripts/update_golden.py --check              # only show what would change (exit 1 if any)

Each case gets a CHECK-LABEL per computation and a CHECK-NEXT per printed line, instruction
names captured as [[VARS]]. Nobody writes CHECK lines by hand: run this, then review the diff
(`git diff testdata/hlo_text`) as carefully as code; a golden file only proves what its
reviewed CHECK lines say. Trim CHECK lines afterwards where a case should check less.
"""
from __future__ import annotations

import argparse
import difflib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from golden_harness import golden_files, rewrite_checks  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="golden files (default: all of testdata/hlo_text)")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if a file would change")
    args = parser.parse_args(argv)
    files = args.files or golden_files()
    changed = 0
    for path in files:
        with open(path) as f:
            old = f.read()
        try:
            new = rewrite_checks(old, path)
        except Exception as e:  # report and go on with the other files
            print(f"{path}: error: {e}", file=sys.stderr)
            changed += 1
            continue
        if new == old:
            continue
        changed += 1
        if args.check:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), path, path + " (new)"))
            continue
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(new)
        os.replace(tmp, path)
        print(f"updated {path}")
    if args.check and changed:
        print(f"{changed} file(s) out of date", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
