"""Memory limits cover every stage of a pipeline: each transform refuses, before allocating, work over its limit.

Peak memory is measured in a child process (the high-water mark of its resident memory, reset before each case),
which also runs under a data-size limit so that a regression fails the test instead of exhausting the machine.
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from forked_runner import run_forked
from PIL import Image as P

from torch_drt import ImageCollator
from torch_drt import transforms as T

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20

_CHILD = r"""
import ctypes, json, pickle, re, resource, sys
from torch_drt import transforms as T

ctypes.CDLL("libc.so.6").malloc_trim(0)  # the heap's free pages inherited from pytest go: reused, they would not count

def kb(key):
    return int(re.search(key + r":\s+(\d+)", open("/proc/self/status").read()).group(1))

cases = pickle.load(open(sys.argv[1], "rb"))
for warmup, _, pipeline in cases:  # first-use initialisation (codec modules, kernels) is not what is measured
    try:
        pipeline(warmup)
    except ValueError:
        pass
guard = (kb("VmData") + 2048 * 1024) * 1024  # 2 GiB over what the imports use
resource.setrlimit(resource.RLIMIT_DATA, (guard, guard))
for _, data, pipeline in cases:
    open("/proc/self/clear_refs", "w").write("5")  # reset the high-water mark to the current resident size
    before = kb("VmRSS")
    try:
        out = pipeline(data)
        outcome = f"ok {tuple(out.shape)}"
    except ValueError as e:
        outcome = f"ValueError: {e}"
    except BaseException as e:
        outcome = f"{type(e).__name__}: {e}"
    out = None
    print(json.dumps([outcome, (kb("VmHWM") - before) * 1024]), flush=True)
"""


def measure(cases: list[tuple[object, object, object]], tmp_path: Path, fresh: bool = False) -> list[tuple[str, int]]:
    """Run each (warm-up input, input, pipeline) in a child process; return (outcome, peak bytes) for each.

    The child is forked (a fresh interpreter costs seconds to import torch); ``fresh``: a fresh interpreter, exact to
    the page (what a forked child allocates besides, pages of the heap it inherited, is a few dozen KB).
    """
    path = tmp_path / "cases.pkl"
    path.write_bytes(pickle.dumps(cases))
    if fresh:
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, cwd=ROOT,
                              timeout=600)
    else:
        proc = run_forked(f"import sys; sys.argv[1:] = [{str(path)!r}]\n" + _CHILD, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [tuple(json.loads(line)) for line in proc.stdout.splitlines()]


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def flat_png(width: int, height: int) -> bytes:
    """An RGB PNG of one grey level, a few dozen bytes for any size."""
    raw = (b"\x00" + b"\x80" * (width * 3)) * height
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw, 9)) + _chunk(b"IEND", b"")


# a 38-byte lossless WebP of 8000 x 8000 pixels of one colour (Pillow, lossless=True, quality=0, method=0)
WEBP_BOMB = bytes.fromhex("524946461e000000574542505650384c110000002f3fdfcf0707508f22d7a3ff8188e87f0000")


def encoded(arr: np.ndarray, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    P.fromarray(arr).save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def hostile_cases() -> list[tuple[object, object, object]]:
    tall = flat_png(1, 16384)
    assert len(tall) < 200
    small_webp = encoded(np.zeros((20, 30, 3), np.uint8), "WEBP", lossless=True)
    decode_resize = T.Compose([T.Decode(), T.Resize(224)])
    return [
        (flat_png(3, 40), tall, decode_resize),  # 224 x 3,670,016 x 3: 2.4 GB, 4.9 GB peak before the fix
        (small_webp, WEBP_BOMB, T.Decode()),  # 8000 x 8000: 1.2 GB peak in Pillow before the fix
        (small_webp, WEBP_BOMB, decode_resize),
    ]


def absurd_cases() -> list[tuple[object, object, object]]:
    image = T.Image.from_array(np.full((4, 6, 3), 7, np.uint8))
    warmup = T.Image.from_array(np.zeros((2, 2, 3), np.uint8))
    pipelines = [T.Pad(20_000), T.PadTo(30_000, 30_000), T.PadTo(30_000, 30_000, fill=3, anchor="center"),
                 T.Crop(-5, -5, 20_000, 20_000), T.CenterCrop(20_000), T.Resize((20_000, 20_000)),
                 T.Resize(20_000, interpolation="lanczos3"), T.Resize((20_000, 20_000), antialias=False),
                 T.Compose([T.PadTo(30_000, 30_000), T.ToFloat(), T.Normalize([0.5] * 3, [0.5] * 3), T.ToChw()]),
                 T.RandomCrop(20_000, pad_if_needed=True), T.RandomResizedCrop(20_000)]
    return [(warmup, image, p) for p in pipelines]


def ordinary_cases() -> list[tuple[object, object, object]]:
    rng = np.random.default_rng(0)
    photo = np.kron(rng.integers(0, 256, (63, 48, 3), dtype=np.uint8), np.ones((48, 63, 1), np.uint8))  # 3024x3024
    small = encoded(photo[:64, :64], "JPEG")
    train = T.Compose([T.Decode(), T.Resize(256), T.CenterCrop(224), T.ToFloat(), T.Normalize([0.5] * 3, [0.5] * 3)])
    return [(small, encoded(photo, "JPEG", quality=90), train),
            (small, encoded(photo, "JPEG", quality=90, progressive=True), train),
            (encoded(photo[:64, :64], "PNG"), encoded(photo[:2160, :2880], "PNG"), train),  # 6 MP PNG
            (encoded(photo[:64, :64], "WEBP"), encoded(photo[:3000, :3000], "WEBP"), train)]  # 9 MP WebP


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, list[tuple[str, int]]]:
    """Every case of this module measured in one child process (a child costs seconds to start)."""
    groups = {"hostile": hostile_cases(), "absurd": absurd_cases(), "ordinary": ordinary_cases()}
    results = measure([c for cases in groups.values() for c in cases], tmp_path_factory.mktemp("memory"))
    out, start = {}, 0
    for name, cases in groups.items():
        out[name], start = results[start : start + len(cases)], start + len(cases)
    return out


def test_hostile_inputs_are_refused_before_allocating(measured):
    for outcome, peak in measured["hostile"]:
        assert outcome.startswith("ValueError") and "max_alloc" in outcome, outcome
        assert peak < 64 * MiB, (outcome, peak)


def test_absurd_parameters_are_refused_before_allocating(measured):
    for outcome, peak in measured["absurd"]:
        assert outcome.startswith("ValueError") and "max_alloc" in outcome, outcome
        assert peak < 64 * MiB, (outcome, peak)


def test_ordinary_images_fit_the_default_limits(measured):
    results = measured["ordinary"]
    assert [o for o, _ in results] == ["ok (3, 224, 224)"] * len(results)
    assert all(peak < T.MAX_ALLOC for _, peak in results), results


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "kwargs", "channels"), [
    ("PNG", {}, 1), ("PNG", {}, 3), ("PNG", {}, 4), ("PNG", {"palette": True}, 3), ("JPEG", {}, 3), ("JPEG", {}, 1),
    ("JPEG", {"progressive": True}, 3), ("JPEG", {"cmyk": True}, 4), ("WEBP", {}, 3), ("WEBP", {"lossless": True}, 4),
    ("TIFF", {}, 3), ("BMP", {}, 3), ("GIF", {}, 3),
])
def test_decode_peak_is_within_its_estimate(tmp_path, fmt, kwargs, channels):
    """Decode's estimate of its peak, which max_alloc is checked against, bounds what decoding really uses."""
    rng = np.random.default_rng(0)
    arr = np.kron(rng.integers(0, 256, (40, 60, channels), dtype=np.uint8), np.ones((50, 50, 1), np.uint8))
    im = P.fromarray(arr[:, :, 0] if channels == 1 else arr)
    if kwargs.pop("palette", False) or fmt == "GIF":
        im = im.convert("P", palette=P.ADAPTIVE)
    if kwargs.pop("cmyk", False):
        im = im.convert("CMYK")
    buf = io.BytesIO()
    im.save(buf, format=fmt, **kwargs)
    data = buf.getvalue()
    with pytest.raises(ValueError, match="needs") as e:
        T.Decode(max_alloc=1)(data)
    estimate = int(str(e.value).split("needs ")[1].split(" bytes")[0].replace(",", ""))
    small = io.BytesIO()
    im.crop((0, 0, 64, 64)).save(small, format=fmt, **kwargs)
    ((outcome, peak),) = measure([(small.getvalue(), data, T.Decode())], tmp_path, fresh=True)
    assert outcome.startswith("ok") and peak <= estimate, (outcome, peak, estimate)


def test_each_allocating_transform_checks_its_limit():
    image = T.Image.from_array(np.zeros((20, 30, 3), np.uint8))  # 1,800 bytes
    floats = T.ToFloat()(image)  # 7,200 bytes
    refused = [
        (T.Resize(40, max_alloc=10_000), image), (T.Pad(20, max_alloc=5_000), image),
        (T.PadTo(60, 60, max_alloc=5_000), image), (T.Crop(-1, 0, 20, 30, max_alloc=1_000), image),
        (T.CenterCrop(40, max_alloc=4_000), image), (T.HFlip(max_alloc=1_000), image),
        (T.VFlip(max_alloc=1_000), image), (T.Rotate90(max_alloc=1_000), image), (T.ToFloat(max_alloc=5_000), image),
        (T.Normalize([0.0] * 3, [1.0] * 3, max_alloc=5_000), floats), (T.ToChw(max_alloc=1_000), image),
        (T.ToHwc(max_alloc=5_000), T.ToChw()(floats)), (T.ToGray(max_alloc=1_000), image),
        (T.Compose([T.ToFloat(max_alloc=5_000), T.Normalize([0.0] * 3, [1.0] * 3), T.ToChw()]), image),
        (T.Decode(max_alloc=1_000), encoded(np.zeros((20, 30, 3), np.uint8), "PNG")),
        (T.RandomResizedCrop(64, max_alloc=10_000), image), (T.RandomCrop(40, padding=20, max_alloc=4_000), image),
        (T.RandomCrop(40, padding=20, padding_mode="edge", max_alloc=5_000), image),
        (T.RandomHorizontalFlip(1.0, max_alloc=1_000), image), (T.RandomVerticalFlip(1.0, max_alloc=1_000), image),
        (T.ColorJitter(0.5, max_alloc=10_000), image), (T.RandomGrayscale(1.0, max_alloc=10_000), image),
        (T.RandomErasing(1.0, max_alloc=1_000), image),
    ]
    for transform, inp in refused:
        with pytest.raises(ValueError, match="max_alloc"):
            transform(inp)
    with pytest.raises(ValueError, match="max_alloc=10,000"):
        ImageCollator(max_alloc=10_000)([image] * 6)
    assert ImageCollator(max_alloc=10_800)([image] * 6).shape == (6, 3, 20, 30)
    with pytest.raises(ValueError, match="max_alloc"):
        T.Resize(40, max_alloc=0)
    assert torch.equal(T.HFlip(max_alloc=1_800)(image), image.flip(-1))
