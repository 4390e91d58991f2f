#!/usr/bin/env bash
# Regenerate the generated bindings from the schema files committed beside them:
#   converter/targets/tflite/_generated/schema_generated.py  <- schema.fbs  (flatc 2.0.8)
#   converter/targets/mace/_generated/mace_pb2.py            <- mace.proto  (grpcio-tools 1.85.1)
# Both schema files are verbatim upstream copies; their README.md names the repo@commit:path.
# Usage: bash scripts/regenerate.sh          rewrite the two files
#        bash scripts/regenerate.sh --check  exit 1 (and show the diff) if they are not reproduced
# Tools: flatc from Debian's flatbuffers-compiler 2.0.8; grpcio-tools from the dev extra
# (pyproject.toml). Other versions generate other code.
set -euo pipefail
cd "$(dirname "$0")/.."
# The Python that has grpcio-tools: $PYTHON, else the project's .venv, else python3 on PATH.
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON="$PWD/.venv/bin/python"; else PYTHON="$(command -v python3)"; fi
fi
check=0
[ "${1:-}" = "--check" ] && check=1

flatc_version="$(flatc --version 2>/dev/null || true)"
if [ "$flatc_version" != "flatc version 2.0.8" ]; then
  echo "regenerate.sh: need flatc 2.0.8 (Debian flatbuffers-compiler), found: ${flatc_version:-none}" >&2
  exit 2
fi
grpc_version="$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))' 2>/dev/null || true)"
if [ "$grpc_version" != "1.85.1" ]; then
  echo "regenerate.sh: need grpcio-tools 1.85.1 in $PYTHON (pip install -e '.[dev]'), found: ${grpc_version:-none}" >&2
  exit 2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# --- TFLite: flatc 2.0.8 cannot parse attributes on enum values / union members, so the two
# "(deprecated)" markers are dropped before compiling (the generated code is the same otherwise).
tfl=converter/targets/tflite/_generated
sed -e 's/REDUCE_WINDOW = 205 (deprecated),/REDUCE_WINDOW = 205,/' \
    -e 's/^  ReduceWindowOptions (deprecated),/  ReduceWindowOptions,/' "$tfl/schema.fbs" > "$work/schema.fbs"
flatc --python --gen-object-api --gen-onefile -o "$work/tflite" "$work/schema.fbs"
{
  cat <<'EOF'
# Generated code: TFLite schema bindings (flatbuffers object API).  Do not edit by hand.
#
# Source: schema.fbs beside this file, a verbatim copy of
# google-ai-edge/LiteRT@f67457790c9c2ab67347d6fe53270e8d3df20868:tflite/converter/schema/schema.fbs.
# Regenerate: bash scripts/regenerate.sh (flatc 2.0.8, Debian flatbuffers-compiler, which cannot
# parse attributes on enum values / union members: the script drops two "(deprecated)" markers first).
#
# Buffer.data is declared (force_align: 16), which flatc 2.0.8 ignores for Python; writer.py packs
# buffers itself with that alignment.
# ruff: noqa

EOF
  cat "$work/tflite/schema_generated.py"
} > "$work/schema_generated.py"

# --- MACE: protoc names the module after the file, so it compiles a file named mace.proto.
mace=converter/targets/mace/_generated
mkdir -p "$work/mace"
cp "$mace/mace.proto" "$work/mace/mace.proto"
(cd "$work/mace" && "$PYTHON" -m grpc_tools.protoc -I. --python_out=. mace.proto)
{
  cat <<'EOF'
# Generated code: MACE model protobuf bindings.  Do not edit by hand.
#
# Source: mace.proto beside this file, a verbatim copy of
# XiaoMi/mace@0fc55a548ef41b37fd15fd8944de5155eb09b3c1:mace/proto/mace.proto.
# Regenerate: bash scripts/regenerate.sh (grpcio-tools 1.85.1, protoc gencode 7.35.1).
EOF
  cat "$work/mace/mace_pb2.py"
} > "$work/mace_pb2.py"

status=0
for pair in "$work/schema_generated.py:$tfl/schema_generated.py" "$work/mace_pb2.py:$mace/mace_pb2.py"; do
  new="${pair%%:*}"; old="${pair#*:}"
  if [ "$check" = 1 ]; then
    if ! cmp -s "$new" "$old"; then
      echo "regenerate.sh: $old is not what the pinned tools generate:" >&2
      diff -u "$old" "$new" | head -40 >&2 || true
      status=1
    fi
  else
    cp "$new" "$old"
  fi
done
exit $status
