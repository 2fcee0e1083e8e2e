"""Replace the venv's llvmlite wheel by the same llvmlite version built against a release
(assertion-free) LLVM: `make install-release-llvm`, or `VENV/bin/python
scripts/install_release_llvm.py`.

Why: llvmlite's PyPI wheels link an LLVM built with assertions, about a fifth of a cold
compile's CPU time (docs/compile_time.md). `make install` runs this with `--optional` (keep the
wheel, with a warning, wherever it cannot be done); `make install LLVM=wheel` skips it.

Steps, each stopping with a message that says what to do when it cannot go on:
1. the llvmlite installed in this interpreter's environment and the LLVM major it wraps;
   nothing to do when hlofuse.llvm_build already reports its assertions off;
2. an LLVM of that major built without assertions: $LLVM_CONFIG, llvm-config-NN,
   /usr/lib/llvm-NN (`--assertion-mode` OFF, shared libLLVM, CMake files); where there is
   none, as root with apt-get, `apt-get install llvm-NN-dev` (--no-apt to refuse), else stop
   naming that package;
3. `pip wheel` of that llvmlite version from its sdist (--sdist FILE for one already
   downloaded), LLVMLITE_SHARED=1 and CMAKE_ARGS=-DLLVM_DIR=..., in a temporary directory;
4. the wheel checked before it is installed (unpacked on PYTHONPATH: its version, its LLVM
   major, assertions off, a module compiled and run against the interpreter);
5. `pip install --no-deps --force-reinstall` of it (same version: numba's pin still holds),
   and the same check on the installed package; if that fails, the PyPI wheel is put back.
The temporary directory is removed in every case; nothing is installed before step 5.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Run in a fresh interpreter (optionally with the built wheel first on PYTHONPATH): prints the
# LLVM facts as JSON after compiling examples/softmax.hlo for the CPU and comparing its result
# with the numpy interpreter's.
_CHECK = """
import dataclasses, json, sys
import numpy as np
import hlofuse
from hlofuse.llvm_build import llvm_build
from hlofuse.runtime.interpreter import evaluate
from hlofuse.runtime.io import random_inputs
module = hlofuse.load(sys.argv[1])
inputs = random_inputs(module)
got = hlofuse.compile(module, target="cpu", cache=False)(*inputs)
for g, w in zip(got, evaluate(module, inputs), strict=True):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)
print(json.dumps(dataclasses.asdict(llvm_build())))
"""


class Stop(Exception):
    """A reason to stop, meant for the user (no traceback)."""


def log(message: str) -> None:
    """Progress on standard error, prefixed so it stands out from pip's and cmake's output."""
    print(f"install-release-llvm: {message}", file=sys.stderr, flush=True)


def installed_llvmlite() -> tuple[str, int]:
    """(llvmlite version, LLVM major) of this interpreter's llvmlite."""
    try:
        import llvmlite
        from llvmlite import binding
    except ImportError as e:
        raise Stop(f"no llvmlite in {sys.prefix} ({e}); install hlofuse first (`make install`)") from e
    return llvmlite.__version__, binding.llvm_version_info[0]


def check(python: str, pythonpath: str | None = None) -> dict:
    """The LLVM facts of a fresh `python` process after a verified CPU compile (see _CHECK);
    Stop when the compile or the comparison fails."""
    env = dict(os.environ)  # the checkout's hlofuse, after the wheel under test
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, str(REPO), env.get("PYTHONPATH")) if p)
    done = subprocess.run([python, "-c", _CHECK, str(REPO / "examples" / "softmax.hlo")], env=env,
                          capture_output=True, text=True, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise Stop(f"the check compile failed:\n{done.stdout}{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _config_output(config: str, *flags: str) -> str:
    done = subprocess.run([config, *flags], capture_output=True, text=True, timeout=60)
    return done.stdout.strip() if done.returncode == 0 else ""


def release_llvm(major: int) -> tuple[str, str] | None:
    """(llvm-config, CMake directory) of an LLVM `major` without assertions that has a shared
    libLLVM and CMake files, or None."""
    from hlofuse.llvm_build import llvm_config_candidates

    for config in llvm_config_candidates(major):
        version = _config_output(config, "--version")
        if not version.startswith(f"{major}."):
            continue
        mode = _config_output(config, "--assertion-mode")
        cmakedir = _config_output(config, "--cmakedir")
        shared = _config_output(config, "--shared-mode")
        if mode != "OFF":
            log(f"{config} ({version}): assertions {mode or 'unknown'}, not used")
        elif shared != "shared" or not (Path(cmakedir) / "LLVMConfig.cmake").is_file():
            log(f"{config} ({version}): no shared libLLVM or no CMake files (the -dev package), not used")
        else:
            return config, cmakedir
    return None


def find_or_install_llvm(major: int, allow_apt: bool) -> tuple[str, str]:
    """release_llvm(major), installing llvm-NN-dev with apt-get where that is possible."""
    found = release_llvm(major)
    if found:
        return found
    package = f"llvm-{major}-dev"
    advice = (f"no LLVM {major} built without assertions was found. Install {package} "
              f"(Debian/Ubuntu: `apt-get install {package}`; apt.llvm.org has it where the "
              f"distribution does not) or set LLVM_CONFIG to the llvm-config of such an LLVM {major} "
              f"(built with a shared libLLVM and -DLLVM_ENABLE_ASSERTIONS=OFF), then run this again")
    if not allow_apt or shutil.which("apt-get") is None or os.geteuid() != 0:
        raise Stop(advice)
    log(f"apt-get install -y {package}")
    if subprocess.run(["apt-get", "install", "-y", package]).returncode != 0:
        raise Stop(f"`apt-get install {package}` failed. {advice}")
    found = release_llvm(major)
    if not found:
        raise Stop(advice)
    return found


def require_tools() -> None:
    """cmake and a C++ compiler, which llvmlite's build needs."""
    missing = [tool for tool in ("cmake", "c++") if shutil.which(tool) is None]
    if missing:
        raise Stop(f"{' and '.join(missing)} not found; install them (Debian/Ubuntu: "
                   f"`apt-get install cmake g++`) and run this again")


def build_wheel(version: str, cmakedir: str, sdist: str | None, work: Path) -> Path:
    """pip wheel of llvmlite `version` from its sdist against the LLVM in `cmakedir`."""
    env = dict(os.environ, LLVMLITE_SHARED="1", CMAKE_ARGS=f"-DLLVM_DIR={cmakedir}")
    source = sdist or f"llvmlite=={version}"
    out = work / "wheel"
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--no-binary", "llvmlite",
               "-w", str(out), source]
    log(f"building llvmlite {version} against {cmakedir} (a few minutes): {' '.join(command)}")
    if subprocess.run(command, env=env, cwd=work).returncode != 0:
        raise Stop(f"building llvmlite {version} failed (output above); nothing was installed")
    wheels = sorted(out.glob("llvmlite-*.whl"))
    if len(wheels) != 1:
        raise Stop(f"expected one llvmlite wheel in {out}, found {[w.name for w in wheels]}")
    return wheels[0]


def verify(facts: dict, version: str, major: int, where: str) -> None:
    """Stop unless `facts` (from check) show llvmlite `version` on an LLVM `major` without
    assertions."""
    if facts["llvmlite"] != version or not facts["version"].startswith(f"{major}."):
        raise Stop(f"{where}: llvmlite {facts['llvmlite']} on LLVM {facts['version']}, "
                   f"expected llvmlite {version} on LLVM {major}")
    if facts["assertions"] != "off":
        raise Stop(f"{where}: LLVM assertions {facts['assertions']} ({facts}), expected off")


def restore_wheel(version: str) -> None:
    """Put the PyPI wheel of llvmlite `version` back (after a failed check of the build)."""
    log(f"putting the PyPI wheel of llvmlite {version} back")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--force-reinstall", "--only-binary",
                    "llvmlite", f"llvmlite=={version}"])


def install(sdist: str | None, allow_apt: bool) -> None:
    """Everything the module docstring lists."""
    start = time.monotonic()
    version, major = installed_llvmlite()
    before = check(sys.executable)
    log(f"{sys.prefix}: llvmlite {version}, LLVM {before['version']}, assertions {before['assertions']}")
    if before["assertions"] == "off":
        log("assertions already off: nothing to do")
        return
    config, cmakedir = find_or_install_llvm(major, allow_apt)
    log(f"release LLVM: {config} ({_config_output(config, '--version')}, assertions OFF)")
    require_tools()
    with tempfile.TemporaryDirectory(prefix="hlofuse-release-llvm-") as tmp:
        work = Path(tmp)
        wheel = build_wheel(version, cmakedir, sdist, work)
        unpacked = work / "unpacked"
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(unpacked)
        verify(check(sys.executable, str(unpacked)), version, major, f"the built wheel {wheel.name}")
        log(f"installing {wheel.name} into {sys.prefix}")
        command = [sys.executable, "-m", "pip", "install", "--no-deps", "--force-reinstall", str(wheel)]
        if subprocess.run(command).returncode != 0:
            raise Stop("pip could not install the built wheel (pip leaves the previous llvmlite in place)")
    try:
        after = check(sys.executable)
        verify(after, version, major, "the installed llvmlite")
    except Stop:
        restore_wheel(version)
        raise
    log(f"done in {time.monotonic() - start:.0f} s: {after}")


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", help="build from this llvmlite sdist (.tar.gz) instead of downloading it")
    parser.add_argument("--no-apt", action="store_true", help="never run apt-get; stop and say what to install")
    parser.add_argument("--optional", action="store_true",
                        help="where it cannot be done, keep the PyPI wheel and exit 0 (what `make install` runs)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))  # hlofuse.llvm_build, also when hlofuse is not installed editable
    try:
        install(args.sdist, allow_apt=not args.no_apt)
    except Stop as e:
        log(f"stopped: {e}")
        if args.optional:
            log("keeping llvmlite's PyPI wheel (LLVM with assertions): everything works, cold compiles "
                "take about 1.25x the CPU time; `make install-release-llvm` tries again")
            return 0
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
