"""torch_drt's loaders: one pipeline of nodes and stages (``base.PipelineLoader``), its workers and its state.

The public names import torch: they load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch_drt._lazy import lazy_names

if TYPE_CHECKING:
    from torch_drt.loader._collate import default_collate
    from torch_drt.loader.dataloader import StatefulDataLoader
    from torch_drt.loader.transform_rule import transform_hook
    from torch_drt.loader.worker_info import get_worker_info

__all__ = ["StatefulDataLoader", "default_collate", "get_worker_info", "transform_hook"]

_LAZY = {
    "StatefulDataLoader": "torch_drt.loader.dataloader",
    "default_collate": "torch_drt.loader._collate",
    "get_worker_info": "torch_drt.loader.worker_info",
    "transform_hook": "torch_drt.loader.transform_rule",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)
