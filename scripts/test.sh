#!/usr/bin/env bash
# The test command: install everything (Python env, ruff among the dev extras; g++ and flexbuffers.h
# to compile generated C++; flatc to check the generated TFLite bindings; headless Chromium for the report-page test),
# then run the whole suite, and the int8 tests once more on an emulated AVX2-only CPU
# (scripts/test_int8_avx2.sh; with arguments, only pytest runs, on those).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1 \
   || [ ! -f /usr/include/flatbuffers/flexbuffers.h ] || ! command -v flatc >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver g++ libflatbuffers-dev flatbuffers-compiler >/dev/null
fi
# Lint first (configured in pyproject.toml): a lint error fails the run like a failing test.
.venv/bin/ruff check converter tests benchmarks scripts
set +e
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
rc=$?
set -e
# pytest's "no tests collected" (5) is a failure here: a run that tests nothing must not pass.
if [ "$rc" -ne 0 ] || [ "$#" -gt 0 ]; then
  exit $rc
fi
# The whole suite passed: the int8 tests once more on an emulated AVX2-only CPU (no AVX-512, no
# VNNI), so that no integer verdict depends on the host's instruction set.
exec bash scripts/test_int8_avx2.sh
