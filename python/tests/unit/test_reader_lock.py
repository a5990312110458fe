"""One reader per rank: the rank's reader lock (``reader-<rank>.lock``, docs/batch-protocol.md)."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from harness.batches import make_job, write_manifest

from stoker import BatchReader, RankInUseError, ResumeError
from stoker.protocol import reader_lock_name


def test_a_second_reader_of_a_rank_fails_until_the_first_is_closed(shm_root):
    make_job(shm_root, world_size=2, num_steps=4)
    first = BatchReader(shm_root, 0, timeout_s=5)
    assert next(first).step == 0
    second = BatchReader(shm_root, 0, timeout_s=5, start_step=2)
    with pytest.raises(RankInUseError) as e:
        next(second)
    message = str(e.value)
    assert str(shm_root / reader_lock_name(0)) in message
    assert "another open BatchReader of this process" in message
    # another rank is not affected
    assert [b.step for b in BatchReader(shm_root, 1, timeout_s=5)] == [0, 1, 2, 3]
    # nothing was taken from the first reader: it goes on in order
    assert next(first).step == 1
    first.close()
    assert [b.step for b in second] == [2, 3]


def test_a_reader_in_another_process_is_named_and_its_end_frees_the_rank(shm_root):
    make_job(shm_root, world_size=1, num_steps=4)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from stoker import BatchReader
                reader = BatchReader({str(shm_root)!r}, 0, timeout_s=5)
                next(reader)
                print("holding", flush=True)
                time.sleep(60)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(RankInUseError, match=f"process {holder.pid}, still running"):
            next(BatchReader(shm_root, 0, timeout_s=5, start_step=1))
    finally:
        holder.send_signal(signal.SIGKILL)  # no clean-up: the kernel releases the lock
        holder.wait()
    assert [b.step for b in BatchReader(shm_root, 0, timeout_s=5, start_step=1)] == [1, 2, 3]


def _remove_tree(path):
    """``shutil.rmtree`` of a job directory whose reader may still unlink a batch file it has
    acknowledged (on its read-ahead thread) while the tree is removed."""

    def skip_vanished(func, name, exc_info):
        if not issubclass(exc_info[0], FileNotFoundError):
            raise exc_info[1]

    for _ in range(100):
        shutil.rmtree(path, onerror=skip_vanished)
        if not path.exists():
            return
        time.sleep(0.01)
    raise AssertionError(f"{path} is still there")


def _stale_reader(shm_root):
    """A reader of a job that wrote steps 0, 1 of 4 and was stopped, having read both, then
    its job directory removed and a new job of the same name made there (a new lock file too)."""
    make_job(shm_root, world_size=1, num_steps=2)
    write_manifest(shm_root, world_size=1, num_steps=4)
    stale = BatchReader(shm_root, 0, timeout_s=10, manifest_poll_interval_s=0.01)
    assert [next(stale).step, next(stale).step] == [0, 1]
    _remove_tree(shm_root)
    make_job(shm_root, world_size=1, num_steps=4, generation="g2")
    time.sleep(0.02)
    return stale


@pytest.mark.parametrize("first", ["new reader", "stale reader"])
def test_a_reader_left_from_a_removed_job_directory_fails_instead_of_taking_batches(
    shm_root, first
):
    """A trainer of an earlier run still waits on the job directory when it is removed and a new
    job of the same name is started there: its reader follows the new manifest by name, so
    without the lock it would take some of the new trainer's batches. Whichever asks first, the
    stale reader fails without acknowledging or unlinking anything of the new job."""
    stale = _stale_reader(shm_root)
    fresh = BatchReader(shm_root, 0, timeout_s=5)
    if first == "new reader":
        assert next(fresh).step == 0
    for _ in range(2):  # the error repeats
        with pytest.raises(RankInUseError, match="was removed or replaced"):
            next(stale)  # it would follow g2 and read step 2
    assert not (shm_root / "gen-g2" / "rank-0" / "ack.json").exists()
    steps = [b.step for b in fresh]
    assert steps == ([1, 2, 3] if first == "new reader" else [0, 1, 2, 3])


def test_a_lock_file_deleted_while_held_stops_its_reader(shm_root):
    make_job(shm_root, world_size=1, num_steps=6)
    first = BatchReader(shm_root, 0, timeout_s=5, manifest_poll_interval_s=0.01)
    assert [next(first).step for _ in range(3)] == [0, 1, 2]  # step 1 acknowledged, 2 not yet
    (shm_root / reader_lock_name(0)).unlink()  # e.g. by hand, to "fix" a RankInUseError
    second = BatchReader(shm_root, 0, timeout_s=5, start_step=2)
    time.sleep(0.02)
    with pytest.raises(RankInUseError, match="was removed or replaced"):
        next(first)
    # the first reader did not acknowledge step 2 on its way out (which would unlink its file
    # and make the second reader's start a ResumeError)
    assert [b.step for b in second] == [2, 3, 4, 5]


def test_a_forked_child_does_not_keep_the_rank_locked(shm_root):
    make_job(shm_root, world_size=1, num_steps=4)
    reader = BatchReader(shm_root, 0, timeout_s=5)
    assert next(reader).step == 0
    forked_r, forked_w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child, after the fork handlers ran
        os.write(forked_w, b"x")
        time.sleep(30)
        os._exit(0)
    try:
        assert os.read(forked_r, 1) == b"x"
        reader.close()
        # the child still runs, and its copy of the descriptor was closed at the fork
        assert [b.step for b in BatchReader(shm_root, 0, timeout_s=5, start_step=1)] == [1, 2, 3]
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os.close(forked_r)
        os.close(forked_w)


def test_a_reader_that_failed_to_start_holds_no_rank(shm_root):
    make_job(shm_root, world_size=1, num_steps=4, first_step=1)
    failed = BatchReader(shm_root, 0, timeout_s=5, start_step=0)
    with pytest.raises(ResumeError):
        next(failed)  # the job does not produce step 0; the trainer keeps the reader around
    assert [b.step for b in BatchReader(shm_root, 0, timeout_s=5)] == [1, 2, 3]
