"""The writer's timing profile: per source, per stage calls, nanoseconds and bytes, written as dataset-rt's JSON.

The file is ``{"format_version": 1, "elapsed_ns": N, "sources": [{"source_name": S, "stages": [{"name",
"calls", "total_ns", "bytes"}, ...]}, ...]}``, stages sorted by name and sources in the order they started, as
dataset-rt 0.4 writes it. Caches that were reused are not listed; a source that failed lists the stages it ran.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

from torch_drt.cache.config import WriterProfilerConfig
from torch_drt.publish import write_json_atomic

FORMAT_VERSION = 1
_CLOCK = time.perf_counter_ns


class SourceStages:
    """The stage timings of one source (used by the one thread that writes it).

    Args:
        source_name: the source's name.
    """

    def __init__(self, source_name: str) -> None:
        self.source_name = source_name
        self._stages: dict[str, list[int]] = {}  # name -> [calls, total_ns, bytes]

    def _entry(self, name: str) -> list[int]:
        return self._stages.setdefault(name, [0, 0, 0])

    def timed(self, name: str, fn: Callable[..., Any], size: Literal["first", "result"] | None = None) -> Callable:
        """``fn`` counting its calls and time under ``name``, and the length of its first argument or result."""
        entry = self._entry(name)

        def call(*args: Any) -> Any:
            start = _CLOCK()
            out = fn(*args)
            entry[1] += _CLOCK() - start
            entry[0] += 1
            if size is not None:
                entry[2] += len(args[0] if size == "first" else out)
            return out

        return call

    def iterate(self, name: str, items: Iterable[Any]) -> Iterator[Any]:
        """``items`` counting each ``next()`` (the last, which ends it, included) under ``name``."""
        entry, iterator, done = self._entry(name), iter(items), object()
        while True:
            start = _CLOCK()
            try:
                item = next(iterator, done)
            finally:
                entry[1] += _CLOCK() - start
                entry[0] += 1
            if item is done:
                return
            yield item

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Count the block as one call of ``name``."""
        entry, start = self._entry(name), _CLOCK()
        try:
            yield
        finally:
            entry[1] += _CLOCK() - start
            entry[0] += 1

    def to_json(self) -> dict[str, Any]:
        """This source's part of the profile."""
        stages = [
            {"name": name, "calls": calls, "total_ns": total, "bytes": size}
            for name, (calls, total, size) in sorted(self._stages.items())
        ]
        return {"source_name": self.source_name, "stages": stages}


class WriterProfile:
    """The profile of one ``write_cache`` / ``from_cache_sources`` call.

    Args:
        config: where to write it.
    """

    def __init__(self, config: WriterProfilerConfig) -> None:
        self.config = config
        self._start = _CLOCK()
        self._sources: list[SourceStages] = []
        self._lock = threading.Lock()

    def source(self, name: str) -> SourceStages:
        """The stages of a source about to be written."""
        stages = SourceStages(name)
        with self._lock:
            self._sources.append(stages)
        return stages

    def to_json(self) -> dict[str, Any]:
        """The whole profile."""
        with self._lock:
            sources = [s.to_json() for s in self._sources]
        return {"format_version": FORMAT_VERSION, "elapsed_ns": _CLOCK() - self._start, "sources": sources}

    def write(self) -> None:
        """Write the profile to its path, atomically (parent directories are created)."""
        path = self.config.path
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, self.to_json())
