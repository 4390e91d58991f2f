"""``die_with_parent`` runs in a forked child before exec (``preexec_fn`` of every runtime tool
and model-loading child).  It must not load or look up anything there: a dlopen/dlsym in a
child forked while another thread held the loader's lock waits forever (tnn_run's fork hung so
under qemu while a verification thread opened an onnxruntime session)."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys

import pytest

from converter.infra import limits

READ_PDEATHSIG = """
import ctypes
sig = ctypes.c_int(0)
ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG
print(sig.value)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_child_gets_its_death_signal_without_loading_anything(monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("dlopen in a forked child")

    assert limits._PRCTL is not None  # looked up in the parent, when the module loaded
    monkeypatch.setattr(ctypes, "CDLL", no_loading)  # the child is a fork: it inherits this
    out = subprocess.run([sys.executable, "-c", READ_PDEATHSIG], preexec_fn=limits.die_with_parent,
                         capture_output=True, text=True, check=True)
    assert int(out.stdout) == signal.SIGKILL
