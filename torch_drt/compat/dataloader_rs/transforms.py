"""dataloader-rs's ``transforms`` module: torch_drt's transforms, with the same names and values."""

from torch_drt import transforms as _transforms

__all__ = sorted(name for name in _transforms.__all__ if name != "Transform")  # dataloader-rs has no base class

globals().update({name: getattr(_transforms, name) for name in __all__})
