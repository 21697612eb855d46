"""What ``to_torch_dataloader``'s arguments left out mean for a dataset, by the name its class attribute
``loader_defaults`` gives: ``"torch_drt"`` here; ``torch_drt.compat.dataset_rt`` registers ``"dataset-rt"``."""

from __future__ import annotations

from typing import Literal, NamedTuple

PER_RANK, PER_WORKER = "per_rank", "per_worker"  # the streams' layouts (``settings["streams"]``)


class LoaderStyle(NamedTuple):
    """The defaults of a dataset's loaders.

    Attributes:
        shuffle: ``shuffle`` left out (None: the dataset's ``ReaderConfig.shuffle``).
        seed: ``seed`` left out (None: the ``ReaderConfig``'s; ``"random"``: drawn for each loader).
        verbose: ``verbose`` left out.
        logger: the logger of the ``verbose`` events.
        context: the start method of loading processes when ``multiprocessing_context`` is left out.
        streams: ``PER_RANK`` (one stream per rank, dealt to the processes) or ``PER_WORKER`` (one per process).
    """

    shuffle: bool | None
    seed: int | Literal["random"] | None
    verbose: bool
    logger: str
    context: str
    streams: str


# the dataset's ReaderConfig decides shuffle and seed; quiet; torch's default start method; streams independent of
# num_workers
_STYLES: dict[str, LoaderStyle] = {
    "torch_drt": LoaderStyle(None, None, False, "torch_drt.cache.loader", "inherit", PER_RANK),
}


def register_style(name: str, style: LoaderStyle) -> None:
    """Make ``name`` a value of ``CachedDataset.loader_defaults`` meaning ``style``."""
    _STYLES[name] = style


def loader_style(name: str) -> LoaderStyle:
    """The style ``loader_defaults`` names.

    Raises:
        ValueError: for a name nothing registered.
    """
    style = _STYLES.get(name)
    if style is None:
        raise ValueError(f"loader_defaults={name!r} names no loader style (known: {sorted(_STYLES)})")
    return style
