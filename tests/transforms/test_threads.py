"""Transforms run on the calling thread only: no intra-op threads for one image, no change to other threads.

torch splits an op of more than 32768 elements over its OpenMP threads; for one image that is slower (each small
op waits for OpenMP's helper threads, which spin competing with the rest of the machine), so torch_drt runs its
per-image work and its collates on the calling thread, as torch's DataLoader workers do, without touching the
process-wide settings the user's training thread shares. The checks count OS threads (OpenMP starts its helpers at
the first parallel op) and read torch's per-thread count: no timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import torch
from torchvision.transforms import v2

from torch_drt import transforms as T
from torch_drt.transforms._image import plain

OPENMP = "parallel backend: OpenMP" in torch.__config__.parallel_info()
pytestmark = pytest.mark.skipif(not OPENMP, reason="torch's intra-op threads are OpenMP's in this check")

CHILD = textwrap.dedent("""
    import io, json, os
    import numpy as np, torch
    from PIL import Image as P
    from torch_drt import ImageCollator, StatefulDataLoader
    from torch_drt import transforms as T
    torch.set_num_threads(3)  # whatever the machine: intra-op threads are there to be used

    def jpeg(seed):
        buf = io.BytesIO()
        rng = np.random.default_rng(seed)
        P.fromarray(rng.integers(0, 256, (260, 300, 3), dtype=np.uint8)).save(buf, format="JPEG")
        return buf.getvalue()

    def threads():
        return len(os.listdir("/proc/self/task"))

    data = [jpeg(i) for i in range(4)]
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    augment = [T.Decode(), T.RandomResizedCrop(224, scale=(0.6, 1.0)), T.RandomHorizontalFlip(),
               T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomGrayscale(0.5), T.RandomErasing(0.5)]
    full = T.Compose([*augment, T.ToFloat(), T.Normalize(mean, std), T.ToChw()])
    steps = T.Compose([T.Decode(), T.Resize(256), T.CenterCrop(224), T.Pad(4, padding_mode="reflect"),
                       T.RandomCrop(224), T.Rotate90(), T.VFlip(), T.ToFloat(), T.ToHwc(), T.Normalize(mean, std)])
    before = threads()
    for seed in range(6):
        torch.manual_seed(seed)
        full(data[seed % 4]), steps(data[seed % 4])
    for batch in StatefulDataLoader(data, batch_size=2, transform=full):  # the loader's default collate
        assert batch.shape == (2, 3, 224, 224)
    for batch in StatefulDataLoader(data, batch_size=2, transform=T.Compose(augment),
                                    collate_fn=ImageCollator(normalize=(mean, std))):
        assert batch.shape == (2, 3, 224, 224)
    after = threads()
    torch.ones(1 << 22).add_(1)  # the user's own op: torch's intra-op threads as before
    print(json.dumps({"before": before, "after": after, "control": threads(), "count": torch.get_num_threads()}))
""")


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_the_pipeline_starts_no_intra_op_threads():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["after"] == seen["before"], seen  # no OpenMP helper started by torch_drt's work
    assert seen["control"] > seen["after"] and seen["count"] == 3, seen  # the check sees them when they start


def test_one_thread_inside_a_call_only_and_restored_exactly():
    outer = torch.get_num_threads()
    if outer == 1:
        pytest.skip("torch runs one thread here already")
    inside, elsewhere = [], []
    entered, release = threading.Event(), threading.Event()

    def step(image):
        inside.append(torch.get_num_threads())
        entered.set()
        release.wait(30)
        return image

    def observer():
        entered.wait(30)
        elsewhere.append(torch.get_num_threads())  # another thread, while the first is inside a call
        release.set()

    baseline: list[int] = []  # what another thread sees with no call running (earlier tests may have set it)
    probe = threading.Thread(target=lambda: baseline.append(torch.get_num_threads()))
    probe.start()
    probe.join()
    watcher = threading.Thread(target=observer)
    watcher.start()
    image = T.Image.from_array(np.zeros((4, 5, 3), np.uint8))
    T.Compose([T.HFlip(), step, T.Compose([step])])(image)  # nested calls too
    watcher.join()
    assert inside == [1, 1] and elsewhere == baseline
    assert torch.get_num_threads() == outer  # restored


def test_restored_after_an_error():
    outer = torch.get_num_threads()

    def fail(image):
        raise RuntimeError(f"inside with {torch.get_num_threads()} threads")

    with pytest.raises(RuntimeError, match="inside with 1 threads" if outer > 1 else "inside"):
        T.Compose([T.HFlip(), fail])(T.Image.from_array(np.zeros((4, 5, 3), np.uint8)))
    assert torch.get_num_threads() == outer


def test_values_are_torchvisions_on_one_thread():
    # a 224 x 224 RGB image: every op is over torch's grain, and ColorJitter's contrast takes a mean, which torch
    # sums by thread: torch_drt's values are torchvision's on one thread, as in torch's DataLoader workers
    image = T.Image.from_array(np.random.default_rng(0).integers(0, 256, (240, 260, 3), dtype=np.uint8))
    ours = T.Compose([T.RandomResizedCrop(224, scale=(0.8, 1.0)), T.RandomHorizontalFlip(),
                      T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.ToFloat(), T.RandomErasing()])
    theirs = v2.Compose([v2.RandomResizedCrop(224, scale=(0.8, 1.0)), v2.RandomHorizontalFlip(),
                         v2.ColorJitter(0.4, 0.4, 0.4, 0.1), v2.Lambda(lambda x: plain(x).float().div(255)),
                         v2.RandomErasing()])
    outer = torch.get_num_threads()
    for seed in range(4):
        torch.manual_seed(seed)
        got = ours(image)
        torch.set_num_threads(1)
        try:
            torch.manual_seed(seed)
            want = theirs(tv_image(image))
        finally:
            torch.set_num_threads(outer)
        assert torch.equal(plain(got), plain(want)), seed


def tv_image(image: T.Image) -> torch.Tensor:
    from torchvision import tv_tensors

    return tv_tensors.Image(plain(image).clone())
