"""InlineCost: when ``OrderedMapper(adaptive=True)`` maps items in the calling thread instead of its worker threads."""

from __future__ import annotations


class InlineCost:
    """The mean time of ``map_fn`` (an exponential moving average), and what it says: map inline once it is under
    ``below_s`` (a hand-off to a worker would cost more), back on the workers once it grows over four times that.

    Args:
        below_s: the mean time under which items are mapped inline.
    """

    WARMUP = 8  # items timed before the mean decides anything
    ALPHA = 0.1

    def __init__(self, below_s: float) -> None:
        self.below_s = below_s
        self.mean: float | None = None
        self._samples = 0

    def inline(self, seconds: float, inline: bool) -> bool:
        """Whether to map inline, given one more item's time ``seconds`` and whether items are mapped inline now."""
        self._samples += 1
        self.mean = seconds if self.mean is None else self.mean + self.ALPHA * (seconds - self.mean)
        if self._samples < self.WARMUP:
            return inline
        if not inline and self.mean < self.below_s:
            return True  # the caller stops submitting; what is in flight drains first, in order
        if inline and self.mean > 4 * self.below_s:
            return False
        return inline
