"""Which LLVM this process compiles with, and whether it was built with assertions.

llvmlite's PyPI wheels link an LLVM built with assertions (``llvm_assertions_state == "on"``),
which costs about a fifth of a cold compile's CPU time (docs/compile_time.md, "How XLA:CPU runs
LLVM, and what llvmlite's assertions cost"); ``make install`` (and ``make
install-release-llvm``, which fails where it cannot) rebuilds the installed llvmlite against a
release LLVM where the machine allows (scripts/install_release_llvm.py).

A llvmlite linked statically knows its LLVM's assertion state; one linked against a shared
libLLVM (how that script builds it) reports "unknown", so the state is then read from the
``llvm-config --assertion-mode`` of the LLVM installation whose libLLVM this process mapped.
``python -m hlofuse.llvm_build`` prints the facts as JSON (the install script's check).
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import json
import os
import shutil
import subprocess

# What --timings suggests while assertions are on (the figure: docs/compile_time.md).
RELEASE_HINT = ("`make install-release-llvm` rebuilds llvmlite against a release LLVM "
                "(cold compiles about 0.8x the CPU time; docs/compile_time.md)")


@dataclasses.dataclass(frozen=True)
class LlvmBuild:
    """The LLVM behind llvmlite in this process."""

    version: str  # LLVM's version, "22.1.0"
    llvmlite: str  # llvmlite's version
    linkage: str  # "static" (LLVM inside libllvmlite, as in the wheels) or "dynamic"
    assertions: str  # "on", "off" or "unknown"
    library: str | None = None  # the shared libLLVM mapped, for a dynamic build
    llvm_config: str | None = None  # the llvm-config that told the assertion state, if one did

    def describe(self) -> str:
        """One line: version, assertion state and where the state comes from."""
        where = f", {self.library} per {self.llvm_config}" if self.llvm_config else ""
        return (f"LLVM {self.version}, assertions {self.assertions} "
                f"(llvmlite {self.llvmlite}, {self.linkage}ally linked{where})")


@functools.cache
def llvm_build() -> LlvmBuild:
    """The LLVM this process's llvmlite runs (imports llvmlite; cached)."""
    import llvmlite
    from llvmlite import binding

    version = ".".join(str(part) for part in binding.llvm_version_info)
    linkage = binding.config.build_llvm_linkage_type
    assertions = binding.config.llvm_assertions_state
    library = config = None
    if linkage == "dynamic":
        library = mapped_libllvm()
        if assertions == "unknown" and library is not None:
            config = llvm_config_for(library, binding.llvm_version_info[0])
            if config is not None:
                assertions = _run(config, "--assertion-mode").lower()  # "ON" / "OFF"
    return LlvmBuild(version, llvmlite.__version__, linkage, assertions, library, config)


def mapped_libllvm() -> str | None:
    """The real path of the shared libLLVM mapped into this process (Linux's /proc/self/maps),
    or None where there is none or no /proc."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if os.path.basename(path).startswith("libLLVM") and ".so" in path:
                    return os.path.realpath(path)
    except OSError:
        pass
    return None


def llvm_config_candidates(major: int) -> list[str]:
    """llvm-config programs that may belong to an LLVM `major` installation, most specific
    first: $LLVM_CONFIG, llvm-config-NN on PATH, Debian/Ubuntu's /usr/lib/llvm-NN, then the
    unversioned llvm-config on PATH."""
    found = [os.environ.get("LLVM_CONFIG"), shutil.which(f"llvm-config-{major}"),
             f"/usr/lib/llvm-{major}/bin/llvm-config", shutil.which("llvm-config")]
    unique: list[str] = []
    for path in found:
        if path and os.access(path, os.X_OK) and path not in unique:
            unique.append(path)
    return unique


def llvm_config_for(library: str, major: int) -> str | None:
    """The llvm-config of the installation `library` (a real path) belongs to: the one whose
    --libdir holds a libLLVM resolving to the same file. None when no candidate owns it (then
    nothing vouches for its assertion state)."""
    for config in llvm_config_candidates(major):
        libdir = _run(config, "--libdir")
        libraries = glob.glob(os.path.join(libdir, "libLLVM*.so*")) if libdir else []
        if any(os.path.realpath(path) == library for path in libraries):
            return config
    return None


def _run(config: str, flag: str) -> str:
    """`config flag`'s output, stripped; "" when it fails."""
    try:
        done = subprocess.run([config, flag], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip()


def main() -> None:
    """Print this process's LlvmBuild as JSON (scripts/install_release_llvm.py reads it)."""
    print(json.dumps(dataclasses.asdict(llvm_build())))


if __name__ == "__main__":
    main()
