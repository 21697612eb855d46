"""Write the small MDS and LitData fixtures of tests/formats/fixtures/ with each system's own writer (MosaicML
Streaming's MDSWriter, LitData's optimize), and the samples its own reader decodes from them (``expected.json``,
in ``canon``'s form).

Run in the peers environment (``benchmarks/setup_peers.sh`` builds it; mosaicml-streaming pins its own numpy):
``$ENVS/peers/bin/python tests/formats/make_fixtures.py`` (MDS) and ``... make_fixtures.py --litdata`` (LitData's
``optimize``, read back with its ``StreamingDataset``). The files it writes are committed; the tests compare
torch_drt's readers with them without the peers installed.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from canon import canon  # noqa: E402

OUT = HERE / "fixtures" / "mds"


def _image(i: int, mode: str = "RGB", size: tuple[int, int] = (5, 4)) -> Image.Image:
    rng = np.random.default_rng(i)
    channels = {"RGB": 3, "L": 1}[mode]
    pixels = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    return Image.fromarray(pixels[..., 0] if channels == 1 else pixels, mode)


def _jpeg(i: int) -> bytes:
    out = io.BytesIO()
    _image(i, size=(8, 8)).save(out, format="JPEG", quality=80)
    return out.getvalue()


COLUMNS = {
    "b": "bytes", "s": "str", "i": "int", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "f16": "float16", "f32": "float32",
    "f64": "float64", "si": "str_int", "sf": "str_float", "sd": "str_decimal", "arr": "ndarray",
    "arr_dt": "ndarray:int16", "arr_fixed": "ndarray:float32:2,3", "js": "json", "pil": "pil", "jpg": "jpeg",
    "png": "png", "pngs": "list[png]", "jpgs": "jpeg_array",
}


def _sample(i: int) -> dict:
    rng = np.random.default_rng(100 + i)
    return {
        "b": bytes([i]) * (i % 4), "s": f"sample {i} ☃" * (i % 3), "i": i * 1_000_003 - 7,
        "u8": np.uint8(i), "u16": np.uint16(i * 300), "u32": np.uint32(i * 70000), "u64": np.uint64(i << 40),
        "i8": np.int8(-i), "i16": np.int16(-i * 300), "i32": np.int32(-i * 70000), "i64": np.int64(-(i << 40)),
        "f16": np.float16(i / 7), "f32": np.float32(i / 7), "f64": np.float64(i / 7), "si": i * 11,
        "sf": i / 9, "sd": Decimal(f"{i}.{i:03d}"), "arr": rng.standard_normal((2, i % 3 + 1)),
        "arr_dt": np.arange(i + 1, dtype=np.int16) - 3, "arr_fixed": rng.standard_normal((2, 3)).astype(np.float32),
        "js": {"id": i, "tags": ["a", "b"][: i % 3], "nested": {"x": i / 2}}, "pil": _image(i, "L" if i % 2 else "RGB"),
        "jpg": Image.open(io.BytesIO(_jpeg(i))), "png": _image(i + 50), "pngs": [_image(i + 60), _image(i + 61)],
        "jpgs": [_jpeg(i + 70), _jpeg(i + 71)],
    }


def _write(name: str, samples: list[dict], columns: dict, **kwargs) -> None:
    from streaming import MDSWriter
    from streaming.base.format import reader_from_json

    root = OUT / name
    shutil.rmtree(root, ignore_errors=True)
    with MDSWriter(out=str(root), columns=columns, **kwargs) as writer:
        for sample in samples:
            writer.write(sample)
    index = json.loads((root / "index.json").read_text())
    expected = []
    for entry in index["shards"]:  # streaming's own shard reader (decompresses into the directory first)
        reader = reader_from_json(str(root), None, entry)
        if entry.get("zip_data"):
            from streaming.base.compression import decompress

            zipped = (root / entry["zip_data"]["basename"]).read_bytes()
            (root / entry["raw_data"]["basename"]).write_bytes(decompress(entry["compression"], zipped))
        for k in range(entry["samples"]):
            expected.append({key: canon(value) for key, value in reader.get_item(k).items()})
        if entry.get("zip_data"):
            (root / entry["raw_data"]["basename"]).unlink()  # only the compressed file is part of the dataset
    (root / "expected.json").write_text(json.dumps(expected, indent=0, sort_keys=True))


LD_OUT = HERE / "fixtures" / "litdata"


def _ld_sample(i: int):
    import torch

    rng = np.random.default_rng(200 + i)
    return {"i": i * 7 - 3, "f": i / 3, "s": f"item {i} ☃", "b": bytes([i]) * (i % 3 + 1), "flag": i % 2 == 0,
            "arr": rng.standard_normal((2, 3)), "vec": np.arange(i + 1, dtype=np.int32) - 2,
            "t": torch.arange(6, dtype=torch.float16).reshape(2, 3) * i, "tv": torch.arange(i + 2),
            "img": _image(i + 90), "nested": [i, (f"n{i}", float(i))]}


def _ld_pickled(i: int):
    return {"s": str(i), "obj": {i, i + 1}}


def _ld_write(name: str, fn, count: int, **kwargs) -> None:
    from litdata import StreamingDataset, optimize

    root = LD_OUT / name
    shutil.rmtree(root, ignore_errors=True)
    optimize(fn=fn, inputs=list(range(count)), output_dir=str(root), num_workers=1, mode="overwrite", **kwargs)
    scratch = LD_OUT.parent / f".read-{name}"  # litdata's reader may unpack chunks where it reads: a copy
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(root, scratch)
    ds = StreamingDataset(input_dir=str(scratch))
    expected = [canon(ds[k]) for k in range(len(ds))]
    shutil.rmtree(scratch)
    (root / "expected.json").write_text(json.dumps(expected, indent=0, sort_keys=True))


def main() -> None:
    if "--litdata" in sys.argv:
        _ld_write("plain", _ld_sample, 7, chunk_size=3)
        _ld_write("zstd", _ld_sample, 5, chunk_size=2, compression="zstd", compression_level="chunk")
        _ld_write("pickled", _ld_pickled, 3, chunk_size=2)
        print("wrote", sorted(p.name for p in LD_OUT.iterdir()))
        return
    samples = [_sample(i) for i in range(9)]
    _write("plain", samples, COLUMNS, size_limit=20000)
    _write("hashed_zstd", samples, COLUMNS, size_limit=20000, compression="zstd", hashes=["sha1", "sha256", "xxh64"])
    _write("gz", samples[:5], COLUMNS, compression="gz:6", hashes=["md5"])
    _write("bz2", samples[:3], {"s": "str", "arr": "ndarray"}, compression="bz2")
    _write("pickled", [{"s": str(i), "obj": {"set": {i, i + 1}}} for i in range(3)], {"s": "str", "obj": "pkl"})
    print("wrote", sorted(p.name for p in OUT.iterdir()))


if __name__ == "__main__":
    main()
