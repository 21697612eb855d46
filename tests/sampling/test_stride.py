"""sampling.stride: the rank arithmetic of streams, against the definitions written out."""

from __future__ import annotations

import itertools

import pytest

from torch_drt.sampling.stride import (
    consumer_number,
    owns,
    rank_offset,
    rank_share,
    stride_index,
    stride_position,
    stride_positions,
    stride_range,
    world_total,
)


@pytest.mark.parametrize("world_size", [1, 2, 3, 7])
def test_the_ranks_strided_positions_partition_the_stream(world_size):
    stream = range(5 * world_size + 3)
    for rank in range(world_size):
        mine = [p for p in stream if owns(p, rank=rank, world_size=world_size)]
        count = len(mine)
        assert stride_positions(0, count, rank=rank, world_size=world_size).tolist() == mine
        assert list(stride_range(0, count, rank=rank, world_size=world_size)) == mine
        assert [stride_position(k, rank=rank, world_size=world_size) for k in range(count)] == mine
        assert [stride_index(p, rank=rank, world_size=world_size) for p in mine] == list(range(count))
        assert list(stride_range(2, 3, rank=rank, world_size=world_size)) == mine[2:5]


SHARES = list(itertools.product([0, 1, 9, 10, 37], [1, 2, 4], [1, 3]))


@pytest.mark.parametrize(("count", "world_size", "multiple"), SHARES)
def test_rank_shares(count, world_size, multiple):
    shares = [len(range(r, count, world_size)) for r in range(world_size)]  # strided: the largest share
    assert rank_share(count, world_size=world_size) == max(shares)
    equal = rank_share(count, world_size=world_size, multiple=multiple, drop_last=True)
    assert equal % multiple == 0 and world_total(equal, world_size=world_size) <= count
    assert world_total(equal + multiple, world_size=world_size) > count  # the largest such share


def test_contiguous_blocks_and_consumer_numbers():
    per_rank, world_size = 4, 3
    starts = [rank_offset(r, per_rank=per_rank) for r in range(world_size)]
    assert starts == [0, 4, 8] and world_total(per_rank, world_size=world_size) == 12
    numbers = [consumer_number(r, i, per_rank=2) for r in range(world_size) for i in range(2)]
    assert numbers == list(range(6))
