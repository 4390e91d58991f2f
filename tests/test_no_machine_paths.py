"""No tracked file names a path of one machine (a home directory, a scratch folder, a checkout).

Such a path works only where it was written: a generated header naming the file it was compiled
from, a test reading a fixed absolute path.  Legitimate mentions (a doc explaining where a tool
writes, a bad-path test) go in ALLOWED with the reason.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: An absolute path into a home directory, a user's scratch space, or this project's machine layout.
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|home|root|tmp|Users)/")
#: (tracked file, text of the allowed line) pairs, each with the reason it is not a machine path.
ALLOWED: set[tuple[str, str]] = set()


def _tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def test_no_tracked_file_names_a_machine_path():
    files = _tracked_files()
    assert "converter/data/op_support_matrix.yaml" in files and len(files) > 100
    found = []
    for name in files:
        path = REPO / name
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if MACHINE_PATH.search(line) and (name, line.strip()) not in ALLOWED:
                found.append(f"{name}:{number}: {line.strip()[:120]}")
    assert found == [], "machine paths in tracked files:\n" + "\n".join(found)


def test_the_pattern_finds_what_it_should():
    # Built from pieces so that this file does not contain what it looks for.
    for top, line in (("work", "# Generated from /{}/shared/x.proto"), ("home", 'Path("/{}/me/model.onnx")'),
                      ("tmp", "cp out /{}/x"), ("Users", "see /{}/me/Downloads"), ("root", "at /{}/.cache/")):
        assert MACHINE_PATH.search(line.format(top)), line
    for line in ("converter/targets/tflite/_generated/", "a/tmp/b", "~/tmp/ in docs", "../work/x", "https://x.org/home/"):
        assert not MACHINE_PATH.search(line), line
