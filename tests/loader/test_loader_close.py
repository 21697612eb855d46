"""close() ends an iterator or a loader for real, and keeps the delivered position (issue 11)."""

from __future__ import annotations

import pytest

from torch_drt import StatefulDataLoader


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2}])
def test_closing_an_iterator_ends_it_and_allows_load_state_dict(kwargs):
    loader = StatefulDataLoader(list(range(10)), batch_size=2, collate_fn=list, **kwargs)
    it = iter(loader)
    assert next(it) == [0, 1]
    state = loader.state_dict()
    it.close()
    with pytest.raises(StopIteration):
        next(it)
    assert len(it) == 0
    loader.load_state_dict(state)  # no "exhaust or close it first": it is closed
    assert list(loader) == [[2, 3], [4, 5], [6, 7], [8, 9]]


def test_a_closed_iterator_keeps_the_position_and_the_next_iter_continues():
    loader = StatefulDataLoader(list(range(10)), batch_size=2, collate_fn=list, num_workers=2)
    it = iter(loader)
    next(it), next(it)
    it.close()
    assert loader.state_dict()["observation_offset"] == 4
    assert next(iter(loader)) == [4, 5]


def test_closing_the_loader_stops_its_workers_and_a_new_iter_starts_new_ones():
    loader = StatefulDataLoader(list(range(10)), batch_size=2, collate_fn=list, num_workers=2,
                                worker_method="process", multiprocessing_context="fork")
    it = iter(loader)
    assert next(it) == [0, 1]
    pids = loader._mode.mapper.worker_pids()
    loader.close()
    assert loader._mode.mapper.worker_pids() == []
    assert loader.state_dict()["observation_offset"] == 2
    assert list(loader) == [[2, 3], [4, 5], [6, 7], [8, 9]]
    assert set(loader._mode.mapper.worker_pids()).isdisjoint(pids)
    loader.close()


def test_worker_threads_are_stopped_before_interpreter_finalization():
    """Daemon threads alive at finalization are torn down with pthread_exit; one inside C++ aborts the process
    ("terminate called without an active exception": a gloo rank died this way). Persistent workers are
    stopped and joined by threading's exit hooks, which run before ``atexit`` callbacks."""
    from script_runner import run_script

    proc = run_script("""
        import atexit, threading
        atexit.register(lambda: print("ALIVE", sorted(t.name for t in threading.enumerate()
                                                      if t.name.startswith("torch_drt"))))
        from torch_drt import StatefulDataLoader
        loader = StatefulDataLoader(list(range(20)), batch_size=2, collate_fn=list, num_workers=2,
                                    persistent_workers=True)
        assert len(list(loader)) == 10
        it = iter(loader)
        next(it)  # an iterator left open mid-epoch, as a training script that breaks out of its loop
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ALIVE []" in proc.stdout, proc.stdout
