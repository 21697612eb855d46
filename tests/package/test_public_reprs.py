"""Every public object prints as a bounded, informative one-liner that holds no secret (never ``<... at 0x...>``)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from typing import Any

import numpy as np
import pytest
from conftest import ListSource

import torch_drt
import torch_drt as drt
from torch_drt.locations.location import Location

SECRET = "s3cr3t-T0KEN"
MAX_REPR = 400
SETTINGS_REPR = 1000  # settings objects print every field: a fixed set, so still bounded
MULTILINE = {"Compose"}  # one transform a line, as torchvision's Compose prints
PROTOCOLS = {"CacheSource", "SizedTorchIterableDataset", "TokenSource"}  # typing protocols: nothing to build


def _public_classes() -> dict[str, type]:
    """``module.Name`` -> class, for every class in ``torch_drt.__all__`` and its subpackages' ``__all__``."""
    names = ["torch_drt"] + [
        m.name for m in pkgutil.iter_modules(torch_drt.__path__, "torch_drt.")
        if not m.name.rpartition(".")[2].startswith("_")
    ]
    found: dict[str, type] = {}
    for module_name in names:
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # an optional dependency (ray, lightning) that is not installed
            continue
        for attr in getattr(module, "__all__", []):
            obj = getattr(module, attr)
            if inspect.isclass(obj) and obj.__module__.startswith("torch_drt") and obj not in found.values():
                found[f"{module_name}.{attr}"] = obj
    return found


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Any]:
    """One instance of every public class that is cheap to build, by class name; secrets in every input."""
    from torch_drt import build, lm, nodes, publish, random, sampling, sources, storage, transforms
    from torch_drt.cache import CacheReader, open_cache, open_cache_set, publish_cache_set
    from torch_drt.demo import ShapesSource

    tmp = tmp_path_factory.mktemp("reprs")
    rt = drt.DatasetRuntime(1)
    quiet = drt.WriterConfig(show_progress=False)
    (a,) = rt.write_cache(ListSource("a", 20), tmp / "caches", writer_config=quiet)
    (b,) = rt.write_cache(ListSource("b", 5), tmp / "caches", writer_config=quiet)
    publish_cache_set(tmp / "caches" / "set", [a.path, b.path])
    dataset = rt.cached_dataset(a.path, reader_config=drt.ReaderConfig(seed=0))
    layout = open_cache(a.path)
    docs = storage.DocumentStorageWriter(tmp / "docs", "d", dtype="int32", writer_config=quiet)
    for n in (5, 9, 3):
        docs.write(np.arange(n, dtype=np.int32))
    docs.close()
    stream = storage.TokenStreamWriter(tmp / "tokens", "t", dtype="int32")
    stream.write(np.arange(100, dtype=np.int32))
    stream.close()
    tokens = storage.TokenStreamStorage(tmp / "tokens" / "t")
    document_storage = storage.DocumentStorage(tmp / "docs" / "d")
    packer = lm.PackerNode(document_storage, 8)
    sampler = nodes.CacheSampler(dataset)
    local = Location.parse(a.path).backend()
    remote = Location.parse("s3://bucket/p", storage_options={"secret": SECRET}, remote_config=drt.RemoteConfig(
        cache_dir=str(tmp / "node"))).backend()
    objects = [*_foreign_datasets(tmp), Location.parse("s3://bucket/p", storage_options={"secret": SECRET}),
        local, local.open("manifest.json", local.size("manifest.json")), remote, remote.node, remote.prefetcher,
        rt, dataset, layout, CacheReader([layout]), open_cache_set(tmp / "caches" / "set")[0],
        open_cache_set(tmp / "caches" / "set")[0].parts[0], next(iter(dataset)), next(dataset.iter_batches(4)),
        drt.ReaderConfig(seed=0), drt.WriterConfig(), drt.ShardCompression("zstd"), drt.WriterProfilerConfig(),
        drt.RemoteConfig(cache_dir=str(tmp / "node")),
        drt.StatefulDataLoader(list(range(10)), batch_size=2),
        sources.HttpDataset([f"http://127.0.0.1:1/x?token={SECRET}"], headers={"Authorization": f"Bearer {SECRET}"}),
        sources.FileDataset([str(tmp / "x")]),
        sources.ObjectStoreDataset("memory://bucket", ["k"], options={"secret": SECRET, "key": SECRET}),
        sources.RetryPolicy(3, 0.1, 5), sources.Template(f"http://h/{{name}}?sig={SECRET}", {"name": ["a"]}, "url"),
        transforms.ImageCollator(), transforms.Compose([transforms.HFlip(), transforms.ToFloat()]),
        sampler, nodes.CacheReaderNode(sampler, dataset),
        packer, lm.MixerNode({"x": packer, "y": lm.PackerNode(document_storage, 8)}, {"x": 1.0, "y": 2.0}),
        lm.ArraySource(np.arange(10, dtype=np.int32), np.array([0, 4, 10])),
        lm.DocumentSource(document_storage), lm.TokenStreamSource(tokens, 8), lm.PackedWindows(tokens, 8),
        lm.PackedWindows(tokens, 8).__getitems__(list(range(3))),
        document_storage, docs, stream, tokens, storage.TokenStreamDataset(tokens, 8),
        sampling.WeightedDraws(np.ones(5), 0), publish.StagingDir(tmp, "s"), random.BatchSlot(),
        ShapesSource(10), build.RowRange(list(range(10)), 0, 10), build.ColumnsToInput(), *_lightning_callbacks(),
    ]
    return {type(o).__name__: o for o in objects}


def _lightning_callbacks() -> list[Any]:
    try:
        from torch_drt.lightning import LoaderStatsCallback
    except ImportError:  # lightning is an optional dependency
        return []
    return [LoaderStatsCallback(10)]


def _foreign_datasets(tmp) -> list[Any]:
    """One dataset of every foreign format: Parquet, Arrow and a tar written here, MDS and LitData fixtures."""
    import io
    import tarfile
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    from torch_drt import formats

    table = pa.table({"x": list(range(6))})
    pq.write_table(table, tmp / "t.parquet", row_group_size=3)
    with pa.ipc.new_file(tmp / "t.arrow", table.schema) as writer:
        writer.write_table(table)
    with tarfile.open(tmp / "s.tar", "w") as tar:
        for key in ("a", "b"):
            info = tarfile.TarInfo(f"{key}.txt")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"z"))
    fixtures = Path(__file__).parents[1] / "formats" / "fixtures"
    return [
        formats.ParquetDataset(str(tmp / "t.parquet")), formats.ArrowDataset(str(tmp / "t.arrow")),
        formats.WebDatasetShards([str(tmp / "s.tar")]), formats.MDSDataset(str(fixtures / "mds" / "plain")),
        formats.LitDataset(str(fixtures / "litdata" / "plain")),
        formats.convert(str(fixtures / "mds" / "plain"), str(tmp / "converted"),
                        writer_config=drt.WriterConfig(show_progress=False)),
    ]


def test_every_public_object_prints_short_informative_and_without_secrets(built):
    bad = {}
    for name, obj in built.items():
        text = repr(obj)
        if (
            len(text) > (SETTINGS_REPR if name == "RemoteConfig" else MAX_REPR)
            or ("\n" in text and name not in MULTILINE)
            or re.search(r" at 0x[0-9a-f]+", text)
            or SECRET in text
            or not text.startswith(type(obj).__name__)
        ):
            bad[name] = text[:500]
    assert bad == {}, "\n".join(f"{k}: {v}" for k, v in bad.items())


def test_every_public_class_is_built_above_or_named_why_not(built):
    not_built = {
        name for name, cls in _public_classes().items()
        if cls.__name__ not in built and cls.__name__ not in PROTOCOLS and not _is_cheaply_described(cls)
    }
    assert not_built <= KNOWN_UNBUILT, sorted(not_built - KNOWN_UNBUILT)


def _is_cheaply_described(cls: type) -> bool:
    """Named tuples, exceptions and transforms print their fields or message by construction (tested where they
    live)."""
    return issubclass(cls, tuple | BaseException) or cls.__module__.startswith("torch_drt.transforms")


# built elsewhere with servers, processes or optional packages; their reprs are covered by their own tests
KNOWN_UNBUILT = {
    "torch_drt.build.BuildReport", "torch_drt.build.PartOutcome", "torch_drt.nodes.BatchPlanner",
    "torch_drt.lightning.CacheDataModule", "torch_drt.nodes.ItemBatcher", "torch_drt.nodes.OrderedMapper",
    "torch_drt.nodes.WeightedMixer", "torch_drt.storage.DocumentDataset",
    "torch_drt.formats.ShardSet",  # the base of the foreign formats, each built above
    "torch_drt.locations.CacheBackend", "torch_drt.locations.StoredFile",  # the bases of the backends built above
}
