"""Reusing a published cache is logged on the ``torch_drt.cache`` logger (issue 12: cache open/reuse/publish)."""

from __future__ import annotations

import logging

from conftest import QUIET, ListSource

import torch_drt as drt


def test_reusing_a_published_cache_is_logged(tmp_path, runtime, caplog):
    caplog.set_level(logging.INFO, logger="torch_drt")
    config = drt.ReaderConfig(seed=0)
    runtime.from_cache_sources([ListSource("d", 10)], tmp_path, writer_config=QUIET, reader_config=config)
    assert not [r for r in caplog.records if "reused" in r.getMessage()]
    caplog.clear()
    again = runtime.from_cache_sources([ListSource("d", 10)], tmp_path, writer_config=QUIET, reader_config=config)
    assert len(again) == 10
    reused = [r.getMessage() for r in caplog.records if r.name == "torch_drt.cache" and "reused" in r.getMessage()]
    assert reused == [f"reused the cache of source 'd' at {tmp_path / 'd'}"]
