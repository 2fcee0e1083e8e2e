"""Which LLVM hlofuse runs (hlofuse/llvm_build.py, the `llvm` line of `compile --timings`) and
the opt-in rebuild of llvmlite against a release LLVM (scripts/install_release_llvm.py), tested
with fake llvm-config programs: no build runs here."""
from __future__ import annotations

import importlib.util
import os
import re
import zipfile
from pathlib import Path

import pytest
from llvmlite import binding

import hlofuse.llvm_build as llvm_build_module
from hlofuse.cli import main
from hlofuse.llvm_build import llvm_build, llvm_config_for
from repo_paths import REPO

SOFTMAX = str(Path(REPO) / "examples" / "softmax.hlo")


def _script():
    path = Path(REPO) / "scripts" / "install_release_llvm.py"
    spec = importlib.util.spec_from_file_location("install_release_llvm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_llvm_config(directory: Path, name: str, *, version: str = "99.1.0", mode: str = "OFF",
                     libdir: Path | None = None, cmakedir: Path | None = None, shared: str = "shared") -> str:
    """An executable answering llvm-config's flags as an LLVM installation would."""
    path = directory / name
    answers = {"--version": version, "--assertion-mode": mode, "--libdir": libdir or directory / "nolib",
               "--cmakedir": cmakedir or directory / "nocmake", "--shared-mode": shared}
    cases = "".join(f'  {flag}) echo "{answer}";;\n' for flag, answer in answers.items())
    path.write_text(f'#!/bin/sh\ncase "$1" in\n{cases}  *) exit 1;;\nesac\n')
    path.chmod(0o755)
    return str(path)


def llvm_prefix(directory: Path) -> tuple[Path, Path, str]:
    """An installation's lib/ with a libLLVM (and the soname link), its CMake files, and the
    library's real path."""
    libdir, cmakedir = directory / "lib", directory / "lib" / "cmake" / "llvm"
    cmakedir.mkdir(parents=True)
    (cmakedir / "LLVMConfig.cmake").write_text("set(LLVM_ENABLE_ASSERTIONS OFF)\n")
    (libdir / "libLLVM.so.99.1").write_bytes(b"\x7fELF")
    (libdir / "libLLVM-99.so").symlink_to("libLLVM.so.99.1")
    return libdir, cmakedir, os.path.realpath(libdir / "libLLVM.so.99.1")


def test_timings_name_the_llvm_and_whether_its_assertions_are_on(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HLOFUSE_MODULE_CACHE", "0")
    assert main(["compile", SOFTMAX, "--timings", "--no-cache", "-o", str(tmp_path / "out.hlo")]) == 0
    err = capsys.readouterr().err
    line = re.search(r"^llvm +LLVM (\S+), assertions (on|off|unknown) \(llvmlite (\S+), (static|dynamic)ally",
                     err, re.M)
    assert line, err
    assert line[1] == ".".join(map(str, binding.llvm_version_info))
    assert line[3] == importlib.import_module("llvmlite").__version__
    assert line[4] == binding.config.build_llvm_linkage_type
    if line[4] == "static":  # llvmlite knows its own LLVM's state
        assert line[2] == binding.config.llvm_assertions_state
    assert ("make install-release-llvm" in err) == (line[2] != "off")


@pytest.mark.parametrize("mode, expected", [("OFF", "off"), ("ON", "on")])
def test_a_dynamic_build_reads_the_state_of_the_libllvm_it_mapped(tmp_path, monkeypatch, mode, expected):
    libdir, _, library = llvm_prefix(tmp_path)
    monkeypatch.setenv("LLVM_CONFIG", fake_llvm_config(tmp_path, "llvm-config", mode=mode, libdir=libdir))
    monkeypatch.setattr(binding.config, "build_llvm_linkage_type", "dynamic")
    monkeypatch.setattr(binding.config, "llvm_assertions_state", "unknown")
    monkeypatch.setattr(llvm_build_module, "mapped_libllvm", lambda: library)
    build = llvm_build.__wrapped__()
    assert (build.assertions, build.library, build.llvm_config) == (expected, library, os.environ["LLVM_CONFIG"])
    assert f"assertions {expected}" in build.describe() and library in build.describe()


def test_an_llvm_config_of_another_installation_vouches_for_nothing(tmp_path, monkeypatch):
    _, _, library = llvm_prefix(tmp_path / "mapped")
    other, _, _ = llvm_prefix(tmp_path / "other")  # same file names, a different library
    monkeypatch.setenv("LLVM_CONFIG", fake_llvm_config(tmp_path, "llvm-config", libdir=other))
    monkeypatch.setattr(llvm_build_module, "llvm_config_candidates", lambda major: [os.environ["LLVM_CONFIG"]])
    assert llvm_config_for(library, 99) is None
    monkeypatch.setattr(binding.config, "build_llvm_linkage_type", "dynamic")
    monkeypatch.setattr(binding.config, "llvm_assertions_state", "unknown")
    monkeypatch.setattr(llvm_build_module, "mapped_libllvm", lambda: library)
    assert llvm_build.__wrapped__().assertions == "unknown"


def test_the_script_takes_the_first_release_llvm_of_its_major_with_shared_library_and_cmake(tmp_path, monkeypatch):
    script = _script()
    libdir, cmakedir, _ = llvm_prefix(tmp_path)
    configs = [fake_llvm_config(tmp_path, "asserts", mode="ON", libdir=libdir, cmakedir=cmakedir),
               fake_llvm_config(tmp_path, "other-major", version="98.1.0", libdir=libdir, cmakedir=cmakedir),
               fake_llvm_config(tmp_path, "static-only", shared="static", libdir=libdir, cmakedir=cmakedir),
               fake_llvm_config(tmp_path, "no-dev-files", libdir=libdir),
               fake_llvm_config(tmp_path, "release", libdir=libdir, cmakedir=cmakedir)]
    monkeypatch.setattr(llvm_build_module, "llvm_config_candidates", lambda major: configs)
    assert script.release_llvm(99) == (configs[-1], str(cmakedir))
    monkeypatch.setattr(llvm_build_module, "llvm_config_candidates", lambda major: configs[:-1])
    with pytest.raises(script.Stop, match=r"llvm-99-dev.*LLVM_CONFIG"):
        script.find_or_install_llvm(99, allow_apt=False)


def test_nothing_is_built_when_the_assertions_are_already_off(monkeypatch):
    script = _script()
    monkeypatch.setattr(script, "installed_llvmlite", lambda: ("0.50.0", 22))
    monkeypatch.setattr(script, "check", lambda python, pythonpath=None: {"assertions": "off", "version": "22.1.8"})
    monkeypatch.setattr(script, "build_wheel", lambda *a: pytest.fail("built although nothing was to do"))
    script.install(None, allow_apt=False)


def test_a_built_wheel_that_fails_its_check_is_never_installed(tmp_path, monkeypatch):
    script = _script()
    calls, workdirs = [], []

    def build_wheel(version, cmakedir, sdist, work):
        workdirs.append(work)
        wheel = work / "llvmlite-0.50.0-cp311-cp311-linux_x86_64.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr("llvmlite/__init__.py", "")
        return wheel

    def check(python, pythonpath=None):  # the wheel on the path still has assertions
        return {"llvmlite": "0.50.0", "version": "22.1.8", "assertions": "on"}

    monkeypatch.setattr(script, "installed_llvmlite", lambda: ("0.50.0", 22))
    monkeypatch.setattr(script, "check", check)
    monkeypatch.setattr(script, "find_or_install_llvm", lambda major, allow_apt: ("llvm-config-22", str(tmp_path)))
    monkeypatch.setattr(script, "require_tools", lambda: None)
    monkeypatch.setattr(script, "build_wheel", build_wheel)
    monkeypatch.setattr(script.subprocess, "run", lambda *a, **k: calls.append(a) or pytest.fail(f"ran {a}"))
    monkeypatch.setattr(script, "_config_output", lambda *a: "22.1.8")
    assert script.main(["--no-apt"]) == 1
    assert calls == [] and not workdirs[0].exists()


def test_verify_wants_the_same_llvmlite_on_the_same_major_without_assertions():
    script = _script()
    good = {"llvmlite": "0.50.0", "version": "22.1.8", "assertions": "off"}
    script.verify(good, "0.50.0", 22, "here")
    for bad in ({"llvmlite": "0.49.0"}, {"version": "21.1.0"}, {"assertions": "unknown"}, {"assertions": "on"}):
        with pytest.raises(script.Stop):
            script.verify({**good, **bad}, "0.50.0", 22, "here")


@pytest.mark.parametrize("optional, code", [(False, 1), (True, 0)])
def test_optional_keeps_the_wheel_where_the_rebuild_cannot_be_done(monkeypatch, capsys, optional, code):
    """`make install` runs the script with --optional: a machine without a release LLVM (or
    cmake, or root for apt-get) keeps the PyPI wheel with a warning instead of failing the install;
    `make install-release-llvm` (no --optional) still fails and says why."""
    script = _script()

    def cannot(sdist, allow_apt):
        raise script.Stop("no LLVM 22 built without assertions was found")

    monkeypatch.setattr(script, "install", cannot)
    assert script.main(["--optional"] if optional else []) == code
    err = capsys.readouterr().err
    assert "stopped: no LLVM 22" in err
    assert ("keeping llvmlite's PyPI wheel" in err) == optional
