"""The LM engineer's loader needs: a node checkpointed exactly at an epoch's end keeps its own epoch count; process
workers send a node batch's results back, never its items."""

from __future__ import annotations

import pickle

from torchdata.nodes import BaseNode

from torch_drt import StatefulDataLoader


class Epochs(BaseNode):
    """Yields ``epoch * 100 + i`` for i < 3; ``reset(None)`` after a started epoch starts the next one."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch, self.i, self.started = 0, 0, False

    def reset(self, initial_state=None):
        super().reset(initial_state)
        if initial_state is not None:
            self.epoch, self.i, self.started = initial_state["epoch"], initial_state["i"], initial_state["started"]
        elif self.started:
            self.epoch, self.i = self.epoch + 1, 0
        else:
            self.started = True

    def next(self):
        if self.i >= 3:
            raise StopIteration
        self.i += 1
        return self.epoch * 100 + self.i - 1

    def get_state(self):
        return {"epoch": self.epoch, "i": self.i, "started": self.started}


def test_a_checkpoint_at_an_epochs_end_starts_the_nodes_next_epoch():
    loader = StatefulDataLoader(Epochs(), batch_size=2, collate_fn=list)
    assert list(loader) == [[0, 1], [2]]
    state = loader.state_dict()
    assert state["epoch"] == 1
    resumed = StatefulDataLoader(Epochs(), batch_size=3, collate_fn=list, num_workers=2)
    resumed.load_state_dict(state)
    assert list(resumed) == [[100, 101, 102]]
    assert list(resumed) == [[200, 201, 202]]
    assert list(loader) == [[100, 101], [102]]


def test_a_mid_epoch_checkpoint_still_resumes_in_the_epoch():
    loader = StatefulDataLoader(Epochs(), batch_size=1, collate_fn=list)
    list(loader)
    it = iter(loader)
    assert next(it) == [100]
    resumed = StatefulDataLoader(Epochs(), batch_size=2, collate_fn=list)
    resumed.load_state_dict(loader.state_dict())
    assert list(resumed) == [[101, 102]]


UNPICKLED = [0]


def rebuild(value: int) -> Item:
    UNPICKLED[0] += 1
    return Item(value)


class Item:
    """Counts its unpickling in this process (the worker processes count their own)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __reduce__(self):
        return rebuild, (self.value,)


class Items(BaseNode):
    def __init__(self) -> None:
        super().__init__()
        self.i = 0

    def reset(self, initial_state=None):
        super().reset(initial_state)
        self.i = 0 if initial_state is None else initial_state["i"]

    def next(self):
        if self.i >= 8:
            raise StopIteration
        self.i += 1
        return Item(self.i - 1)

    def get_state(self):
        return {"i": self.i}


def values(items: list[Item]) -> list[int]:
    return [item.value for item in items]


def test_process_workers_send_back_the_batch_not_the_items():
    UNPICKLED[0] = 0
    loader = StatefulDataLoader(Items(), batch_size=4, num_workers=2, collate_fn=values,
                                worker_method="process", multiprocessing_context="fork")
    assert list(loader) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    loader.close()
    assert UNPICKLED[0] == 0  # the items went to the workers; only the collated batches came back
    assert pickle.loads(pickle.dumps(Item(1))).value == 1 and UNPICKLED[0] == 1  # the counter counts
