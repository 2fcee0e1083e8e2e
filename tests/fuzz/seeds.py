"""Seed modules for the malformed-input fuzzer: every valid module under testdata/ and examples/.

Golden files (testdata/hlo_text) hold several cases split by `// -----` with CHECK and RUN
comments; they are split and the comment lines dropped. A seed is kept only if it parses and
verifies, so every mutation starts from a valid module.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def split_cases(text: str) -> list[str]:
    """The modules of one file: cases split on `// -----` lines, `//` comment lines removed."""
    cases, current = [], []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == "// -----":
            cases.append(current)
            current = []
        elif not stripped.startswith("//"):
            current.append(line)
    cases.append(current)
    out = []
    for lines in cases:
        body = "\n".join(lines).strip()
        if "HloModule" in body:
            out.append(body + "\n")
    return out


def seed_files(root: Path = ROOT) -> list[Path]:
    """testdata/jax/*.hlo (before and after XLA's optimization), testdata/hlo_text/<pass>/*.hlo, examples/*.hlo."""
    files = sorted((root / "testdata" / "jax").glob("*.hlo"))
    files += sorted((root / "testdata" / "hlo_text").glob("**/*.hlo"))
    files += sorted((root / "examples").glob("*.hlo"))
    return files


def load_seeds(root: Path = ROOT, max_chars: int = 40_000) -> list[tuple[str, str]]:
    """(label, text) of every valid seed module no longer than `max_chars`, in a stable order."""
    from hlofuse import HloError, parse_hlo
    from hlofuse.hlo.verifier import verify

    seeds = []
    for path in seed_files(root):
        for k, text in enumerate(split_cases(path.read_text())):
            if len(text) > max_chars:
                continue
            try:
                verify(parse_hlo(text))
            except HloError:
                continue
            seeds.append((f"{path.relative_to(root)}#{k}", text))
    return seeds
