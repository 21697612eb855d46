"""How long this process's forks take, as the process forking sees it: from its last hook before the fork to its
first hook after (import this module before torch_drt, so that its hooks are the outermost: torch_drt's own, the
warm start's wait for the first requests among them, are outside the figure)."""

from __future__ import annotations

import os
import time

_started: list[float] = []
forks: list[float] = []  # seconds each fork of this process took, in order (clear it to start a count)


def _before() -> None:
    _started.append(time.perf_counter())


def _after() -> None:
    if _started:
        forks.append(time.perf_counter() - _started.pop())


# hooks before a fork run in the reverse order of their registration, hooks after it in that order: registered
# first, these run right around the fork itself
os.register_at_fork(before=_before, after_in_parent=_after)
