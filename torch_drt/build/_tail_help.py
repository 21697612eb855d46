"""The build's tail shared: a worker with no part left converts the last rows of a part another worker still writes.

Parts are dealt whole, so at a build's end the worker that finishes first would idle while another converts the
rest of its part (up to a part's time: with 8 parts over 2 workers, up to a quarter of the build). Instead the
driver (``_workers.py``, fork only) gives the idle worker a help task for the running part with the most rows left.
The helper converts that part's rows from its last row backwards, each into a file of a scratch directory
(``<part>-<row>``, renamed into place once complete), and counts them in a shared array (``tail[k]``: how many of
the part's last rows are converted); the part's writer, going forwards, records the row it is at (``position[k]``)
and takes a converted row's file instead of converting the row. The helper stops where the writer is (or once the
part is done, whatever its outcome), so the two finish together; where they meet a row may be converted by both
(the writer keeps its own). The writer still writes every sample in order, so the set is the same, byte for byte.
Only parts over a ``RowRange`` (random access) are helped. A row whose conversion raises ends the help there (the
writer converts it again and reports its error); a part is helped at most once in a build (a shared flag, set as
the help starts), so a row that kills its worker kills one helper at most once. A helper stops at ``max_bytes``
of payloads (``_prefetch.MAX_BYTES``: the scratch directory may be in memory). Files are kept until the build ends:
a writer that dies is replaced, and its replacement takes them again.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

from torch_drt.build._prefetch import MAX_BYTES, can_prefetch
from torch_drt.build.plan import PartPlan, RowRange
from torch_drt.cache import CacheInput

MIN_ROWS_LEFT = 4  # a part with fewer rows left than this is not helped (the task's round trip would not pay)


class TailHelp:
    """The shared state of one build's help (inherited by forked workers): per part the writer's row, the rows
    converted by a helper from the end, and whether it was helped; and the scratch directory of the rows.

    Args:
        ctx: the multiprocessing context (fork) whose shared arrays the workers inherit.
        plan: the parts being written, indexed as the workers' tasks index them.
        directory: an empty scratch directory for the helpers' rows (removed by the caller).
        max_bytes: the payload bytes a helper converts at most.
    """

    def __init__(self, ctx: Any, plan: Sequence[PartPlan], directory: str, max_bytes: int = MAX_BYTES) -> None:
        self.plan, self.directory, self.max_bytes = plan, directory, max_bytes
        self.position = ctx.RawArray("q", len(plan))  # the row the part's writer is at
        self.tail = ctx.RawArray("q", len(plan))  # how many of the part's last rows a helper converted
        self.helped = ctx.RawArray("b", len(plan))  # a help of the part started (never twice in a build)

    def _rows_left(self, k: int) -> int:
        return (self.plan[k].rows or 0) - self.position[k] - self.tail[k]

    def pick(self, running: Sequence[int], asked: set[int]) -> int | None:
        """The running part (``running``: plan indexes) a free worker should help: not helped yet (nor in
        ``asked``), over a ``RowRange``, with the most rows left and at least ``MIN_ROWS_LEFT``; None when none."""
        fit = [k for k in running if k not in asked and not self.helped[k] and can_prefetch(self.plan[k])]
        best = max(fit, key=self._rows_left, default=None)
        return best if best is not None and self._rows_left(best) >= MIN_ROWS_LEFT else None

    def end(self, k: int) -> None:
        """Part ``k`` is done, written or failed (in the driver): its helper converts no further row."""
        self.position[k] = self.plan[k].rows or 0

    def _file(self, k: int, row: int) -> str:
        return os.path.join(self.directory, f"{k}-{row}")

    def help(self, k: int) -> int:
        """Convert part ``k``'s rows from its last one backwards until the writer's row (in a worker); how many."""
        if self.helped[k]:  # a replacement of a helper that died: its row would kill this one too
            return 0
        self.helped[k] = 1
        part = self.plan[k]
        rows, convert, n = part.input, part.convert, part.rows or 0
        assert isinstance(rows, RowRange)
        done = held = 0
        for row in range(n - 1, -1, -1):
            if row <= self.position[k] or held >= self.max_bytes:  # the writer is there (or past it), or enough held
                break
            try:
                sample = convert(rows.rows[rows.start + row])
                if sample is not None and isinstance(sample.data, memoryview):  # pickles as bytes: the same payload
                    sample = CacheInput(bytes(sample.data), sample.metadata)
                held += len(sample.data) if sample is not None else 0
                tmp = self._file(k, row) + ".tmp"
                with open(tmp, "wb") as f:
                    pickle.dump(sample, f, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(tmp, self._file(k, row))
            except Exception:  # converted again by the part's writer, which reports it
                break
            self.tail[k] = n - row
            done += 1
        return done

    def taker(self, k: int) -> Callable[[int, Any], Any]:
        """For part ``k``'s writer: ``take(row, convert_row)`` records that the writer is at ``row`` (within the
        part) and returns its helper's conversion when there is one, else ``convert_row()``."""
        n = self.plan[k].rows or 0

        def take(row: int, convert_row: Callable[[], Any]) -> Any:
            self.position[k] = row
            if row >= n - self.tail[k]:
                try:
                    with open(self._file(k, row), "rb") as f:
                        return pickle.load(f)
                except OSError:  # never for a row counted in tail[k]; converted here all the same
                    pass
            return convert_row()

        return take
