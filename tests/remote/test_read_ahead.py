"""ReadAhead: before each batch it plans the shards of the batches in view, in read order; after a start or a jump
(a resume) it says how many of them the first batch needs, so that those download first."""

from __future__ import annotations

import os

import numpy as np

from torch_drt.cache.read_ahead import ReadAhead


class RecordingReader:
    """A remote reader's planning surface: batch ``k`` reads rows ``4k .. 4k+3``, two rows per shard."""

    remote = True
    lookahead_batches = 3

    def __init__(self) -> None:
        self.plans: list[tuple[list[int], int]] = []

    def shard_groups(self, cache_pos: np.ndarray, sample_ids: np.ndarray) -> np.ndarray:
        return np.asarray(sample_ids) // 2

    def prefetch(self, groups: np.ndarray, first: int = 0, share: int = 1) -> None:
        self.plans.append((np.asarray(groups).tolist(), first))
        self.share = share


def _rows(k: int):
    ids = np.arange(4 * k, 4 * k + 4, dtype=np.int64)
    return np.zeros(4, dtype=np.int64), ids


def test_a_start_and_a_jump_name_the_first_batchs_shards_a_running_pipeline_does_not():
    reader = RecordingReader()
    ahead = ReadAhead(reader, _rows)  # type: ignore[arg-type]
    ahead.before(0)
    ahead.before(1)
    ahead.before(2)
    ahead.before(10)  # a resume elsewhere
    ahead.before(11)
    assert reader.plans == [
        ([0, 1, 2, 3, 4, 5], 2),  # a start: batch 0 reads shards 0 and 1
        ([2, 3, 4, 5, 6, 7], 0),
        ([4, 5, 6, 7, 8, 9], 0),
        ([20, 21, 22, 23, 24, 25], 2),  # the jump
        ([22, 23, 24, 25, 26, 27], 0),
    ]


def test_rows_computed_for_several_batches_at_once_plan_the_same():
    def many(k: int, n: int):
        return [_rows(j) for j in range(k, k + n)]

    one, at_once = RecordingReader(), RecordingReader()
    for reader, kwargs in ((one, {}), (at_once, {"many_rows": many})):
        ahead = ReadAhead(reader, _rows, **kwargs)  # type: ignore[arg-type]
        for k in (0, 1, 2, 3, 9, 10):
            ahead.before(k)
    assert at_once.plans == one.plans and len(one.plans) == 6


def test_a_start_given_the_batchs_rows_does_not_compute_them_again_and_plans_the_same():
    asked: list[int] = []

    def counted(k: int):
        asked.append(k)
        return _rows(k)

    given, computed = RecordingReader(), RecordingReader()
    for reader, rows in ((given, _rows), (computed, lambda k: None)):
        ahead = ReadAhead(reader, counted)  # type: ignore[arg-type]
        for k in (0, 1, 2, 10, 11):
            ahead.before(k, rows(k))
    assert given.plans == computed.plans
    assert asked[: asked.index(0)] == [1, 2, 3, 4, 11, 12, 13]  # batches 0 and 10 came with their rows


def test_the_loaders_loading_processes_are_handed_to_the_reader_with_each_plan():
    """A loading process of a loader with several plans its share of the node cache's prefetch bytes."""
    reader = RecordingReader()
    ReadAhead(reader, _rows, share=3).before(0)  # type: ignore[arg-type]
    assert reader.share == 3


def test_a_forked_child_withdraws_only_the_plans_it_made():
    """A loader a forked loading process inherits and collects (its ``__del__`` closes it) withdraws no plan there:
    the plan was its parent's, and the child's prefetcher (one per process) holds the child's own reads' plan."""
    reader = RecordingReader()
    ahead = ReadAhead(reader, _rows)  # type: ignore[arg-type]
    ahead.before(0)
    pid = os.fork()
    if pid == 0:  # the child: the inherited read-ahead's stop plans nothing; one that planned here withdraws
        code = 9
        try:
            ahead.stop()
            inherited = len(reader.plans)
            ahead.before(5)
            ahead.stop()
            code = 10 * inherited + len(reader.plans)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 13  # (before: 24, the parent's plan withdrawn in the child)
    ahead.stop()
    assert reader.plans[-1] == ([], 0)  # its own process withdraws it
