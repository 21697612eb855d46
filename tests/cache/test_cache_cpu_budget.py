"""The CPU budget behind ``to_torch_dataloader(num_workers="auto", native_num_workers="auto")``: affinity and
cgroup limits read as dataset-rt 0.4.8 reads them (its own functions are the reference, on the same files)."""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import pytest

from torch_drt import _cpu_budget as budget

resources = pytest.importorskip("dataset_rt.resources")
loading = pytest.importorskip("dataset_rt.integrations.loading")


def fake_proc(root: Path, cgroup: str, mounts: list[str], files: dict[str, str]) -> Path:
    """A /proc/self with ``cgroup`` and ``mountinfo`` (mount points under ``root``), and cgroup control files."""
    proc = root / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text(cgroup)
    (proc / "mountinfo").write_text("".join(line.replace("ROOT", str(root)) + "\n" for line in mounts))
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return proc


def both(proc: Path) -> tuple[list[Fraction], list[Fraction]]:
    return list(budget.cgroup_cpu_limits(proc)), list(resources._linux_limits(proc))


V2_MOUNT = "30 25 0:26 / ROOT/cg rw,nosuid - cgroup2 cgroup2 rw,nsdelegate"
V1_MOUNTS = [
    "32 31 0:29 / ROOT/cpu rw,relatime - cgroup cgroup rw,cpu,cpuacct",
    "34 31 0:31 / ROOT/cpuset rw,relatime - cgroup cgroup rw,cpuset",
    "35 31 0:32 / ROOT/memory rw,relatime - cgroup cgroup rw,memory",
]


@pytest.mark.parametrize(
    ("cgroup", "mounts", "files", "expected"),
    [
        (  # v2: a fractional quota two levels up, a CPU set at the leaf
            "0::/a/b\n",
            [V2_MOUNT],
            {"cg/a/b/cpuset.cpus.effective": "0-3,8", "cg/a/b/cpu.max": "max 100000", "cg/a/cpu.max": "150000 100000"},
            [Fraction(5), Fraction(3, 2)],
        ),
        (  # v1: quota under cpu,cpuacct and a CPU set; the memory controller is not read
            "4:memory:/x\n3:cpu,cpuacct:/x\n2:cpuset:/x\n",
            V1_MOUNTS,
            {
                "cpu/x/cpu.cfs_quota_us": "250000",
                "cpu/x/cpu.cfs_period_us": "100000",
                "cpu/cpu.cfs_quota_us": "-1",
                "cpu/cpu.cfs_period_us": "100000",
                "cpuset/x/cpuset.cpus": "0,2-3",
                "memory/x/cpu.max": "100 100000",
            },
            [Fraction(5, 2), Fraction(3)],
        ),
        (  # a namespaced mount: the membership path is below the mount's root; an escaped space in the mount point
            "0::/pod/c\n",
            [r"30 25 0:26 /pod ROOT/c\040g rw - cgroup2 cgroup2 rw"],
            {"c g/c/cpu.max": "50000 100000", "c g/cpu.max": "max 100000"},
            [Fraction(1, 2)],
        ),
        ("0::/\n", [V2_MOUNT], {}, []),  # no control files: no limit
        ("0::/\n", [V2_MOUNT], {"cg/cpuset.cpus.effective": ""}, []),  # an empty set: no limit
    ],
)
def test_cgroup_limits_are_dataset_rts(tmp_path, cgroup, mounts, files, expected):
    ours, theirs = both(fake_proc(tmp_path, cgroup, mounts, files))
    assert ours == theirs == expected


@pytest.mark.parametrize(
    "files",
    [
        {"cg/cpu.max": "0 100000"},
        {"cg/cpu.max": "100000 0"},
        {"cg/cpu.max": "100000"},
        {"cg/cpuset.cpus.effective": "3-1"},
        {"cg/cpuset.cpus.effective": "0-2,1"},
        {"cg/cpuset.cpus.effective": "x"},
    ],
)
def test_malformed_limits_are_errors_as_in_dataset_rt(tmp_path, files):
    proc = fake_proc(tmp_path, "0::/\n", [V2_MOUNT], files)
    with pytest.raises(ValueError):
        list(resources._linux_limits(proc))
    with pytest.raises(ValueError):
        list(budget.cgroup_cpu_limits(proc))


def test_a_malformed_path_is_refused(tmp_path):
    proc = fake_proc(tmp_path, "0::/a/../b\n", [V2_MOUNT], {})
    with pytest.raises(ValueError, match="invalid cgroup path"):
        list(budget.cgroup_cpu_limits(proc))


def test_this_machine_counts_as_dataset_rt_counts():
    assert budget.available_cpus() == resources.available_cpu_count()


def test_unreadable_limits_warn_and_count_one_cpu(monkeypatch):
    def unreadable(proc=None):
        raise PermissionError("cpu.max")

    monkeypatch.setattr(budget, "cgroup_cpu_limits", unreadable)
    monkeypatch.setattr(budget.sys, "platform", "linux")
    with pytest.warns(RuntimeWarning, match="Cannot determine container CPU limits; using one CPU"):
        assert budget.available_cpus() == 1


@pytest.mark.parametrize("cpus", [1, 2, 3, 5, 8, 16, 64])
@pytest.mark.parametrize(("world", "local"), [(1, None), (2, None), (4, "2"), (8, "1")])
@pytest.mark.parametrize(("workers", "threads"), [("auto", "auto"), (0, "auto"), (3, "auto"), ("auto", 2), (5, 6)])
def test_worker_counts_are_dataset_rts(monkeypatch, cpus, world, local, workers, threads):
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
    monkeypatch.setattr(budget, "cgroup_cpu_limits", lambda proc=None: iter(()))  # this machine's cgroup aside
    monkeypatch.setattr(resources, "_linux_limits", lambda proc: iter(()))
    if local is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    theirs = loading.resolve_worker_counts(workers, threads, world_size=world)
    assert budget.resolve_worker_counts(workers, threads, world) == (theirs.processes, theirs.native_threads)


@pytest.mark.parametrize("local", ["0", "3"])
def test_a_local_world_size_outside_the_world_is_refused(monkeypatch, local):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    with pytest.raises(ValueError):
        loading.local_rank_count(2)
    with pytest.raises(ValueError, match="LOCAL_WORLD_SIZE"):
        budget.local_ranks(2)
