#!/usr/bin/env bash
# The int8 tests on a CPU with AVX2 and neither AVX-512 nor VNNI, whatever the host has: the
# Python process runs under qemu-x86_64 -cpu max (QEMU's TCG implements AVX2, no AVX-512, no
# VNNI), so onnxruntime's MLAS takes its plain AVX2 integer kernels, whose u8s8 byte-pair sums
# saturate at 16 bits. A verdict that went through those kernels would differ from the host's
# (tests/test_host_integer_kernels.py::test_the_emulated_cpu_saturates proves they do saturate
# here). Child processes (torch loading, the real TNN/MACE runtimes) run natively: qemu-user does
# not follow exec, so the cross-process determinism test, which compares parent and children, is
# left out. About 12 CPU-minutes on a 2-core host. scripts/test.sh runs it after the whole suite passed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname -m)" != "x86_64" ]; then
  echo "test_int8_avx2: x86-64 only (this is $(uname -m)); nothing to emulate" >&2
  exit 0
fi
if ! command -v qemu-x86_64 >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq qemu-user >/dev/null
fi
export EDGECONV_EXPECT_AVX2_INT8=1 QEMU_CPU=max
exec qemu-x86_64 .venv/bin/python -m pytest -q -p no:cacheprovider \
  tests/test_host_integer_kernels.py tests/test_quantize_tnn.py tests/test_quantize_mace.py \
  tests/test_quantize_mace_dsp.py tests/test_quantize_tflite.py tests/test_quantize_ranges.py \
  tests/test_quantize_bias_correction.py tests/test_quantize_qdq.py tests/test_quantize_port.py \
  -k "not deterministic_across_processes" "$@"
