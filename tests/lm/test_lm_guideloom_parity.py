"""from_storage against guideloom 1.1.0: each expected value is what guideloom did in a differential run.

guideloom is not installed here, so its observed behaviour is written out plainly; each test names the case.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torch_drt import StatefulDataLoader
from torch_drt.lm import loader_kwargs_from_storage
from torch_drt.storage import DocumentStorage, DocumentStorageWriter, TokenStreamStorage, TokenStreamWriter


def rows(items):
    return [np.asarray(x).tolist() for x in items]


@pytest.fixture
def stream(tmp_path):
    def make(n_tokens: int, shard: int = 3) -> TokenStreamStorage:
        with TokenStreamWriter(tmp_path, f"s{n_tokens}", "int32", shard_elements=shard) as writer:
            writer.write(np.arange(1000, 1000 + n_tokens, dtype=np.int32))
        return TokenStreamStorage(tmp_path / f"s{n_tokens}")

    return make


@pytest.fixture
def docs(tmp_path):
    with DocumentStorageWriter(tmp_path, "docs", dtype="int32") as writer:
        for doc in ([], [100]):
            writer.write(np.asarray(doc, dtype=np.int32))
    return DocumentStorage(tmp_path / "docs")


def test_stream_without_sequence_length_is_a_value_error(stream):
    # guideloom 1.1.0, from_storage(StreamStorage, collate): ValueError (not TypeError)
    with pytest.raises(ValueError, match=r"^sequence_length must be specified for a stream storage$"):
        StatefulDataLoader.from_storage(stream(40), rows)


@pytest.mark.parametrize("drop_last", [True, False])
def test_fewer_windows_than_one_global_batch_is_refused(stream, drop_last):
    # guideloom 1.1.0, 4 tokens, sequence_length=4 (1 window), local_batch_size=3: ValueError whatever drop_last
    # (raised by open(), i.e. `with loader:`); torch_drt gave one padded batch [[window]] with drop_last=False
    with pytest.raises(ValueError, match=r"^The dataset has fewer elements \(1\) than the global batch-size \(3\)$"):
        StatefulDataLoader.from_storage(stream(4), rows, sequence_length=4, local_batch_size=3, drop_last=drop_last)


def test_fewer_documents_than_one_global_batch_is_refused(docs):
    # guideloom 1.1.0, 2 documents, local_batch_size=2, world_size=2, rank 1, drop_last=False, shuffled: ValueError
    with pytest.raises(ValueError, match=r"^The dataset has fewer elements \(2\) than the global batch-size \(4\)$"):
        StatefulDataLoader.from_storage(docs, rows, local_batch_size=2, rank=1, world_size=2, drop_last=False,
                                        shuffle=True, shuffle_seed=132)


def test_exactly_one_global_batch_still_loads(stream):
    # guideloom 1.1.0, 6 tokens, sequence_length=2, local_batch_size=3: [[1000, 1001], [1002, 1003], [1004, 1005]]
    loader = StatefulDataLoader.from_storage(stream(6), rows, sequence_length=2, local_batch_size=3)
    assert list(loader) == [[[1000, 1001], [1002, 1003], [1004, 1005]]]


def test_state_records_the_given_shuffle_seed_without_shuffle(stream):
    # guideloom 1.1.0, shuffle=False, shuffle_seed=0 (19 tokens, L=2, batch 3, world 2, drop_last=False):
    # state_dict()["shuffle_seed"] == 0 after each batch; torch_drt recorded a seed of its own
    loader = StatefulDataLoader.from_storage(stream(19), rows, sequence_length=2, local_batch_size=3, world_size=2,
                                             shuffle_seed=0, drop_last=False)
    it = iter(loader)
    assert next(it) == [[1000, 1001], [1004, 1005], [1008, 1009]]
    state = loader.state_dict()
    assert {k: state[k] for k in ("epoch", "observation_offset", "shuffle", "shuffle_seed", "drop_last")} == {
        "epoch": 0, "observation_offset": 6, "shuffle": False, "shuffle_seed": 0, "drop_last": False}


def test_pin_memory_without_cuda_is_a_value_error(stream, monkeypatch):
    # guideloom 1.1.0, pin_memory=True on a machine without CUDA (device defaults to cpu): ValueError
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"^pin_memory is set, but the device cpu is not CUDA$"):
        StatefulDataLoader.from_storage(stream(40), rows, sequence_length=4, pin_memory=True)


def test_device_defaults_to_the_current_cuda_device(stream, monkeypatch):
    # guideloom 1.1.0 from_storage(device=None): the current CUDA device when CUDA is available, else CPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    storage = stream(40)
    assert loader_kwargs_from_storage(storage, sequence_length=4)[1]["device"] == torch.device("cuda", 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert loader_kwargs_from_storage(storage, sequence_length=4)[1]["device"] is None  # CPU: no copy


def test_loader_is_a_context_manager(stream):
    # guideloom 1.1.0: `with loader:` opens and closes the reader (a stream storage loader must be opened)
    loader = StatefulDataLoader.from_storage(stream(8), rows, sequence_length=4, local_batch_size=2)
    with loader as entered:
        assert entered is loader
        assert list(loader) == [[[1000, 1001, 1002, 1003], [1004, 1005, 1006, 1007]]]
    assert loader.state_dict()["epoch"] == 1
