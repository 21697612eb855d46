"""Small tokenized corpora for the language-model tests: every token value is unique within a corpus."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from torch_drt.lm import MixerNode, PackerNode
from torch_drt.storage import DocumentStorage, DocumentStorageWriter, TokenStreamStorage, TokenStreamWriter

L = 64


def documents(n: int, seed: int, offset: int, max_len: int = 150) -> list[np.ndarray]:
    """``n`` documents of 0..max_len tokens; tokens run from ``offset`` upwards, never repeating."""
    sizes = np.random.default_rng(seed).integers(0, max_len, n)
    starts = offset + np.concatenate([[0], np.cumsum(sizes)])
    return [np.arange(starts[i], starts[i + 1], dtype=np.int32) for i in range(n)]


def write_documents(root: Path, name: str, docs: list[np.ndarray]) -> DocumentStorage:
    with DocumentStorageWriter(root, name, dtype="int32") as writer:
        for doc in docs:
            writer.write(doc)
    return DocumentStorage(root / name)


def write_stream(root: Path, name: str, tokens: np.ndarray, shard_elements: int = 1000) -> TokenStreamStorage:
    with TokenStreamWriter(root, name, "int32", shard_elements=shard_elements) as writer:
        writer.write(tokens)
    return TokenStreamStorage(root / name)


def write_corpora(root: Path) -> dict[str, Path]:
    """Three corpora: two document storages and a token stream (crossing shard edges)."""
    write_documents(root, "web", documents(300, 1, 0))
    write_documents(root, "code", documents(120, 2, 10_000_000, max_len=300))
    write_stream(root, "books", np.arange(20_000_000, 20_009_000, dtype=np.int32))
    return {name: root / name for name in ("web", "code", "books")}


def mixer(paths: dict[str, Path], weights: dict[str, float] | None = None, **kw) -> MixerNode:
    """The test mix: best fit, shuffled first fit, and concatenate-and-chunk of the stream."""
    sources = {
        "web": PackerNode(DocumentStorage(paths["web"]), L, method="best_fit", buffer_size=8),
        "code": PackerNode(DocumentStorage(paths["code"]), L, method="first_fit", buffer_size=4, shuffle=True, seed=5),
        "books": PackerNode(TokenStreamStorage(paths["books"]), L, method="concat", shuffle=True, seed=9),
    }
    return MixerNode(sources, weights or {"web": 6, "code": 3, "books": 1}, seed=11, **kw)


def digest(seq) -> str:
    """A hash of every field of a packed sequence."""
    h = hashlib.sha1()
    for a in seq:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def global_stream(node, count: int) -> list:
    """The first ``count`` sequences of a single-rank node, from its current state."""
    return [next(node) for _ in range(count)]
