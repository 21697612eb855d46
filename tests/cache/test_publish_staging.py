"""torch_drt.publish: staging names are unambiguous, a live writer's staging survives, an abandoned one goes."""

from __future__ import annotations

import os
import threading

import pytest

from torch_drt.publish import StagingDir, fsync_paths, publish_lock, remove_stale_staging, staging_name_of


def test_staging_names_parse_to_exactly_their_target():
    assert staging_name_of(".staging-123-0123456789ab-ds") == "ds"
    assert staging_name_of(".staging-123-0123456789ab-ds-999999") == "ds-999999"
    assert staging_name_of(".staging-ds-999999-123-0123456789ab") is None  # the old, ambiguous form
    assert staging_name_of("ds") is None


def test_live_staging_is_kept_and_abandoned_staging_is_removed(tmp_path):
    live, other, abandoned = StagingDir(tmp_path, "ds"), StagingDir(tmp_path, "ds-999999"), StagingDir(tmp_path, "ds")
    abandoned._release()  # its writer is gone: nobody holds its lock any more
    with publish_lock(tmp_path, "ds"):
        removed = remove_stale_staging(tmp_path, "ds")
    assert removed == [abandoned.path]
    assert live.path.is_dir() and other.path.is_dir() and not abandoned.path.exists()
    (live.path / "x").write_text("x")
    with publish_lock(tmp_path, "ds"):
        assert live.publish() == tmp_path / "ds"
    assert (tmp_path / "ds" / "x").read_text() == "x"
    with other:
        pass  # leaving without publishing discards it
    assert not other.path.exists()


def test_a_staging_directory_is_made_and_locked_under_the_publish_lock(tmp_path):
    """Between a staging directory's mkdir and its lock, a cleanup (``remove_stale_staging`` under the publish
    lock) saw it unlocked and deleted it under its writer: making it takes the publish lock, so a cleanup that
    holds the lock sees no staging directory, or a locked one."""
    made: list[StagingDir] = []
    with publish_lock(tmp_path, "ds"):  # a concurrent publish's cleanup in progress (flock: per open file)
        maker = threading.Thread(target=lambda: made.append(StagingDir(tmp_path, "ds")))
        maker.start()
        maker.join(0.5)
        assert maker.is_alive() and not made  # waits for the lock: nothing half-made to find
        assert remove_stale_staging(tmp_path, "ds") == []
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".staging-")]
    maker.join(30)
    (staging,) = made
    with publish_lock(tmp_path, "ds"):
        assert remove_stale_staging(tmp_path, "ds") == [] and staging.path.is_dir()  # made and locked at once
    staging.discard()


def test_fsync_paths_syncs_files_and_directories_and_raises_after_every_sync_ended(tmp_path, monkeypatch):
    files = [tmp_path / f"f{i}" for i in range(3)]
    for f in files:
        f.write_bytes(b"x")
    synced: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        real(fd)
        synced.append(os.fstat(fd).st_ino)

    monkeypatch.setattr(os, "fsync", fsync)
    fsync_paths([*files, tmp_path])
    assert sorted(synced) == sorted(p.stat().st_ino for p in [*files, tmp_path])
    synced.clear()
    with pytest.raises(FileNotFoundError, match="missing"):
        fsync_paths([files[0], tmp_path / "missing", files[1]])
    assert sorted(synced) == sorted(p.stat().st_ino for p in files[:2])  # the others synced all the same
