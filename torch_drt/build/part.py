"""Writing one part: what every engine (this process, a torchrun rank, a Ray task) runs for each part.

The part goes through the cache writer (``write_source``), so it is published by one atomic rename or not at
all: a task killed mid-write leaves only a staging directory, which never loads and which the next writer of that
part removes.
"""

from __future__ import annotations

import functools
import itertools
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from torch_drt.build.plan import PartPlan
from torch_drt.build.report import PartOutcome
from torch_drt.cache import CacheCorruptError, CacheWriteSuccess, RemoteConfig, WriterConfig, open_cache
from torch_drt.cache.writer import write_source
from torch_drt.locations.location import Location

PROGRESS_EVERY = 64  # rows between two progress reports of a part
_END = object()


def published_part(
    part: PartPlan,
    parts_root: Path | str,
    *,
    verify: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> PartOutcome | None:
    """The ``"reused"`` outcome of ``part`` when a complete cache of it is already published, else None."""
    path = f"{parts_root}/{part.name}" if isinstance(parts_root, str) else parts_root / part.name
    if isinstance(path, Path) and not path.is_dir():
        return None
    try:
        layout = open_cache(path, verify=verify, storage_options=storage_options, remote_config=remote_config)
    except CacheCorruptError:
        return None  # the writer moves it aside (a remote one without manifest: cleans it up) and writes it again
    return PartOutcome(part.index, part.name, "reused", path, layout.sample_count)


class _TrackedRows:
    """The part's samples as the writer pulls them, remembering the input row of each (for error reports); the
    first rows' conversions may be given (``head``), ``at_end`` is called once the rows are exhausted, and ``take``
    (``_tail_help.py``) may hand over a row's conversion made by another worker."""

    def __init__(
        self,
        part: PartPlan,
        progress: Callable[[int], None] | None,
        head: Sequence[Any] = (),
        at_end: Callable[[], None] | None = None,
        take: Callable[[int, Callable[[], Any]], Any] | None = None,
    ) -> None:
        self.name = part.name
        self._take = take
        self._head = deque(head)
        if part.input is None:  # as iter(None) would: a plan's part must have its rows attached to be written
            raise TypeError(f"part {part.name} has no input rows attached")
        self._rows = itertools.islice(iter(part.input), len(head), None) if head else iter(part.input)
        self._at_end = at_end
        self._convert = part.convert
        self._progress = progress
        self._unreported = 0
        self.pulled = 0  # input rows taken so far
        self.samples = 0  # samples handed to the writer
        self.error_row: int | None = None  # the row at which the input or the conversion raised
        self.last_row: int | None = None  # the row of the last sample handed to the writer
        self.exhausted = False
        self._first: Any = _END

    def _next_sample(self) -> Any:
        while True:
            row_index = self.pulled
            if self._head:
                self.pulled += 1
                self._tick()
                sample = self._head.popleft()
            else:
                try:
                    row = next(self._rows)
                except StopIteration:
                    self.exhausted = True
                    if self._at_end is not None:
                        at_end, self._at_end = self._at_end, None
                        at_end()
                    return _END
                except Exception:
                    self.error_row = row_index
                    raise
                self.pulled += 1
                self._tick()
                try:
                    if self._take is None:
                        sample = self._convert(row)
                    else:
                        sample = self._take(row_index, functools.partial(self._convert, row))
                except Exception:
                    self.error_row = row_index
                    raise
            if sample is not None:
                self.last_row = row_index
                self.samples += 1
                return sample

    def _tick(self) -> None:
        self._unreported += 1
        if self._progress is not None and self._unreported >= PROGRESS_EVERY:
            self.flush_progress()

    def flush_progress(self) -> None:
        """Report the rows not reported yet."""
        if self._progress is not None and self._unreported:
            self._progress(self._unreported)
        self._unreported = 0

    def peek(self) -> bool:
        """Take the first sample ahead; False when the part has none."""
        self._first = self._next_sample()
        return self._first is not _END

    def __iter__(self) -> Iterator[Any]:
        if self._first is not _END:
            first, self._first = self._first, _END
            yield first
        while (sample := self._next_sample()) is not _END:
            yield sample

    def failed_row(self) -> int | None:
        """The input row (within the part) a failure comes from, or None when it is not a row's fault."""
        if self.error_row is not None:
            return self.error_row
        return None if self.exhausted else self.last_row


def write_part(
    part: PartPlan,
    parts_root: str | Path,
    config: WriterConfig,
    progress: Callable[[int], None] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
    head: Sequence[Any] = (),
    at_end: Callable[[], None] | None = None,
    take: Callable[[int, Callable[[], Any]], Any] | None = None,
) -> PartOutcome:
    """Write ``part`` to ``parts_root/<part.name>`` unless it is already published there; never raises.

    Args:
        part: the part, with its input.
        parts_root: the set directory, or its URL (the part is staged locally and uploaded).
        config: writer settings (its progress bar is never shown: the driver shows one for the whole build).
        progress: called with the number of input rows done since its last call.
        storage_options: fsspec options for a URL.
        remote_config: remote settings for a URL.
        head: the conversions of the part's first rows, already made (``_prefetch.py``); its other rows are
            converted here.
        at_end: called once the part's rows are exhausted (the writer then finishes and publishes it).
        take: ``take(row, convert_row)``: row ``row``'s conversion (within the part), by another worker
            (``_tail_help.py``) or ``convert_row()``.

    Returns:
        ``"reused"``, ``"written"``, ``"empty"`` (no sample: nothing written) or ``"failed"`` naming the input
        row at fault when there is one (its position in the whole input).
    """
    remote: dict[str, Any] = {"storage_options": storage_options, "remote_config": remote_config}
    parts_root = Location.parse(parts_root).target
    if (done := published_part(part, parts_root, verify=config.validate_cache, **remote)) is not None:
        if progress is not None and part.rows:
            progress(part.rows)
        return done
    rows = _TrackedRows(part, progress, head, at_end, take)
    try:
        if not rows.peek():
            return PartOutcome(part.index, part.name, "empty")
        result = write_source(  # the set directory is synced once for every part (finish_build)
            rows, parts_root, config.model_copy(update={"show_progress": False}), mode="reuse", sync_root=False,
            **remote,
        )
        message = "" if isinstance(result, CacheWriteSuccess) else result.message
    except Exception as e:  # the first row failed while peeking
        message = f"{type(e).__name__}: {e}"
    finally:
        rows.flush_progress()
    if not message:
        path = f"{parts_root}/{part.name}" if isinstance(parts_root, str) else parts_root / part.name
        return PartOutcome(part.index, part.name, "written", path, rows.samples)
    row = rows.failed_row()
    return PartOutcome(
        part.index, part.name, "failed", row=None if row is None else part.first_row + row, message=message
    )
