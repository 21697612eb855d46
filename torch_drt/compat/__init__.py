"""Drop-in entry points for code written against dataset-rt and dataloader-rs: change one import line.

- ``torch_drt.compat.dataset_rt``: dataset-rt 0.4's names; ``get_metadata()`` returns a polars ``DataFrame`` there.
- ``torch_drt.compat.dataloader_rs``: dataloader-rs 0.2/0.3's names and semantics (``PyDataloader`` batches are
  plain lists, each ``iter()`` an independent epoch, lengths read at ``iter()``/``len()``).

``docs/migrating.md`` lists every public name and argument of both with how torch_drt serves it.
"""

__all__: list[str] = []
