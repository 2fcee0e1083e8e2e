"""The command line's failures: usage errors and bad files exit 2, bugs in hlofuse exit 3 with
one paragraph (the traceback only under --debug), every option has help, outputs are written
atomically with the umask's permissions and never into a folder that does not exist."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np
import pytest

from hlofuse.cli import build_parser, main
from cli_modules import SIMPLE, simple_module  # noqa: F401 (simple_module is a fixture)
from repo_paths import REPO

ROOT = str(REPO)
EXAMPLE = os.path.join(ROOT, "examples", "softmax.hlo")


@pytest.fixture
def simple_inputs(tmp_path):
    path = tmp_path / "in.npz"
    x, y = np.arange(4, dtype=np.float32), np.full(4, 2.0, np.float32)
    np.savez(path, arg0=x, arg1=y)
    return str(path), x * y + x  # the expected out0, by numpy


def run_cli(*argv: str, umask: int = -1, pre: str = "") -> subprocess.CompletedProcess:
    """Run the CLI in a subprocess (after the Python statements `pre`, e.g. a patch). A patched
    hlofuse compiles afresh: a module cache entry's key cannot see the patch (tests/conftest.py)."""
    code = f"import sys\n{pre}\nfrom hlofuse.cli import main\nsys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "HLOFUSE_MODULE_CACHE": "0"} if pre else None
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, umask=umask, env=env)


def _walk(parser: argparse.ArgumentParser, path: str = "hlofuse"):
    for action in parser._actions:
        yield path, action
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{path} {name}")


# ---- the parser ---------------------------------------------------------------------------
def test_every_option_and_argument_has_help():
    actions = list(_walk(build_parser()))
    assert len(actions) > 40
    missing = [f"{path}: {action.option_strings or action.dest}" for path, action in actions
               if not action.help or action.help == argparse.SUPPRESS]
    assert missing == []


@pytest.mark.parametrize("argv", [["run", EXAMPLE, "--repeat", "-3"], ["run", EXAMPLE, "--repeat", "0"],
                                  ["run", EXAMPLE, "--repeat", "x"], ["run", EXAMPLE, "--seed", "-1"],
                                  ["conformance", ROOT, "--jobs", "0"], ["run", EXAMPLE, "--backend", "tpu"],
                                  ["nosuchcommand"], []])
def test_bad_option_values_are_usage_errors(argv, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "error:" in captured.err and captured.out == ""


def test_help_exits_0(capsys):
    assert main(["run", "--help"]) == 0
    assert "--repeat" in capsys.readouterr().out


def test_repeat_prints_the_median_not_the_outputs(simple_module, capsys):
    assert main(["run", simple_module, "--backend", "interpreter", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "median" in out and "over 1 runs" in out and "out0" not in out


def test_repeat_minus_3_subprocess():
    proc = run_cli("run", EXAMPLE, "--repeat", "-3")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--repeat" in proc.stderr and "Traceback" not in proc.stderr


def test_debug_is_accepted_before_and_after_the_command(simple_module):
    assert main(["--debug", "fmt", simple_module]) == 0
    assert main(["fmt", simple_module, "--debug"]) == 0


# ---- conformance paths --------------------------------------------------------------------
def test_conformance_missing_path_is_an_error_naming_it(tmp_path, capsys):
    missing = str(tmp_path / "nonexistent")
    assert main(["conformance", missing]) == 2
    captured = capsys.readouterr()
    assert missing in captured.err and "passed" not in captured.out


@pytest.mark.parametrize("files", [[], ["README.txt"], ["test.hlo"]])
def test_conformance_folder_without_test_files_says_so(tmp_path, files, capsys):
    for name in files:
        (tmp_path / name).write_text("x")
    assert main(["conformance", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "no test files" in captured.err and str(tmp_path) in captured.err
    assert "passed" not in captured.out


def test_conformance_nonexistent_subprocess():
    proc = run_cli("conformance", "/nonexistent")
    assert proc.returncode == 2
    assert "/nonexistent" in proc.stderr and "0 passed" not in proc.stdout and "Traceback" not in proc.stderr


# ---- outputs --------------------------------------------------------------------------------
def _commands(module: str, inputs: str, out: str) -> dict[str, list[str]]:
    return {"run -o": ["run", module, "--backend", "interpreter", "--inputs", inputs, "-o", out],
            "run --output": ["run", module, "--backend", "interpreter", "--inputs", inputs, "--output", out],
            "compile -o": ["compile", module, "-o", out],
            "fmt -o": ["fmt", module, "-o", out]}


@pytest.mark.parametrize("command", ["run -o", "run --output", "compile -o", "fmt -o"])
def test_output_into_a_missing_folder_is_an_error_and_creates_nothing(command, tmp_path, simple_module,
                                                                      simple_inputs, capsys):
    out = tmp_path / "no" / "such" / "x"
    assert main(_commands(simple_module, simple_inputs[0], str(out))[command]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("command", ["run -o", "compile -o", "fmt -o"])
def test_output_that_is_a_folder_is_an_error(command, tmp_path, simple_module, simple_inputs, capsys):
    assert main(_commands(simple_module, simple_inputs[0], str(tmp_path))[command]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_run_has_short_o(tmp_path, simple_module, simple_inputs):
    inputs, expected = simple_inputs
    out = tmp_path / "out.npz"
    assert main(["run", simple_module, "--backend", "cpu", "--inputs", inputs, "-o", str(out)]) == 0
    with np.load(out) as data:
        np.testing.assert_array_equal(data["out0"], expected)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002, 0o027])
@pytest.mark.parametrize("command", ["run -o", "fmt -o"])
def test_output_files_honour_the_umask(command, umask, tmp_path, simple_module, simple_inputs):
    out = tmp_path / "out.file"
    proc = run_cli(*_commands(simple_module, simple_inputs[0], str(out))[command], umask=umask)
    assert proc.returncode == 0, proc.stderr
    assert os.stat(out).st_mode & 0o777 == 0o666 & ~umask
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


def test_replacing_a_file_keeps_its_permissions(tmp_path, simple_module):
    out = tmp_path / "out.hlo"
    out.write_text("old")
    os.chmod(out, 0o640)
    assert main(["fmt", simple_module, "-o", str(out)]) == 0
    assert os.stat(out).st_mode & 0o777 == 0o640 and "ENTRY" in out.read_text()


def test_failed_write_leaves_neither_file_nor_temporary(tmp_path):
    from hlofuse.files import write_atomically

    def fail(f):
        f.write("partial")
        raise RuntimeError("stopped halfway")

    with pytest.raises(RuntimeError):
        write_atomically(str(tmp_path / "out.txt"), fail)
    assert os.listdir(tmp_path) == []


# ---- bad inputs -----------------------------------------------------------------------------
def _bad_inputs(tmp_path, kind: str) -> str:
    path = tmp_path / f"{kind}.npz"
    if kind == "missing-array":
        np.savez(path, arg0=np.ones(4, np.float32))
    elif kind == "wrong-dtype":
        np.savez(path, arg0=np.ones(4, np.float64), arg1=np.ones(4, np.float32))
    elif kind == "wrong-shape":
        np.savez(path, arg0=np.ones(5, np.float32), arg1=np.ones(4, np.float32))
    elif kind == "object-array":
        np.savez(path, arg0=np.array([object()] * 4), arg1=np.ones(4, np.float32))
    elif kind == "npy":
        with open(path, "wb") as f:
            np.save(f, np.ones(4, np.float32))
    elif kind == "text":
        path.write_text("arg0 = 1 2 3 4\n")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "folder":
        path.mkdir()
    return str(path)  # "absent": never created


@pytest.mark.parametrize("kind", ["missing-array", "wrong-dtype", "wrong-shape", "object-array", "npy", "text",
                                  "empty", "folder", "absent"])
@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_bad_inputs_file_is_a_user_error_and_writes_nothing(kind, backend, tmp_path, capsys):
    module = tmp_path / "simple.hlo"
    module.write_text(SIMPLE)
    inputs = _bad_inputs(tmp_path, kind)
    out = tmp_path / "out.npz"
    assert main(["run", str(module), "--backend", backend, "--inputs", inputs, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hlofuse: ") and "Traceback" not in err and "bug in hlofuse" not in err
    assert not out.exists() and not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


# ---- internal errors ----------------------------------------------------------------------
EXCEPTIONS = [ValueError("bad value"), KeyError("k"), TypeError("bad type"), AssertionError("broken"),
              MemoryError("Unable to allocate"), RecursionError("maximum recursion depth exceeded"),
              ZeroDivisionError("division by zero"), OSError("no file name")]


@pytest.fixture
def pipeline_raises(monkeypatch):
    """Make the pass pipeline raise `exc` (a stand-in for a bug somewhere in hlofuse)."""
    from hlofuse.passes.pipeline import PassPipeline

    def install(exc: BaseException) -> None:
        def run(self, module):
            raise exc

        monkeypatch.setattr(PassPipeline, "run", run)

    return install


@pytest.mark.parametrize("exc", EXCEPTIONS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("command", ["run", "compile"])
def test_internal_error_is_one_paragraph_exit_3(command, exc, pipeline_raises, simple_module, capsys):
    pipeline_raises(exc)
    assert main([command, simple_module]) == 3
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "bug in hlofuse" in err and f"'hlofuse {command}'" in err and simple_module in err
    assert f"{type(exc).__name__}: " in err and "--debug" in err
    assert "hlofuse/compiler.py:" in err  # where hlofuse raised it (optimize runs the pipeline)


def test_internal_error_with_debug_prints_the_traceback(pipeline_raises, simple_module, capsys):
    pipeline_raises(ValueError("bad value"))
    assert main(["--debug", "run", simple_module]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "ValueError: bad value" in err and "bug in hlofuse" in err


def test_internal_error_during_a_run_writes_no_output(tmp_path, simple_module, simple_inputs, monkeypatch):
    from hlofuse.runtime.interpreter import core

    def broken(self, inst, args):
        raise IndexError("index 7 is out of bounds")

    monkeypatch.setattr(core.Interpreter, "evaluate_instruction", broken)
    out = tmp_path / "out.npz"
    assert main(["run", simple_module, "--backend", "interpreter", "--inputs", simple_inputs[0], "-o", str(out)]) == 3
    assert not out.exists() and not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


def test_internal_error_while_emitting_writes_no_output(tmp_path, simple_module, monkeypatch):
    import hlofuse.passes.fusion.report as report

    def broken(*a, **k):
        raise AttributeError("'NoneType' object has no attribute 'kind'")

    monkeypatch.setattr(report, "build_report", broken)
    out = tmp_path / "report.txt"
    assert main(["compile", simple_module, "--emit", "report", "-o", str(out)]) == 3
    assert os.listdir(tmp_path) == ["simple.hlo"]


PATCH = """from hlofuse.passes.pipeline import PassPipeline
def run(self, module):
    raise {exc}
PassPipeline.run = run"""


@pytest.mark.parametrize("exc", ["ValueError('bad value')", "RecursionError('maximum recursion depth')",
                                 "MemoryError()"])
def test_internal_error_subprocess(exc, simple_module):
    proc = run_cli("run", simple_module, pre=PATCH.format(exc=exc))
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "bug in hlofuse" in proc.stderr and exc.split("(")[0] in proc.stderr
    debug = run_cli("run", simple_module, "--debug", pre=PATCH.format(exc=exc))
    assert debug.returncode == 3 and "Traceback" in debug.stderr


def test_user_errors_stay_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY main {\n  ROOT p = f32[4]{0} parameter(0\n}\n")
    assert main(["run", str(bad)]) == 2
    assert main(["compile", EXAMPLE, "--passes", "nosuchpass"]) == 2
    assert main(["compile", EXAMPLE, "--emit", "ptx"]) == 2
    err = capsys.readouterr().err
    assert "bug in hlofuse" not in err and "Traceback" not in err



MALFORMED = {
    # a fused reverse whose `dimensions` a mutation renamed (the fuzzer, seed 29): the verifier
    # let it through (the shape rule read no dimensions as none) and the CPU element generator
    # raised KeyError; XLA's parser requires the attribute, and so does hlofuse's verifier now
    "missing attribute 'dimensions'": (
        "HloModule m\n\nfused {\n  p = f32[4,6]{1,0} parameter(0)\n"
        "  s = f32[4,3]{1,0} slice(p), slice={[0:4:1], [0:6:2]}\n"
        "  ROOT r = f32[4,3]{1,0} reverse(s), parent_frame_id={0}\n}\n\n"
        "ENTRY main {\n  x = f32[4,6]{1,0} parameter(0)\n"
        "  ROOT f = f32[4,3]{1,0} fusion(x), kind=kLoop, calls=fused\n}\n"),
    # `epsilon==0.001` (seed 30) reached the batch-norm expander, whose float() raised ValueError
    "attribute epsilon must be a number": (
        "HloModule m\n\nENTRY main {\n  x = f32[2,3,5]{2,1,0} parameter(0)\n"
        "  s = f32[3]{0} parameter(1)\n  o = f32[3]{0} parameter(2)\n"
        "  ROOT bn = (f32[2,3,5]{2,1,0}, f32[3]{0}, f32[3]{0}) batch-norm-training(x, s, o), "
        "epsilon==0.001, feature_index=1\n}\n"),
    # a custom-call's malformed called_computations stayed Raw (seed 35) and the module's walk
    # of its callees raised AttributeError
    "'%cmp.:x' is not a computation name": (
        "HloModule m\n\ncmp {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT c = pred[] compare(a, b), direction=GT\n}\n\n"
        "ENTRY main {\n  x = f32[4,3] parameter(0)\n"
        "  ROOT t = (f32[4,3], s32[4,3]) custom-call(x), custom_call_target=\"TopK\", "
        "called_computations={%cmp.:x}\n}\n"),
    # a computation calling itself (seed 30) passed the verifier; the call inliner never ended
    "the call graph has a cycle: f -> f": (
        "HloModule m\n\nf {\n  a = f32[] parameter(0)\n  ROOT c = f32[] call(a), to_apply=f\n}\n\n"
        "ENTRY main {\n  p = f32[] parameter(0)\n  ROOT r = f32[] call(p), to_apply=f\n}\n"),
}


@pytest.mark.parametrize("message", sorted(MALFORMED))
def test_malformed_attributes_the_fuzzer_found_are_users_errors(message, tmp_path, capsys):
    """Each was an internal error (exit 3) before: now exit 2 on every backend, the attribute
    named, no output."""
    bad = tmp_path / "bad.hlo"
    bad.write_text(MALFORMED[message])
    out = tmp_path / "out.npz"
    for backend in ("cpu", "interpreter"):
        assert main(["run", str(bad), "--backend", backend, "-o", str(out)]) == 2
        assert not out.exists()
    err = capsys.readouterr().err
    assert message in err
    assert "bug in hlofuse" not in err and "Traceback" not in err
