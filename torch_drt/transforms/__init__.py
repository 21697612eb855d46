"""Image transforms with Pillow's and torchvision's values, and the ImageCollator.

Heavy work runs in Pillow's decoders and resamplers and in torch kernels, which release the GIL, so the
loader's worker threads decode and transform in parallel.
"""

from torch_drt.transforms._image import MAX_ALLOC, MAX_BATCH_ALLOC, MAX_SIDE, Image
from torch_drt.transforms.base import Compose, Transform
from torch_drt.transforms.collate import ImageBatch, ImageCollator
from torch_drt.transforms.color import ToGray, ToRgb, ToRgba
from torch_drt.transforms.color_jitter import ColorJitter, RandomGrayscale
from torch_drt.transforms.decode import Decode
from torch_drt.transforms.dtype import Normalize, ToChw, ToFloat, ToHwc
from torch_drt.transforms.erasing import RandomErasing
from torch_drt.transforms.geometry import CenterCrop, Crop, HFlip, Pad, PadTo, Rotate90, VFlip
from torch_drt.transforms.random_apply import RandomApply, RandomChoice
from torch_drt.transforms.random_crop import RandomCrop, RandomResizedCrop
from torch_drt.transforms.random_flip import RandomHorizontalFlip, RandomVerticalFlip
from torch_drt.transforms.resize import Resize

__all__ = [
    "MAX_ALLOC",
    "MAX_BATCH_ALLOC",
    "MAX_SIDE",
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "Crop",
    "Decode",
    "HFlip",
    "Image",
    "ImageBatch",
    "ImageCollator",
    "Normalize",
    "Pad",
    "PadTo",
    "RandomApply",
    "RandomChoice",
    "RandomCrop",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "RandomVerticalFlip",
    "Resize",
    "Rotate90",
    "ToChw",
    "ToFloat",
    "ToGray",
    "ToHwc",
    "ToRgb",
    "ToRgba",
    "Transform",
    "VFlip",
]
