"""Write an ML Program ``.mlpackage`` deterministically and atomically.

Layout (as coremltools' ModelPackage writes it, apple/coremltools
``modelpackage/src/ModelPackage.cpp``: ``Manifest.json`` with ``fileFormatVersion`` "1.0.0",
``itemInfoEntries`` keyed by identifier, each with ``path``/``name``/``author``/``description``
relative to ``Data/``, and ``rootModelIdentifier``)::

    <name>.mlpackage/
      Manifest.json
      Data/com.apple.CoreML/model.mlmodel      # Model protobuf (spec), serialized deterministically
      Data/com.apple.CoreML/weights/weight.bin # MIL blob storage written by coremltools

coremltools' own ``MLModel.save`` draws random UUIDs for the identifiers and stamps a
``conversion_date``; we write the same layout ourselves with identifiers derived from the content
(UUIDv5) and no date, so re-exporting the same model gives byte-identical files.  Readers only look
identifiers up through ``rootModelIdentifier`` (ModelPackage.cpp ``getRootModel``), so any UUID
string is valid.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from ...infra.fsutil import sha256_bytes

MODEL_ITEM = ("model.mlmodel", "com.apple.CoreML", "CoreML Model Specification")
WEIGHTS_ITEM = ("weights", "com.apple.CoreML", "CoreML Model Weights")
#: Metadata coremltools adds that changes from day to day.
VOLATILE_METADATA = ("com.github.apple.coremltools.conversion_date",)


def _identifier(content_digest: str, item_path: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"edgeconv:{content_digest}:{item_path}")).upper()


def manifest_json(content_digest: str, with_weights: bool) -> str:
    entries = {}
    items = [MODEL_ITEM] + ([WEIGHTS_ITEM] if with_weights else [])
    root = None
    for name, author, description in items:
        path = f"{author}/{name}"
        ident = _identifier(content_digest, path)
        entries[ident] = {"author": author, "description": description, "name": name, "path": path}
        if name == MODEL_ITEM[0]:
            root = ident
    manifest = {"fileFormatVersion": "1.0.0", "itemInfoEntries": entries, "rootModelIdentifier": root}
    return json.dumps(manifest, indent=4, sort_keys=True) + "\n"


def serialize_spec(spec, user_metadata: dict[str, str], short_description: str,
                   feature_descriptions: dict[str, str]) -> bytes:
    """Stamp our metadata into the Model spec and serialize it with a stable map order."""
    meta = spec.description.metadata
    for key in VOLATILE_METADATA:
        if key in meta.userDefined:
            del meta.userDefined[key]
    for key, value in user_metadata.items():
        meta.userDefined[key] = value
    meta.shortDescription = short_description
    for feature in list(spec.description.input) + list(spec.description.output):
        if feature.name in feature_descriptions:
            feature.shortDescription = feature_descriptions[feature.name]
    return spec.SerializeToString(deterministic=True)


def write_mlpackage(dest: Path, model_bytes: bytes, weights_dir: Path | None) -> list[Path]:
    """Write the package to ``dest`` (a ``.mlpackage`` directory) atomically.

    The whole package is built in a temp directory next to ``dest`` and renamed into place; an
    existing package is swapped out only after the new one is complete.  Returns the files
    written, as absolute paths inside ``dest``.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    weight_files = sorted(p for p in Path(weights_dir).rglob("*") if p.is_file()) if weights_dir else []
    digest_parts = [sha256_bytes(model_bytes)] + [
        f"{p.relative_to(weights_dir)}:{sha256_bytes(p.read_bytes())}" for p in weight_files
    ]
    digest = sha256_bytes("\n".join(digest_parts).encode())

    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        data = tmp / "Data" / "com.apple.CoreML"
        data.mkdir(parents=True)
        (data / "model.mlmodel").write_bytes(model_bytes)
        if weight_files:
            for src in weight_files:
                target = data / "weights" / src.relative_to(weights_dir)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, target)
        (tmp / "Manifest.json").write_text(manifest_json(digest, bool(weight_files)), encoding="utf-8")
        os.chmod(tmp, 0o755)
        _swap_into_place(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(p.resolve() for p in dest.rglob("*") if p.is_file())


def _swap_into_place(new: Path, dest: Path) -> None:
    if not dest.exists():
        os.replace(new, dest)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
    os.rmdir(old)
    os.replace(dest, old)  # a directory cannot be replaced over a non-empty one in one step
    try:
        os.replace(new, dest)
    except BaseException:
        os.replace(old, dest)
        raise
    shutil.rmtree(old, ignore_errors=True)
