"""A worker's next part converted ahead while its current part ends (the writer's hash, syncs and publish).

At the end of a part the writer mostly waits on the disk: on a machine whose CPUs all convert rows, that CPU idles
for every part's end. A worker told which part comes next (the driver's hint, ``_workers.py``) converts that part's
first rows on a daemon thread from the moment the current part's rows are exhausted until its publish returns; the
next part's writer takes them (``take``) before converting the rest itself. Only parts over a ``RowRange`` (random
access: reading their rows again costs nothing) are converted ahead. A row whose conversion raises ends the
prefetch there: the writer converts it again and reports its error as it would have. The thread always converts at
least one row once started, so a started prefetch is never empty; it stops at ``MAX_BYTES`` of payloads (a long
part end, a remote set's upload, must not hold a whole part's samples in memory).
"""

from __future__ import annotations

import threading
from typing import Any

from torch_drt.build.plan import PartPlan, RowRange

MAX_BYTES = 64 << 20  # payload bytes a worker converts ahead at most


def can_prefetch(part: PartPlan) -> bool:
    """Whether ``part``'s rows can be read again (a ``RowRange``): only such a part is converted ahead."""
    return isinstance(part.input, RowRange)


class Prefetch:
    """Part ``part``'s rows converted in order on a daemon thread, from its first row, until ``stop``.

    Attributes:
        index: the part's index.
    """

    def __init__(self, part: PartPlan, max_bytes: int = MAX_BYTES) -> None:
        self.index = part.index
        self._max_bytes = max_bytes
        self._samples: list[Any] = []  # the conversions of rows 0, 1, ... (None: a row left out)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(part,), name="torch_drt-build-prefetch", daemon=True)
        self._thread.start()

    def _run(self, part: PartPlan) -> None:
        convert, held = part.convert, 0
        assert part.input is not None  # a prefetched part is over a RowRange (can_prefetch)
        for row in part.input:
            try:
                sample = convert(row)
                held += len(sample.data) if sample is not None else 0
            except Exception:  # converted again by the part's writer, which reports it
                return
            self._samples.append(sample)
            if self._stop.is_set() or held >= self._max_bytes:
                return

    def stop(self) -> None:
        """Convert no further row (the one being converted is kept)."""
        self._stop.set()

    def take(self) -> list[Any]:
        """Stop, wait for the row being converted and return the conversions of the part's first rows."""
        self._stop.set()
        self._thread.join()
        return self._samples
