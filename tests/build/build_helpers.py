"""Rows and row functions shared by the set-build tests (importable by Ray workers and spawned ranks)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import torch_drt as drt
from torch_drt.build import ColumnsToInput

SEQ = drt.ReaderConfig(seed=0, shuffle=False)
QUIET = drt.WriterConfig(show_progress=False)


def row_payload(i: int) -> bytes:
    return bytes([i % 251]) * (i % 5 + 1) + i.to_bytes(4, "little")


def make_rows(n: int) -> list[dict]:
    """``n`` rows with a payload column and label/tag metadata."""
    return [{"data": row_payload(i), "label": i, "tag": f"t{i}"} for i in range(n)]


class KillAt:
    """Kill the process (SIGKILL) the first time it converts row ``row`` (a marker file remembers it), or every
    time without a marker."""

    def __init__(self, row: int, marker: str | Path | None) -> None:
        self.row = row
        self.marker = None if marker is None else str(marker)

    def __call__(self, row: dict) -> drt.CacheInput:
        if row["label"] == self.row and (self.marker is None or not os.path.exists(self.marker)):
            if self.marker is not None:
                Path(self.marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return ColumnsToInput()(row)


class PidTag:
    """Rows as usual; each converting process leaves a file named for its pid in ``directory``."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = str(directory)

    def __call__(self, row: dict) -> drt.CacheInput:
        Path(self.directory, str(os.getpid())).touch()
        return ColumnsToInput()(row)


class ThreadTag:
    """Rows as usual; each row converted on a thread other than its process's main thread (a part converted ahead)
    leaves a file named for its label in ``directory``."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = str(directory)

    def __call__(self, row: dict) -> drt.CacheInput:
        import threading

        if threading.current_thread() is not threading.main_thread():
            Path(self.directory, str(row["label"])).touch()
        return ColumnsToInput()(row)


class BadAt:
    """Raise ValueError at row ``row``."""

    def __init__(self, row: int) -> None:
        self.row = row

    def __call__(self, row: dict) -> drt.CacheInput:
        if row["label"] == self.row:
            raise ValueError(f"undecodable row {self.row}")
        return ColumnsToInput()(row)


class DropRange:
    """Leave out the rows in ``[start, stop)`` (returns None for them)."""

    def __init__(self, start: int, stop: int) -> None:
        self.start, self.stop = start, stop

    def __call__(self, row: dict) -> drt.CacheInput | None:
        return None if self.start <= row["label"] < self.stop else ColumnsToInput()(row)


class ExtraKeyFrom:
    """Rows from ``start`` on carry one more metadata key (another schema)."""

    def __init__(self, start: int) -> None:
        self.start = start

    def __call__(self, row: dict) -> drt.CacheInput:
        sample = ColumnsToInput()(row)
        if row["label"] >= self.start:
            return drt.CacheInput(sample.data, {**sample.metadata, "extra": 1.5})
        return sample


def read_all(path: Path) -> list[tuple]:
    """Every sample of a cache or set, in order: (data, metadata, cache_id, sample_id)."""
    dataset = drt.DatasetRuntime(1).cached_dataset([path], reader_config=SEQ)
    return [(s.data, s.metadata, s.cache_id, s.sample_id) for s in dataset]


def set_parts(path: Path) -> list[dict]:
    """The part entries of a published set's manifest (paths, cache ids, counts, schemas, manifest checksums)."""
    return json.loads((Path(path) / "cacheset.json").read_text())["parts"]


def tree_bytes(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (relative path -> bytes): two builds are byte-identical when these are equal."""
    root = Path(path)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def manifest_inodes(set_dir: Path) -> dict[str, int]:
    """Part name -> inode of its manifest (unchanged when a rerun reuses the part)."""
    manifests = [p / "manifest.json" for p in Path(set_dir).iterdir()]
    return {m.parent.name: m.stat().st_ino for m in manifests if m.is_file()}


class WaitFor:
    """Rows as usual, but the first row with label ``label`` waits (up to ``timeout`` seconds) for ``marker`` to
    exist, and raises TimeoutError when it never appears."""

    def __init__(self, label: int, marker: str | Path, timeout: float = 30.0) -> None:
        self.label, self.marker, self.timeout = label, str(marker), timeout

    def __call__(self, row: dict) -> drt.CacheInput:
        import time

        if row["label"] == self.label:
            deadline = time.monotonic() + self.timeout
            while not os.path.exists(self.marker):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.marker} never appeared")
                time.sleep(0.01)
        return ColumnsToInput()(row)
