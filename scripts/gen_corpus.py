"""Regenerate the JAX corpus: testdata/jax/NAME.hlo and NAME.opt.hlo for every program.

Usage: python scripts/gen_corpus.py [NAME ...]

NAME.hlo is `jax.jit(fn).lower(*args).as_text(dialect="hlo")` (HLO before optimization) and
NAME.opt.hlo is `.compile().as_text()` (XLA's optimized CPU module with fusions). Running the
script twice gives the same files: arguments come from fixed seeds and the files hold no
timestamps or addresses.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", False)

from jax_programs import PROGRAMS  # noqa: E402

OUT = ROOT / "testdata" / "jax"


def lower(fn, args) -> tuple[str, str]:
    """HLO text before and after XLA's optimization for `fn` at `args`."""
    lowered = jax.jit(fn).lower(*args)
    # Optimized modules list source files; keep them relative so the files do not depend on
    # where the checkout lives.
    opt = lowered.compile().as_text().replace(f'"{ROOT}/', '"')
    return lowered.as_text(dialect="hlo"), opt


def main(names: list[str]) -> int:
    """Write the files of the named programs (all programs when `names` is empty)."""
    OUT.mkdir(parents=True, exist_ok=True)
    todo = [p for p in PROGRAMS if not names or p.name in names]
    (OUT / "JAX_VERSION").write_text(jax.__version__ + "\n")
    for p in todo:
        hlo, opt = lower(p.fn, p.make_args())
        (OUT / f"{p.name}.hlo").write_text(hlo)
        (OUT / f"{p.name}.opt.hlo").write_text(opt)
        print(f"{p.name}: {len(hlo.splitlines())} lines, optimized {len(opt.splitlines())} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
