"""One way to damage a cache's record in place for the record-check tests: flip one bit of one byte of it."""

from __future__ import annotations

from pathlib import Path

from torch_drt.cache import open_cache
from torch_drt.cache.validate import load_index


def flip_record_bit(cache: Path, sample: int, at: str = "middle", mask: int = 0x04) -> Path:
    """Flip ``mask``'s bits of one byte of ``sample``'s record (``at`` its "middle" or "last" byte), in place: same
    file, same size. Returns the record's shard."""
    layout = open_cache(cache)
    index_file, index = load_index(layout)
    shard, offset, length = (int(index[sample][k]) for k in ("shard", "offset", "length"))
    index_file.close()
    path = cache / layout.shard_path(shard)
    where = offset + (length // 2 if at == "middle" else length - 1)
    with open(path, "r+b") as f:
        f.seek(where)
        byte = f.read(1)[0]
        f.seek(where)
        f.write(bytes([byte ^ mask]))
    return path
