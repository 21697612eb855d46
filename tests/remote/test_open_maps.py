"""The process's shard maps: a loader finalised by the garbage collector never hangs the thread it runs in."""

from __future__ import annotations

import threading

from torch_drt.locations._open_maps import OpenMaps


def test_unmapping_from_a_finaliser_inside_a_map_call_returns():
    """``PipelineLoader.__del__`` -> ``stop_prefetch`` -> ``keep_only`` can run inside ``acquire`` (a collection
    triggered by an allocation there), in the thread that holds the map lock; it used to wait for that lock."""
    maps, returned = OpenMaps(), threading.Event()

    def finaliser_inside_acquire():
        with maps._lock:  # what acquire() holds while the garbage collector runs the finaliser
            maps.keep_only(set())
        returned.set()

    threading.Thread(target=finaliser_inside_acquire, daemon=True).start()
    assert returned.wait(30), "keep_only called with the map lock held by its own thread hangs"
