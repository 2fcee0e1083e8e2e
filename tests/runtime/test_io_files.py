"""`.npz` inputs and outputs of a run (runtime/io.py): element types numpy lacks (bf16, f8, s4
...) round-trip through `run --output` and `run --inputs` (numpy stores them as raw void of the
element's width; reading reinterprets exactly those), and every unreadable inputs file raises
InputError through the Python API and exits 2 from the CLI, never a numpy traceback."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import ml_dtypes
import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.errors import HloError, InputError
from hlofuse.runtime.io import read_inputs, write_outputs

HLOFUSE = os.path.join(os.path.dirname(sys.executable), "hlofuse")

# Each type with values that survive it exactly, sign and specials included.
ROUND_TRIP = {
    "bf16": np.array([1.5, -2.0, np.inf, -0.0, np.nan], ml_dtypes.bfloat16),
    "f16": np.array([1.5, -2.0, np.inf, -0.0, 65504], np.float16),
    "f8e4m3fn": np.array([1.5, -2.0, 448, -0.0, np.nan], ml_dtypes.float8_e4m3fn),
    "s4": np.array([-8, -1, 0, 3, 7], ml_dtypes.int4),
    "u4": np.array([0, 1, 9, 14, 15], ml_dtypes.uint4),
    "pred": np.array([True, False, False, True, True]),
    "c64": np.array([1 + 2j, -0.0 - 1j, np.inf, 3j, -4], np.complex64),
}


def reverse_module(ty: str, n: int) -> str:
    """reverse(x): its result is np.flip of its input, for any element type."""
    return (f"HloModule m\nENTRY e {{\n  x = {ty}[{n}] parameter(0)\n"
            f"  ROOT r = {ty}[{n}] reverse(x), dimensions={{0}}\n}}\n")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([HLOFUSE, *args], capture_output=True, text=True, timeout=300)


def _main(*args: str, capsys) -> tuple[int, str]:
    """The CLI's main in this process (the process boundary, exit status 2 and no traceback,
    is test_every_bad_inputs_file_exits_2_from_the_cli's): its exit status and stderr."""
    from hlofuse.cli import main

    rc = main(list(args))
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
@pytest.mark.parametrize("ty", list(ROUND_TRIP))
def test_cli_round_trip(ty: str, backend: str, tmp_path, capsys) -> None:
    """run --inputs a.npz --output b.npz, then b's out0 fed back as arg0: two reverses give the
    input back bit for bit, and the file in between holds np.flip of it."""
    x = ROUND_TRIP[ty]
    hlo = tmp_path / "m.hlo"
    hlo.write_text(reverse_module(ty, len(x)))
    np.savez(tmp_path / "in.npz", arg0=x)  # numpy writes bf16/f8/s4 as raw void
    rc, err = _main("run", str(hlo), "--backend", backend, "--inputs", str(tmp_path / "in.npz"),
                    "--output", str(tmp_path / "mid.npz"), capsys=capsys)
    assert rc == 0, err
    with np.load(tmp_path / "mid.npz") as z:
        assert z.files == ["out0"]
        mid = z["out0"]
    # The documented form: numpy's own dtype where it has one, else raw void of the width.
    expected_dtype = x.dtype if x.dtype.kind != "V" else np.dtype(f"V{x.dtype.itemsize}")
    assert mid.dtype == expected_dtype
    assert mid.tobytes() == np.flip(x).tobytes()
    np.savez(tmp_path / "mid_in.npz", arg0=mid)
    rc, err = _main("run", str(hlo), "--backend", backend, "--inputs", str(tmp_path / "mid_in.npz"),
                    "--output", str(tmp_path / "out.npz"), capsys=capsys)
    assert rc == 0, err
    with np.load(tmp_path / "out.npz") as z:
        assert z["out0"].tobytes() == x.tobytes()


@pytest.mark.parametrize("ty", list(ROUND_TRIP))
def test_write_then_read_keeps_the_bits(ty: str, tmp_path) -> None:
    """write_outputs, renamed to arg0, read_inputs: the same type and bits (Python API)."""
    x = ROUND_TRIP[ty]
    write_outputs(str(tmp_path / "o.npz"), [x])
    with np.load(tmp_path / "o.npz") as z:
        np.savez(tmp_path / "i.npz", arg0=z["out0"])
    (got,) = read_inputs(str(tmp_path / "i.npz"), hlofuse.parse_hlo(reverse_module(ty, len(x))))
    assert got.dtype == x.dtype and got.tobytes() == x.tobytes()


@pytest.mark.parametrize("stored,param", [
    (np.zeros(5, "V2"), "f16"),          # f16 is numpy-native: numpy never writes it as void
    (np.zeros(5, "V4"), "bf16"),         # void of the wrong width
    (np.zeros(5, "V2"), "f8e4m3fn"),
    (np.zeros(5, np.uint16), "bf16"),     # same width, but not void
    (np.zeros(5, np.float32), "bf16"),
    (np.zeros(5, [("a", "u1"), ("b", "u1")]), "bf16"),  # a structured dtype of width 2
    (np.zeros(5, "V1"), "pred"),
])
def test_other_dtype_mismatches_are_still_refused(stored: np.ndarray, param: str, tmp_path) -> None:
    np.savez(tmp_path / "i.npz", arg0=stored)
    with pytest.raises(InputError, match="arg0 has dtype"):
        read_inputs(str(tmp_path / "i.npz"), hlofuse.parse_hlo(reverse_module(param, 5)))


@pytest.mark.parametrize("ty", ["s4", "u4", "f4e2m1fn", "s2"])
def test_sub_byte_void_with_high_bits_set_is_refused(ty: str, tmp_path) -> None:
    """A byte whose bits above the type's width are set is no value of the type."""
    raw = np.array([0, 1, 0xF0, 2, 3], np.uint8).view("V1")
    np.savez(tmp_path / "i.npz", arg0=raw)
    with pytest.raises(InputError, match=r"byte 0xf0 at index \[2\] is not a"):
        read_inputs(str(tmp_path / "i.npz"), hlofuse.parse_hlo(reverse_module(ty, 5)))


def _bad_files(d) -> dict[str, str]:
    """Unreadable inputs files, each with a word its message must carry."""
    good = d / "good.npz"
    np.savez(good, arg0=np.arange(5, dtype=np.float32))
    raw = good.read_bytes()
    files = {}
    (d / "empty.npz").write_bytes(b"")
    files["empty.npz"] = "empty"
    np.save(d / "single.npy", np.arange(5, dtype=np.float32))
    files["single.npy"] = r"single \.npy array"
    (d / "text.npz").write_text("arg0 = [1, 2, 3]\n")
    files["text.npz"] = "not an .npz archive"
    (d / "truncated.npz").write_bytes(raw[: len(raw) // 2])
    files["truncated.npz"] = "truncated"
    damaged = bytearray(raw)
    damaged[len(raw) // 3: len(raw) // 3 + 16] = b"\xff" * 16  # inside the member's data
    (d / "crc.npz").write_bytes(bytes(damaged))
    files["crc.npz"] = "cannot read inputs"
    np.savez_compressed(d / "c.npz", arg0=np.arange(5, dtype=np.float32))
    craw = bytearray((d / "c.npz").read_bytes())
    craw[40:60] = b"\x00" * 20  # the compressed stream
    (d / "deflate.npz").write_bytes(bytes(craw))
    files["deflate.npz"] = "cannot read inputs"
    with zipfile.ZipFile(d / "member.npz", "w") as z:
        z.writestr("arg0.npy", b"not an npy member")
    files["member.npz"] = r"not a \.npy array"
    with zipfile.ZipFile(d / "header.npz", "w") as z:
        z.writestr("arg0.npy", np.lib.format.MAGIC_PREFIX + b"\x01\x00\x08\x00{'descr'")
    files["header.npz"] = "cannot read inputs"
    np.savez(d / "pickled.npz", arg0=np.array([None, 1], object))
    files["pickled.npz"] = "pickled|allow_pickle"
    np.savez(d / "other_names.npz", x=np.arange(5, dtype=np.float32))
    files["other_names.npz"] = "missing arrays arg0"
    files["no_such_file.npz"] = "no such file"
    (d / "folder.npz").mkdir()
    files["folder.npz"] = "is a directory"
    return files


def test_every_bad_inputs_file_is_an_input_error(tmp_path) -> None:
    module = hlofuse.parse_hlo(reverse_module("f32", 5))
    for name, words in _bad_files(tmp_path).items():
        path = str(tmp_path / name)
        with pytest.raises(InputError, match=words) as info:
            read_inputs(path, module)
        assert isinstance(info.value, HloError) and path in str(info.value), name


def test_every_bad_inputs_file_exits_2_from_the_cli(tmp_path) -> None:
    hlo = tmp_path / "m.hlo"
    hlo.write_text(reverse_module("f32", 5))
    for name in _bad_files(tmp_path):
        r = _run("run", str(hlo), "--backend", "interpreter", "--inputs", str(tmp_path / name))
        assert r.returncode == 2, (name, r.stderr)
        assert "Traceback" not in r.stderr, (name, r.stderr)
