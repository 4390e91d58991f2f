"""Shared fixtures: the zoo, exported and normalized once per test session."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import onnx
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from converter.demo import zoo  # noqa: E402


@pytest.fixture(scope="session")
def zoo_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("zoo")


@pytest.fixture(scope="session")
def zoo_onnx_path(zoo_dir):
    """``zoo_onnx_path(name) -> Path`` of the raw torch export (not normalized)."""

    @functools.cache
    def get(name: str) -> Path:
        return zoo.export_onnx(name, zoo_dir / f"{name}.onnx")

    return get


@pytest.fixture(scope="session")
def zoo_model(zoo_onnx_path):
    """``zoo_model(name) -> onnx.ModelProto``: the normalized zoo model (a fresh copy each call)."""
    from converter.frontend.normalize import normalize

    @functools.cache
    def cached(name: str) -> bytes:
        return normalize(onnx.load(zoo_onnx_path(name))).SerializeToString()

    def get(name: str) -> onnx.ModelProto:
        return onnx.load_from_string(cached(name))

    return get
