"""The command line: exit codes, messages without tracebacks, no partial outputs."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from hlofuse.cli import main
from cli_modules import SIMPLE, simple_module  # noqa: F401 (simple_module is a fixture)
from repo_paths import REPO

ROOT = str(REPO)
EXAMPLE = os.path.join(ROOT, "examples", "softmax.hlo")


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    """Run the CLI in a subprocess, as a user would."""
    return subprocess.run([sys.executable, "-m", "hlofuse.cli", *argv], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_missing_file_exits_2_without_traceback(tmp_path):
    proc = run_cli("run", str(tmp_path / "nope.hlo"), "--backend", "interpreter")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "nope.hlo" in proc.stderr


def test_syntax_error_shows_line_column_and_caret(tmp_path):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\n\nENTRY main {\n  p0 = f32[4]{0} parameter(0)\n  ROOT a = f32[4]{0} add(p0 p0)\n}\n")
    proc = run_cli("fmt", str(bad))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "bad.hlo:5:" in proc.stderr
    assert "^" in proc.stderr


def test_wrong_input_shape_exits_2_and_writes_nothing(tmp_path, simple_module):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=np.ones(3, np.float32), arg1=np.ones(4, np.float32))
    out = tmp_path / "out.npz"
    proc = run_cli("run", simple_module, "--backend", "interpreter", "--inputs", str(inputs), "--output", str(out))
    assert proc.returncode == 2
    assert "arg0" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()
    assert os.listdir(tmp_path) == sorted(os.listdir(tmp_path))  # no temp files left behind
    assert {p.name for p in tmp_path.iterdir()} == {"in.npz", "simple.hlo"}


def test_wrong_input_dtype_exits_2(tmp_path, simple_module):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=np.ones(4, np.float64), arg1=np.ones(4, np.float32))
    assert main(["run", simple_module, "--backend", "interpreter", "--inputs", str(inputs)]) == 2


def test_missing_input_array_exits_2(tmp_path, simple_module):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=np.ones(4, np.float32))
    assert main(["run", simple_module, "--backend", "interpreter", "--inputs", str(inputs)]) == 2


def test_run_interpreter_writes_outputs(tmp_path, simple_module):
    x = np.arange(4, dtype=np.float32)
    y = np.full(4, 2.0, np.float32)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=x, arg1=y)
    out = tmp_path / "out.npz"
    assert main(["run", simple_module, "--backend", "interpreter", "--inputs", str(inputs), "--output", str(out)]) == 0
    with np.load(out) as data:
        np.testing.assert_array_equal(data["out0"], x * y + x)


def test_fmt_prints_canonical_text(simple_module, capsys):
    assert main(["fmt", simple_module]) == 0
    text = capsys.readouterr().out
    assert "ENTRY" in text and "multiply" in text


def test_unknown_suffix_is_a_user_error(tmp_path):
    path = tmp_path / "module.xyz"
    path.write_text(SIMPLE)
    proc = run_cli("fmt", str(path))
    assert proc.returncode == 2 and "--format" in proc.stderr


def test_compile_report_of_example(capsys):
    assert main(["compile", EXAMPLE, "--emit", "report"]) == 0
    assert "fusion" in capsys.readouterr().out.lower()


def test_run_cpu_compare_example():
    proc = run_cli("run", EXAMPLE, "--backend", "cpu", "--compare", "--report")
    assert proc.returncode == 0, proc.stderr
    assert "result: match" in proc.stdout


def test_module_that_fails_verification_is_a_user_error(tmp_path):
    bad = tmp_path / "bad.hlo"
    bad.write_text(SIMPLE.replace("ROOT a = f32[4]{0} add", "ROOT a = f32[5]{0} add"))
    proc = run_cli("run", str(bad), "--backend", "cpu")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "instruction a" in proc.stderr and "f32[5]" in proc.stderr
