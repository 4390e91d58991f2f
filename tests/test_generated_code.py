"""The generated bindings under converter/targets/*/_generated/ are reproduced by scripts/regenerate.sh
from the schema files committed beside them, and those are the pinned upstream files.

Regeneration needs flatc 2.0.8 (Debian flatbuffers-compiler; scripts/test.sh installs it) and
grpcio-tools 1.85.1 (dev extra): without them the regeneration test skips locally and fails in CI.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MIRROR = REPO.parent / "shared" / "reference"
#: sha256 of the upstream files: LiteRT@f674577 tflite/converter/schema/schema.fbs, mace@0fc55a5 mace/proto/mace.proto.
SOURCES = {
    "converter/targets/tflite/_generated/schema.fbs":
        ("8b9b424c923124df1e722d3d0f52fa273989207053875d07a9d582d51a7e0fa7", "tflite/schema.fbs"),
    "converter/targets/mace/_generated/mace.proto":
        ("a9e24774881c10792b7423b1b1b08965c695bcc65014285f0ce90053cd48508d", "mace/mace_proto_mace.proto"),
}


@pytest.mark.parametrize("path", sorted(SOURCES))
def test_schema_files_are_the_pinned_upstream_files(path):
    digest, mirror = SOURCES[path]
    data = (REPO / path).read_bytes()
    assert hashlib.sha256(data).hexdigest() == digest
    if not (MIRROR / mirror).is_file():
        pytest.fail(f"the upstream mirror copy {MIRROR / mirror} is missing")
    assert data == (MIRROR / mirror).read_bytes()


def test_generated_modules_import_from_their_folder():
    from converter.targets.mace._generated import mace_pb2
    from converter.targets.tflite._generated import schema_generated as fb

    assert fb.BuiltinOperator.RESIZE_BILINEAR == 23
    assert mace_pb2.DESCRIPTOR.name == "mace.proto"
    assert {"NetDef", "MultiNetDef", "OperatorDef"} <= set(mace_pb2.DESCRIPTOR.message_types_by_name)


def test_regenerating_reproduces_the_committed_files():
    flatc = shutil.which("flatc")
    version = subprocess.run([flatc, "--version"], capture_output=True, text=True).stdout.strip() if flatc else ""
    try:
        import grpc_tools  # noqa: F401
    except ImportError:
        version += " (no grpcio-tools)"
    if version != "flatc version 2.0.8":
        message = f"needs flatc 2.0.8 and grpcio-tools, found: {version or 'no flatc'}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    run = subprocess.run(["bash", str(REPO / "scripts" / "regenerate.sh"), "--check"], cwd=REPO,
                         env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
