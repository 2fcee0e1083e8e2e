"""libgomp's wait policy is set before anything loads libgomp (runtime/openmp_env.py): oneDNN,
linked against libgomp, loaded it before hlofuse's own threads did, and libgomp then kept its
default 300,000 spins (scan_rnn on two threads under load: 1.9 s a call instead of 0.2 s).
Checked in fresh interpreters: libgomp mapped implies the policy was already in the
environment, unless the user chose one."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hlofuse.runtime.gemm_provider import onednn_library
from hlofuse.runtime.openmp_env import DEFAULT_SPINCOUNT

PROBE = """
import os
from hlofuse.runtime.gemm_provider import onednn_library
from hlofuse.runtime.cpu_threads import register_openmp
{load}
maps = open("/proc/self/maps").read()
print("gomp" in maps, os.environ.get("GOMP_SPINCOUNT"), os.environ.get("OMP_WAIT_POLICY"))
"""


def _probe(load: str, **env) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    clean.update(env)
    out = subprocess.run([sys.executable, "-c", PROBE.format(load=load)], env=clean, capture_output=True,
                         text=True, timeout=120, check=True)
    return out.stdout.split()


@pytest.mark.skipif(onednn_library() is None, reason="oneDNN is not installed here")
def test_loading_onednn_first_sets_the_spin_count_before_libgomp_loads():
    assert _probe("onednn_library()") == ["True", DEFAULT_SPINCOUNT, "None"]


def test_hlofuse_threads_set_the_spin_count():
    assert _probe("register_openmp()") == ["True", DEFAULT_SPINCOUNT, "None"]


def test_a_chosen_policy_is_kept():
    assert _probe("onednn_library(); register_openmp()", OMP_WAIT_POLICY="passive") == ["True", "None", "passive"]
    assert _probe("onednn_library(); register_openmp()", GOMP_SPINCOUNT="50") == ["True", "50", "None"]
