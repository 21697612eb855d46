"""The CLI (cache build/info/verify/ls) and CacheDataModule take URLs with storage options."""

from __future__ import annotations

import json

import pytest
import torch
from remote_fixtures import BUCKET, moto_fixture, options, proxy_fixture, publish_local, remote_config, unique  # noqa: F401

import torch_drt as drt
from torch_drt.cli import main

pytestmark = pytest.mark.timeout(180)


def test_cache_build_info_verify_and_ls_at_a_url(tmp_path, proxy, capsys, monkeypatch):
    monkeypatch.setenv("TORCH_DRT_NODE_CACHE", str(tmp_path / "node"))
    source = tmp_path / "files"
    source.mkdir()
    for i in range(12):
        (source / f"{i:02d}.txt").write_bytes(bytes([i]) * (i + 1))
    name = unique("cli")
    flag = ["--storage-options", json.dumps(options(proxy))]
    root = f"s3://{BUCKET}/cli-root"
    assert main(["cache", "build", root, str(source), "--name", name, "--quiet", *flag]) == 0
    assert f"wrote 12 samples to {root}/{name}" in capsys.readouterr().out
    assert main(["cache", "build", root, str(source), "--name", name, "--quiet", *flag]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["cache", "info", f"{root}/{name}", *flag]) == 0
    out = capsys.readouterr().out
    assert f"path:        {root}/{name}" in out and "samples:     12" in out
    assert main(["cache", "verify", f"{root}/{name}", *flag]) == 0
    assert capsys.readouterr().out.startswith(f"ok      {root}/{name}")
    assert main(["cache", "ls", root, *flag]) == 0
    assert name in capsys.readouterr().out
    assert main(["cache", "info", f"{root}/absent", *flag]) == 1
    assert "manifest is missing" in capsys.readouterr().err
    assert main(["cache", "info", f"{root}/{name}", "--storage-options", "[1]"]) == 2
    assert "must be a JSON object" in capsys.readouterr().err


def transform(sample):
    return torch.tensor(sample.sample_id)


def test_cache_data_module_reads_caches_at_urls(runtime, tmp_path, moto_endpoint, proxy):
    pytest.importorskip("lightning")
    from torch_drt.lightning import CacheDataModule

    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=64)
    kwargs = dict(batch_size=16, seed=3, sample_transform_fn=transform)
    remote = CacheDataModule([url], storage_options=options(proxy), remote_config=remote_config(tmp_path), **kwargs)
    mine = CacheDataModule([local], **kwargs)
    assert [b.tolist() for b in remote.train_dataloader()] == [b.tolist() for b in mine.train_dataloader()]
    assert isinstance(remote._train, drt.CachedDataset) and remote.paths == [url]
