"""Remote images: tiles fetched over HTTP by coordinates, decoded and batched on the loader's threads.

A local aiohttp server stands in for a tile server (the example runs offline). Each batch comes with the dataset
indices of its tiles, which find their coordinates.

Run: python examples/remote_images.py
"""

from __future__ import annotations

import asyncio
import io
import threading

import numpy as np
import torch
from aiohttp import web
from PIL import Image

from torch_drt import HttpDataset, ImageCollator, StatefulDataLoader
from torch_drt import transforms as T


def tile_png(x: int, y: int, size: int) -> bytes:
    arr = np.zeros((size, size, 3), dtype=np.uint8)
    arr[..., 0], arr[..., 1] = x % 256, y % 256
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def start_tile_server() -> str:
    async def tile(request: web.Request) -> web.Response:
        q = request.query
        return web.Response(body=tile_png(int(q["x"]), int(q["y"]), int(q["size"])), content_type="image/png")

    app = web.Application()
    app.add_routes([web.get("/images/{image}/tile", tile)])
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    threading.Thread(target=loop.run_forever, daemon=True).start()
    return f"http://127.0.0.1:{runner.addresses[0][1]}"


def main() -> None:
    base = start_tile_server()
    cols, rows = np.meshgrid(np.arange(12), np.arange(8))
    coords = np.stack([cols.ravel() * 32, rows.ravel() * 32], axis=1)  # (96, 2): x, y of each tile
    tiles = HttpDataset.from_template(
        base + "/images/{image}/tile?x={x}&y={y}&size=32",
        {"image": ["slide 1.svs"] * len(coords), "x": coords[:, 0], "y": coords[:, 1]},
        retries=2,
    )
    pipeline = T.Compose(
        [T.Decode(), T.ToRgb(), T.PadTo(32, 32), T.ToFloat(), T.Normalize([0.5] * 3, [0.5] * 3), T.ToChw()]
    )
    loader = StatefulDataLoader(
        tiles,
        batch_size=16,
        num_workers=2,
        item_concurrency=8,
        transform=pipeline,
        collate_fn=ImageCollator(buffers=4),
        return_indices=True,
    )
    checked = 0
    for batch, indices in loader:
        x = torch.utils.dlpack.from_dlpack(batch)  # (16, 3, 32, 32), no copy
        red = ((x[:, 0, 0, 0] * 0.5 + 0.5) * 255).round().long()
        assert red.tolist() == (coords[indices, 0] % 256).tolist()  # each tile is where its index says
        checked += len(indices)
    loader.close()
    print(f"fetched, decoded and batched {checked} tiles; batch shape {tuple(x.shape)}; coordinates match: yes")


if __name__ == "__main__":
    main()
