"""Helpers shared by the post-processing tests (no tests here): compile generated C++ and run it.

One ``main.cpp`` includes several generated headers (each in its own namespace) so a test
module compiles once.  Tensors cross the process boundary as files: int64 rank, int64 dims,
then the raw little-endian elements.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from converter.postproc.codegen_cpp import CPP_TYPES

GXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(GXX is None, reason="g++ is not installed")


def write_tensor(path: Path, array: np.ndarray) -> None:
    array = np.ascontiguousarray(array)
    header = np.array([array.ndim, *array.shape], dtype=np.int64)
    path.write_bytes(header.tobytes() + array.tobytes())


def read_tensor(path: Path, dtype: str) -> np.ndarray:
    raw = path.read_bytes()
    rank = int(np.frombuffer(raw[:8], dtype=np.int64)[0])
    shape = tuple(int(d) for d in np.frombuffer(raw[8:8 + 8 * rank], dtype=np.int64))
    storage = np.uint8 if dtype == "bool" else dtype
    return np.frombuffer(raw[8 + 8 * rank:], dtype=storage).reshape(shape).astype(dtype)


_PRELUDE = r"""
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

template <typename T>
std::vector<T> read_tensor(const std::string& path, std::vector<int64_t>& shape) {
  std::ifstream f(path, std::ios::binary);
  int64_t rank = 0;
  f.read(reinterpret_cast<char*>(&rank), sizeof rank);
  shape.assign(static_cast<size_t>(rank), 0);
  f.read(reinterpret_cast<char*>(shape.data()), static_cast<std::streamsize>(rank * 8));
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<T> data(static_cast<size_t>(n));
  f.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(n * sizeof(T)));
  if (!f) throw std::runtime_error("short read: " + path);
  return data;
}

template <typename T>
void write_tensor(const std::string& path, const std::vector<int64_t>& shape, const std::vector<T>& data) {
  std::ofstream f(path, std::ios::binary);
  const int64_t rank = static_cast<int64_t>(shape.size());
  f.write(reinterpret_cast<const char*>(&rank), sizeof rank);
  f.write(reinterpret_cast<const char*>(shape.data()), static_cast<std::streamsize>(rank * 8));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(T)));
}
"""


def _inputs(manifest: dict) -> list[dict]:
    """The generated function's inputs: a post-processing manifest's cut-model outputs, or a
    pre-processing manifest's ``inputs``."""
    return manifest["cut_model_outputs"] if "cut_model_outputs" in manifest else manifest["inputs"]


def build_harness(cases: dict[str, tuple[Path, dict]], workdir: Path) -> Path:
    """Compile one executable running every case: ``exe CASE DIR`` reads DIR/in<k>.bin, writes DIR/out<k>.bin."""
    includes = [f'#include "{header}"' for header, _ in cases.values()]
    runners, dispatch = [], []
    for case, (_, manifest) in cases.items():
        ns = manifest["cpp_namespace"]
        body = [f"static int run_{case}(const std::string& dir) {{", f"  {ns}::Inputs in;"]
        for k, item in enumerate(_inputs(manifest)):
            ctype = CPP_TYPES[item["dtype"]]
            body += [f"  std::vector<int64_t> shape{k};",
                     f'  const auto data{k} = read_tensor<{ctype}>(dir + "/in{k}.bin", shape{k});',
                     f"  in.{item['cpp_field']} = {{data{k}.data(), shape{k}}};"]
        body.append(f"  const {ns}::Outputs out = {ns}::{manifest.get('function', 'postprocess')}(in);")
        for k, item in enumerate(manifest["outputs"]):
            body.append(f'  write_tensor(dir + "/out{k}.bin", out.{item["cpp_field"]}.shape, out.{item["cpp_field"]}.data);')
        body += ["  return 0;", "}"]
        runners.append("\n".join(body))
        dispatch.append(f'  if (which == "{case}") return run_{case}(argv[2]);')
    main = "\n".join(includes) + "\n" + _PRELUDE + "\n" + "\n\n".join(runners) + (
        "\n\nint main(int argc, char** argv) {\n  if (argc != 3) return 2;\n  const std::string which = argv[1];\n"
        + "\n".join(dispatch) + "\n  return 3;\n}\n")
    source = workdir / "main.cpp"
    source.write_text(main)
    exe = workdir / "harness"
    proc = subprocess.run([GXX, "-std=c++17", "-O1", "-Wall", "-Werror", str(source), "-o", str(exe)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return exe


def run_cpp(exe: Path, case: str, manifest: dict, feeds: dict[str, np.ndarray], workdir: Path) -> dict[str, np.ndarray]:
    workdir.mkdir(parents=True, exist_ok=True)
    for k, item in enumerate(_inputs(manifest)):
        value = np.asarray(feeds[item["name"]])
        write_tensor(workdir / f"in{k}.bin", value.astype(np.uint8) if item["dtype"] == "bool" else value)
    proc = subprocess.run([str(exe), case, str(workdir)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return {item["name"]: read_tensor(workdir / f"out{k}.bin", item["dtype"])
            for k, item in enumerate(manifest["outputs"])}


def load_postprocess(path: Path, module_name: str):
    """Import a generated postprocess.py as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_onnx(model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
