"""The draws torch's ``DataLoader`` makes from the loader's ``generator`` (None: torch's global one), made alike.

torch's loader draws nothing when it is built. Each ``iter()`` that starts an iterator (every one; the first only,
with persistent workers) draws the workers' base seed, one int64, from ``generator``; ``shuffle=True`` without a
generator draws one more per epoch from the global generator (``RandomSampler``'s seed). A script's later random
draws (a model's initialisation, dropout, augmentations in the loop) depend on them, so torch_drt's loader makes the
same draws at the same points (``draw_at_iter``). Its own seed, unless given, is read without moving the
generator when it is built (``peek_seed``: a provisional one) and taken from the first ``iter()``'s draw
(``loader_seed``: the same value when nothing was drawn in between), as torch takes a shuffled loader's order
at ``iter()``: two loaders built one after the other still shuffle differently. With ``shuffle=True`` and a
``generator``, torch's ``RandomSampler`` draws a permutation from it, which torch_drt's keyed permutation does
not: the generator's state after an epoch differs.
"""

from __future__ import annotations

import torch

from torch_drt.sampling._counter import derive_key

_SEED_DOMAIN = 0x5EED  # separates loader seeds from other keys derived from a draw
_MASK = (1 << 63) - 1


def _draw(generator: torch.Generator | None) -> int:
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


def loader_seed(drawn: int) -> int:
    """The loader seed that a base-seed draw of ``drawn`` gives."""
    return derive_key(_SEED_DOMAIN, drawn & _MASK) & _MASK


def peek_seed(generator: torch.Generator | None) -> int:
    """``loader_seed`` of ``generator``'s next draw (the global generator's when None), its state put back."""
    state = torch.get_rng_state() if generator is None else generator.get_state()
    try:
        drawn = _draw(generator) & _MASK
    finally:
        if generator is None:
            torch.set_rng_state(state)
        else:
            generator.set_state(state)
    return loader_seed(drawn)


def draw_at_iter(loader: object, first: bool) -> int | None:
    """What torch's ``iter(loader)`` draws: the base seed (each iterator; the first only with persistent workers)
    and, shuffled without a generator, ``RandomSampler``'s seed; return the base seed's draw (None if none)."""
    generator = getattr(loader, "generator", None)
    drawn = None
    if first or not (getattr(loader, "persistent_workers", False) and getattr(loader, "num_workers", 0)):
        drawn = _draw(generator)
    if getattr(loader, "shuffle", False) and generator is None:
        _draw(None)
    return drawn
