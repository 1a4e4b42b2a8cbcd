"""The shared safety mechanisms: ownership mark, atomic locked writes, network deadlines."""
import json
import multiprocessing
import socket
import time
from pathlib import Path

import pytest
from conftest import LATE_S

from ragkit import support


def test_claim_folder_marks_a_new_folder_before_anything_else(tmp_path):
    folder = support.claim_folder(tmp_path / "idx", "--index")
    assert [p.name for p in folder.iterdir()] == [support.MARK_FILE]
    assert support.is_our_folder(folder)


def test_claim_folder_refuses_a_folder_of_someone_elses_files_and_leaves_them(tmp_path):
    (tmp_path / "meta.json").write_text('{"my": "settings"}')
    with pytest.raises(ValueError, match="did not create"):
        support.claim_folder(tmp_path, "--index")
    assert json.loads((tmp_path / "meta.json").read_text()) == {"my": "settings"}
    assert not (tmp_path / support.MARK_FILE).exists()


def test_a_meta_json_shaped_like_ours_without_the_mark_is_not_ours(tmp_path):
    (tmp_path / "meta.json").write_text(json.dumps({"format": support.INDEX_FORMAT}))
    with pytest.raises(ValueError, match="did not create"):
        support.claim_folder(tmp_path, "--index")
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


def test_claim_folder_refuses_a_file_and_an_unwritable_place(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        support.claim_folder(tmp_path / "f", "--index")
    with pytest.raises(ValueError, match="cannot write"):
        support.claim_folder("/proc/no/such/place", "--index")


def test_write_atomic_returns_the_hash_of_the_bytes_written_and_leaves_no_temporary(tmp_path):
    digest = support.write_atomic(tmp_path / "a.json", b"[1, 2]")
    assert digest == support.sha256_file(tmp_path / "a.json") == support.sha256_bytes(b"[1, 2]")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def _hold_lock(folder, started, release, note=None):
    with support.folder_lock(folder):
        started.set()
        release.wait(60)
        if note:
            Path(note).write_text("written while holding the lock")


def test_folder_lock_makes_a_second_saver_wait_and_dies_with_its_process(tmp_path):
    started, never = multiprocessing.Event(), multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold_lock, args=(tmp_path, started, never))
    holder.start()
    assert started.wait(60)
    holder.kill()                       # like kill -9: the OS releases the lock
    holder.join()
    t0 = time.monotonic()
    with support.folder_lock(tmp_path):
        pass
    assert time.monotonic() - t0 < LATE_S     # the holder would have held it for 60 s


def test_folder_lock_serialises_two_savers(tmp_path):
    started, release = multiprocessing.Event(), multiprocessing.Event()
    note = tmp_path / "note.txt"
    holder = multiprocessing.Process(target=_hold_lock, args=(tmp_path, started, release, note))
    holder.start()
    assert started.wait(60)
    release.set()                       # the holder writes its note, then lets go
    with support.folder_lock(tmp_path):
        assert note.read_text() == "written while holding the lock"   # we waited for it
    holder.join()


def test_store_mark_accepts_only_ours():
    assert support.is_our_store({"created_by": support.OWNER})
    # the keys an earlier version wrote, on a collection someone else made: not ours
    assert not support.is_our_store({"backend": "tfidf", "model": "tfidf", "chunk_size": 50,
                                         "overlap": 10, "corpus": "x"})
    assert not support.is_our_store({"owner": "someone"})
    assert not support.is_our_store(None)


def test_with_deadline_gives_up_on_time_and_names_what_it_waited_for(silent_server, capsys):
    def talk():
        with socket.create_connection(("127.0.0.1", silent_server)) as s:
            return s.recv(1)            # never answered
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="the test server did not answer within 0.5 s: check it"):
        support.with_deadline("the test server", 0.5, talk, "check it")
    assert time.monotonic() - t0 < 0.5 + LATE_S
    assert "waiting for the test server (up to 0.5 s)" in capsys.readouterr().err


def test_run_cli_turns_errors_into_one_line_and_exit_codes(capsys):
    def bad():
        raise ValueError("first line\nsecond line")
    def interrupted():
        raise KeyboardInterrupt
    assert support.run_cli(bad) == 1
    assert capsys.readouterr().err == "error: first line second line\n"
    assert support.run_cli(interrupted) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_a_lock_file_that_is_a_link_is_refused_and_nothing_is_created_where_it_points(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = support.claim_folder(tmp_path / "idx", "--index")
    (folder / support.LOCK_FILE).symlink_to(elsewhere / "planted")
    with pytest.raises(ValueError, match="is a link"):
        with support.folder_lock(folder):
            pass
    assert list(elsewhere.iterdir()) == []


def test_two_runs_claiming_one_new_folder_at_once_both_succeed(tmp_path):
    import concurrent.futures
    for attempt in range(20):
        folder = tmp_path / f"idx{attempt}"
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            claimed = list(pool.map(lambda _: support.claim_folder(folder, "--index"), range(2)))
        assert claimed == [folder, folder]
        assert [p.name for p in folder.iterdir()] == [support.MARK_FILE]


def test_the_next_save_cleans_what_a_killed_save_left_and_only_that(tmp_path):
    folder = support.claim_folder(tmp_path / "idx", "--index")
    (folder / f".vectors.npy.abc123{support.PARTIAL}").write_bytes(b"half a file")
    (folder / ".draft.partial").write_bytes(b"the user's own")       # not the kit's: kept
    with support.folder_lock(folder):
        support.write_atomic(folder / "vectors.npy", b"whole")
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [support.MARK_FILE, support.LOCK_FILE, "vectors.npy", ".draft.partial"])


@pytest.mark.slow      # a second or more
def test_a_run_waiting_for_another_runs_lock_gives_up_at_its_deadline(tmp_path, monkeypatch, capsys):
    from filelock import FileLock
    folder = support.claim_folder(tmp_path / "idx", "--index")
    monkeypatch.setattr(support, "LOCK_WAIT_S", 1)
    with FileLock(folder / support.LOCK_FILE):                 # "another run" holds it
        with pytest.raises(TimeoutError, match="held the lock on .* for 1 s"):
            with support.folder_lock(folder):
                pass
    assert "waiting for another run to finish saving" in capsys.readouterr().err


def test_progress_in_a_log_or_a_pipe_is_one_plain_line_not_redrawn_frames(capsys):
    assert list(support.progress(range(1000), 1000, "scoring", " settings")) == list(range(1000))
    assert capsys.readouterr().err == "scoring: 1,000 settings ...\n"   # pytest's stderr: no terminal


def test_a_full_disk_names_the_folder_and_leaves_no_partial_file(tmp_path, monkeypatch):
    import errno
    import os

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match=f"no space left on the disk of {tmp_path} \\(writing vectors.npy\\)"):
        support.write_atomic(tmp_path / "vectors.npy", b"\0" * 100)
    assert list(tmp_path.iterdir()) == []
