"""Progress bars of long commands and calls (uploads, verify, build-set, convert): one line per job, on stderr.

A bar is drawn only when stderr is a terminal and nothing silenced bars (``--quiet``: ``silenced()``), so logs,
pipes and tests see no bar characters; ``TORCH_DRT_PROGRESS=1`` draws bars on any stream (a batch job's log),
``TORCH_DRT_PROGRESS=0`` on none. It redraws at most ``REDRAW_S`` apart and ends with a newline at ``close``.
``Progress`` is thread-safe (uploads count from their threads)::

    with Progress("verify", "s3://bucket/cache", total=n_bytes, unit="B") as bar:
        for chunk in chunks:
            bar.add(len(chunk))
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any

from torch_drt._protocol import split_protocol

REDRAW_S = 0.1
_WIDTH = 24
_silenced = 0


@contextlib.contextmanager
def silenced() -> Iterator[None]:
    """No bar inside this block (``--quiet``)."""
    global _silenced
    _silenced += 1
    try:
        yield
    finally:
        _silenced -= 1


def enabled(stream: IO[str] | None = None) -> bool:
    """Whether a bar would be drawn on ``stream`` (default stderr): a terminal (or ``TORCH_DRT_PROGRESS=1``), and no
    ``silenced()`` block nor ``TORCH_DRT_PROGRESS=0``."""
    stream = sys.stderr if stream is None else stream
    forced = os.environ.get("TORCH_DRT_PROGRESS", "")
    if _silenced or forced == "0":
        return False
    if forced == "1":
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _bytes(n: float) -> str:
    for prefix in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} B" if prefix == "B" else f"{n:.1f} {prefix}"
        n /= 1024
    return f"{n:.1f} TiB"


def shown(target: Any) -> str:
    """A job's target as a bar shows it: a URL without credentials, query or fragment; a path as it is."""
    text = str(target)
    if not split_protocol(text)[0]:
        return text
    from torch_drt.sources._urls import redact

    return redact(text)


class Progress:
    """One job's bar: ``verb target``, done of ``total`` (None: unknown) in ``unit`` (``"B"``: bytes, in KiB...).

    Args:
        verb: what the job does (``"upload"``, ``"verify"``, ``"convert"``).
        target: what it works on (a path or URL; a URL's credentials and query are never shown).
        total: the job's size, when known.
        unit: what is counted (``"B"``, ``"files"``, ``"samples"``).
        stream: where to draw (default stderr); nothing is written unless ``enabled(stream)`` at creation.
    """

    def __init__(self, verb: str, target: Any = "", total: int | None = None, unit: str = "",
                 stream: IO[str] | None = None) -> None:
        self.label = f"{verb} {shown(target)}".strip()
        self.total, self.unit = total, unit
        self.stream = sys.stderr if stream is None else stream
        self.done = 0
        self.shown = enabled(self.stream)
        self._lock = threading.Lock()
        self._start = self._drawn = time.monotonic()
        self._closed = False
        if self.shown:
            self._draw()

    def add(self, n: int = 1) -> None:
        """Count ``n`` more units done."""
        with self._lock:
            self.done += n
            if self.shown and time.monotonic() - self._drawn >= REDRAW_S:
                self._draw()

    def line(self) -> str:
        """The bar as text: ``verify x [#####-----]  42% 250/600 samples 80 samples/s`` (bytes in KiB, MiB...)."""
        rate = self.done / max(time.monotonic() - self._start, 1e-9)
        if self.unit == "B":
            done, total, speed = _bytes(self.done), _bytes(self.total or 0), f"{_bytes(rate)}/s"
        else:
            unit = f" {self.unit}" if self.unit else ""
            done, total, speed = f"{self.done:,}", f"{self.total or 0:,}{unit}", f"{rate:,.0f}{unit}/s"
        if not self.total:
            return f"{self.label} {done}{'' if self.unit == 'B' else unit} {speed}"
        share = min(1.0, self.done / self.total)
        bar = "#" * int(share * _WIDTH) + "-" * (_WIDTH - int(share * _WIDTH))
        return f"{self.label} [{bar}] {share:4.0%} {done}/{total} {speed}"

    def _draw(self, end: str = "") -> None:
        self._drawn = time.monotonic()
        try:
            self.stream.write("\r\x1b[2K" + self.line() + end)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: the job goes on without its bar
            self.shown = False

    def close(self) -> None:
        """Draw the final state and end the line (once)."""
        with self._lock:
            if self.shown and not self._closed:
                self._draw("\n")
            self._closed = True

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
