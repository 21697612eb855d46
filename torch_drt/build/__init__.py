"""Building cache sets at scale: one part per input, written in parallel (torchrun ranks, Ray tasks, local worker
processes), resumable.

``torch_drt.ray.build_cache_set`` builds from a ``ray.data.Dataset``; ``build_cache_set`` here builds from
sources or row ranges in this process, in local worker processes (``num_workers``) or across the ranks of a
torchrun job.
"""

from torch_drt.build.builder import build_cache_set
from torch_drt.build.plan import DEFAULT_ROWS_PER_PART, ColumnsToInput, RowRange, part_name, split_rows
from torch_drt.build.report import BuildReport, PartOutcome

__all__ = [
    "DEFAULT_ROWS_PER_PART",
    "BuildReport",
    "ColumnsToInput",
    "PartOutcome",
    "RowRange",
    "build_cache_set",
    "part_name",
    "split_rows",
]
