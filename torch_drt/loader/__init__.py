"""torch_drt's loaders: one pipeline of nodes and stages (``base.PipelineLoader``), its workers and its state."""

from torch_drt.loader._fetch import default_collate
from torch_drt.loader.dataloader import StatefulDataLoader

__all__ = ["StatefulDataLoader", "default_collate"]
