"""What a remote cache's first batch imports: not pandas (pyarrow imports it for ``pa.array`` and ``to_numpy``:
0.1-0.3 s before the first batch of a fresh process)."""

from __future__ import annotations

from remote_fixtures import moto_fixture, options, proxy_fixture, publish_local, remote_config  # noqa: F401
from script_runner import run_script


def test_a_remote_caches_first_batch_imports_no_pandas(runtime, tmp_path, moto_endpoint, proxy):
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=64)
    config = remote_config(tmp_path)
    result = run_script(f"""
        import sys
        import numpy as np
        import torch_drt as drt

        assert "pandas" not in sys.modules, "imported with torch_drt"
        ds = drt.DatasetRuntime(1).cached_dataset({url!r}, reader_config=drt.ReaderConfig(seed=0),
                                                  storage_options={options(proxy)!r},
                                                  remote_config=drt.RemoteConfig(**{config.__dict__!r}))
        loader = ds.to_torch_dataloader(sample_transform_fn=lambda s: np.frombuffer(s.data, np.uint8)[:1],
                                        batch_size=16, num_workers=0)
        batch = next(iter(loader))
        assert len(batch) == 16
        print("pandas" in sys.modules, "s3fs" in sys.modules)
    """, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["False", "True"], result.stdout  # read through s3fs, without pandas


def test_loading_processes_first_batches_import_no_numpy_ma(runtime, tmp_path, moto_endpoint, proxy):
    """numpy 2's ``np.unique`` imports numpy.ma on its first call (20 ms of CPU in each loading process)."""
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=64, max_shard_bytes=512)
    config = remote_config(tmp_path)
    result = run_script(f"""
        import sys
        import torch_drt as drt

        def seen(sample):
            return "numpy.ma" in sys.modules

        for workers in (0, 2):
            ds = drt.DatasetRuntime(1).cached_dataset({url!r}, reader_config=drt.ReaderConfig(seed=0, shard_window=2),
                                                      storage_options={options(proxy)!r},
                                                      remote_config=drt.RemoteConfig(**{config.__dict__!r}))
            loader = ds.to_torch_dataloader(sample_transform_fn=seen, collate_fn=list, batch_size=16,
                                            num_workers=workers, multiprocessing_context="fork")
            print(workers, any(any(batch) for batch in loader), "numpy.ma" in sys.modules)
    """, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["0", "False", "False", "2", "False", "False"], result.stdout
