"""Adversarial tests of the reader's read-ahead and background acks (``read_ahead=True``):
producers gated by the acks, generation switches around a read-ahead, abandoned and failed
readers, ack errors, interrupts and ``fork``; and that both modes behave alike for a trainer."""

import _thread
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from harness.batches import GEN, make_job, rank_dir, write_manifest, write_steps
from harness.polling import eventually

import stoker.protocol
import stoker.reader
from stoker import BatchFormatError, BatchReader, RankInUseError

#: A small patch dimension keeps the batch files (and these tests) small and fast.
D = 8
BOTH = pytest.mark.parametrize("read_ahead", [False, True], ids=["sync", "read_ahead"])


def _consumed(root, generation=GEN, rank=0):
    try:
        return json.loads((rank_dir(root, rank, generation) / "ack.json").read_text())[
            "consumed_step"
        ]
    except (OSError, ValueError):
        return None


def _reader_threads(before=frozenset()):
    """The reader threads alive now, less those in ``before``."""
    return [t for t in threading.enumerate() if t.name.startswith("stoker-") and t not in before]


def _publish(root, generation, first_step, num_steps, steps=None):
    """A resubmitted job: its files first, then the manifest naming it."""
    steps = range(first_step, num_steps) if steps is None else steps
    write_steps(root, steps, world_size=1, patch_dim=D, generation=generation)
    write_manifest(
        root, world_size=1, num_steps=num_steps, patch_dim=D, generation=generation,
        first_step=first_step,
    )  # fmt: skip


class _GatedProducer(threading.Thread):
    """The job's source with ``prefetch-depth`` ``depth``: writes step ``s`` of rank 0 only
    when ``s <= consumed_step + depth``; records every ``consumed_step`` it sees."""

    def __init__(self, root, num_steps, depth, generation=GEN, first_step=0):
        super().__init__(daemon=True)
        self.root, self.num_steps, self.depth = root, num_steps, depth
        self.generation, self.next = generation, first_step
        self.seen: list[int] = []
        self.stop = threading.Event()

    def run(self):
        while self.next < self.num_steps and not self.stop.is_set():
            c = _consumed(self.root, self.generation)
            consumed = self.next - 1 - self.depth if c is None else c
            if c is not None and (not self.seen or self.seen[-1] != c):
                self.seen.append(c)
            if self.next <= consumed + self.depth or (c is None and self.next < self.depth):
                write_steps(
                    self.root, [self.next], world_size=1, patch_dim=D, generation=self.generation
                )
                self.next += 1
            else:
                time.sleep(0.0005)


# ------------------------------------------------------------------ gated producer, ack order
@BOTH
@pytest.mark.parametrize("depth", [1, 2])
def test_producer_gated_by_the_acks_never_deadlocks_and_acks_never_go_back(
    shm_root, read_ahead, depth
):
    n = 40
    write_manifest(shm_root, world_size=1, num_steps=n, patch_dim=D)
    producer = _GatedProducer(shm_root, n, depth)
    producer.start()
    seen: list[int] = []
    stop = threading.Event()

    def watch_acks():  # ack.json as the job's source sees it, as often as it can
        while not stop.is_set():
            c = _consumed(shm_root)
            if c is not None and (not seen or seen[-1] != c):
                seen.append(c)

    watcher = threading.Thread(target=watch_acks, daemon=True)
    watcher.start()
    before = frozenset(threading.enumerate())
    reader = BatchReader(shm_root, 0, timeout_s=5, read_ahead=read_ahead)
    try:
        steps = [b.step for b in reader]
    finally:
        stop.set()
        producer.stop.set()
    watcher.join(5)
    producer.join(5)
    assert steps == list(range(n))
    assert seen == sorted(seen) and producer.seen == sorted(producer.seen)
    assert _consumed(shm_root) == n - 1
    assert sorted(os.listdir(rank_dir(shm_root, 0))) == ["ack.json"]
    assert eventually(lambda: not _reader_threads(before), 2)


@BOTH
def test_depth_1_producer_with_a_trainer_slower_than_the_read_ahead_give_up(
    shm_root, read_ahead, monkeypatch
):
    """With prefetch depth 1 the next file only comes after the next request's ack: the
    read-ahead gives up, the request waits for the file itself."""
    monkeypatch.setattr(stoker.reader, "_READ_AHEAD_GIVE_UP_S", 0.02)
    n = 6
    write_manifest(shm_root, world_size=1, num_steps=n, patch_dim=D)
    producer = _GatedProducer(shm_root, n, 1)
    producer.start()
    reader = BatchReader(shm_root, 0, timeout_s=None, read_ahead=read_ahead)
    steps = []
    for b in reader:
        steps.append(b.step)
        time.sleep(0.05)  # "compute": longer than the read-ahead waits
    producer.stop.set()
    producer.join(5)
    assert steps == list(range(n)) and _consumed(shm_root) == n - 1


# ------------------------------------------------------------------ generation switches
@BOTH
def test_switch_after_the_read_ahead_mapped_the_old_generations_file(shm_root, read_ahead):
    make_job(shm_root, world_size=1, num_steps=4, patch_dim=D)
    reader = BatchReader(
        shm_root, 0, timeout_s=5, manifest_poll_interval_s=0.01, read_ahead=read_ahead
    )
    assert next(reader).step == 0
    if read_ahead:
        assert eventually(lambda: reader._ahead.wait(0) and reader._ahead.result() is not None)
    _publish(shm_root, "g2", 1, 4)
    shutil.rmtree(shm_root / f"gen-{GEN}")  # the new sink removes the old generation
    time.sleep(0.03)  # past the manifest poll interval: the request checks it first
    b1 = next(reader)
    assert b1.step == 1 and "gen-g2" in b1.path
    assert reader.generation_switches == 1 and reader.batches_read_ahead == 0
    assert _consumed(shm_root, "g2") == 0
    assert [b.step for b in reader] == [2, 3]
    assert _consumed(shm_root, "g2") == 3
    assert os.listdir(rank_dir(shm_root, 0, "g2")) == ["ack.json"]


@BOTH
def test_switch_while_the_read_ahead_waits_in_the_deleted_old_directory(shm_root, read_ahead):
    write_manifest(shm_root, world_size=1, num_steps=4, patch_dim=D)
    write_steps(shm_root, [0], world_size=1, patch_dim=D)
    reader = BatchReader(
        shm_root, 0, timeout_s=5, manifest_poll_interval_s=0.01, read_ahead=read_ahead
    )
    assert next(reader).step == 0  # the read-ahead waits for g1's step 1, which never comes

    def resubmit():
        time.sleep(0.05)
        shutil.rmtree(shm_root / f"gen-{GEN}")
        _publish(shm_root, "g2", 0, 4)

    t = threading.Thread(target=resubmit)
    t.start()
    assert [b.step for b in reader] == [1, 2, 3]
    t.join()
    assert reader.generation == "g2" and _consumed(shm_root, "g2") == 3


@BOTH
def test_an_ack_error_during_a_switch_does_not_lose_the_switch(shm_root, read_ahead, monkeypatch):
    """The switch's ack in the new generation fails once (e.g. ENOSPC in /dev/shm): the request
    raises it, and the next request follows the new generation (it used to stay on the old,
    deleted directory for good: TimeoutError, or a hang without timeout_s)."""
    make_job(shm_root, world_size=1, num_steps=1, patch_dim=D)
    write_manifest(shm_root, world_size=1, num_steps=4, patch_dim=D)  # steps 1.. never come
    reader = BatchReader(
        shm_root, 0, timeout_s=0.5, manifest_poll_interval_s=0.01, read_ahead=read_ahead
    )
    assert next(reader).step == 0
    real = stoker.protocol.write_json_atomic
    failures = []

    def full_once(path, obj):
        if "gen-g2" in str(path) and not failures:
            failures.append(path)
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, obj)

    monkeypatch.setattr(stoker.protocol, "write_json_atomic", full_once)
    shutil.rmtree(shm_root / f"gen-{GEN}")
    _publish(shm_root, "g2", 1, 4)
    with pytest.raises(OSError, match="No space left"):
        next(reader)
    b = next(reader)
    assert b.step == 1 and "gen-g2" in b.path and reader.generation == "g2"
    assert [b.step for b in reader] == [2, 3] and _consumed(shm_root, "g2") == 3


def test_an_old_generation_ack_error_around_a_switch_does_not_lose_it(shm_root):
    """Read-ahead only: the background ack of the old generation fails while the request
    switches generations. The error is raised by one request (the switch's flush used to raise
    it half-way through the switch, which was then lost for good: TimeoutError on the old,
    deleted directory); every step still comes from the new generation."""
    make_job(shm_root, world_size=1, num_steps=1, patch_dim=D)
    write_manifest(shm_root, world_size=1, num_steps=4, patch_dim=D)
    reader = BatchReader(shm_root, 0, timeout_s=0.5, manifest_poll_interval_s=0.01)
    assert next(reader).step == 0
    (rank_dir(shm_root, 0) / "ack.json").mkdir()  # the old generation's ack cannot be written
    _publish(shm_root, "g2", 1, 4)
    time.sleep(0.03)
    steps, errors = [], []
    while True:
        try:
            b = next(reader)
        except StopIteration:
            break
        except IsADirectoryError as e:
            errors.append(e)
            shutil.rmtree(shm_root / f"gen-{GEN}", ignore_errors=True)
            continue
        assert "gen-g2" in b.path
        steps.append(b.step)
    assert steps == [1, 2, 3] and len(errors) == 1
    assert reader.generation == "g2" and _consumed(shm_root, "g2") == 3


# ------------------------------------------------------------------ ack errors
@BOTH
def test_a_transient_ack_error_is_raised_once_and_later_acks_are_written(shm_root, read_ahead):
    """An ack that cannot be written fails one request; once the cause is gone, the reader
    acks again (read_ahead=True used to raise the stale error on every other request and never
    write an ack again)."""
    make_job(shm_root, world_size=1, num_steps=6, patch_dim=D)
    ack = rank_dir(shm_root, 0) / "ack.json"
    reader = BatchReader(shm_root, 0, timeout_s=5, read_ahead=read_ahead)
    assert next(reader).step == 0
    ack.mkdir()  # renaming the new ack onto it fails
    steps, errors = [], []
    while len(errors) < 1:
        try:
            steps.append(next(reader).step)
        except IsADirectoryError as e:
            errors.append(e)
    ack.rmdir()  # the cause is gone
    # on the ack thread, the ack the raising request handed over may have run before the rmdir:
    # its error is raised once too
    late = []
    while True:
        try:
            steps.append(next(reader).step)
        except StopIteration:
            break
        except IsADirectoryError as e:
            late.append(e)
    assert steps == [1, 2, 3, 4, 5]
    assert len(errors) == 1 and len(late) <= (1 if read_ahead else 0)
    assert _consumed(shm_root) == 5


def test_an_ack_error_does_not_drop_the_ack_of_the_request_that_raises_it(shm_root, monkeypatch):
    make_job(shm_root, world_size=1, num_steps=4, patch_dim=D)
    real = stoker.protocol.write_json_atomic
    calls = []

    def fail_first(path, obj):
        calls.append(obj["consumed_step"])
        if len(calls) == 1:
            raise OSError(errno.EIO, "I/O error", str(path))
        real(path, obj)

    monkeypatch.setattr(stoker.protocol, "write_json_atomic", fail_first)
    reader = BatchReader(shm_root, 0, timeout_s=5)
    assert [next(reader).step, next(reader).step] == [0, 1]  # ack 0 fails on the thread
    assert eventually(lambda: calls == [0])
    with pytest.raises(OSError, match="I/O error"):
        next(reader)  # hands over ack 1, raises ack 0's error
    assert eventually(lambda: _consumed(shm_root) == 1)  # ack 1 was written nonetheless
    assert [b.step for b in reader] == [2, 3] and _consumed(shm_root) == 3


# ------------------------------------------------------------------ close, GC, threads
def test_close_waits_for_the_acks_handed_over(shm_root, monkeypatch):
    """After close(), ack.json holds every ack the reader counted (a trainer that closes and
    exits, or starts a new reader, must not lose an ack or see it land later)."""
    make_job(shm_root, world_size=1, num_steps=4, patch_dim=D)
    gate = threading.Event()
    real = stoker.protocol.write_ack_and_unlink

    def slow_ack(rdir, content):
        gate.wait(5)
        return real(rdir, content)

    monkeypatch.setattr(stoker.protocol, "write_ack_and_unlink", slow_ack)
    reader = BatchReader(shm_root, 0, timeout_s=5)
    assert [next(reader).step, next(reader).step, next(reader).step] == [0, 1, 2]
    assert reader.last_acked_step == 1
    threading.Timer(0.1, gate.set).start()
    reader.close()
    assert _consumed(shm_root) == 1
    # a new reader (trainer restarted from its checkpoint after step 2) acks 2; nothing older
    # lands after it
    monkeypatch.setattr(stoker.protocol, "write_ack_and_unlink", real)
    again = BatchReader(shm_root, 0, timeout_s=5, start_step=3)
    assert [b.step for b in again] == [3]
    assert _consumed(shm_root) == 3


def test_close_from_del_does_not_wait(shm_root, monkeypatch):
    """Garbage collection may run __del__ on any thread, the ack thread included: it must not
    wait for the acks."""
    make_job(shm_root, world_size=1, num_steps=4, patch_dim=D)
    gate = threading.Event()
    real = stoker.protocol.write_ack_and_unlink
    monkeypatch.setattr(
        stoker.protocol, "write_ack_and_unlink", lambda d, c: gate.wait(5) and real(d, c)
    )
    before = frozenset(threading.enumerate())
    reader = BatchReader(shm_root, 0, timeout_s=5)
    next(reader)
    next(reader)
    t0 = time.monotonic()
    del reader
    assert time.monotonic() - t0 < 4.0  # not the 5 s the gate holds the ack thread
    gate.set()
    assert eventually(lambda: _consumed(shm_root) == 0)
    assert eventually(lambda: not _reader_threads(before), 2)


def test_abandoned_readers_end_their_threads(shm_root):
    before = frozenset(threading.enumerate())
    for i in range(30):
        root = shm_root / f"j{i}"
        make_job(root, world_size=1, num_steps=4, patch_dim=D)
        os.unlink(rank_dir(root, 0) / "step-0000000003.arrow")
        reader = BatchReader(root, 0, timeout_s=5, start_step=1)
        next(reader)
        next(reader)  # both threads started; the read-ahead waits for step 3 (never comes)
        del reader  # no close(): __del__
        assert len(_reader_threads(before)) <= 4  # this reader's, and the last one's, ending
    assert eventually(lambda: not _reader_threads(before), 2)


def test_readers_that_failed_end_their_threads_without_gc(shm_root):
    """A sticky BatchFormatError from the read-ahead used to keep the reader alive through the
    read-ahead thread (its last task's exception traceback) and leak both threads for good."""
    base = shm_root
    before = frozenset(threading.enumerate())
    for i in range(10):
        root = base / f"j{i}"
        write_manifest(root, world_size=1, num_steps=3, patch_dim=D)
        write_steps(root, [0], world_size=1, patch_dim=D)
        (rank_dir(root, 0) / "step-0000000001.arrow").write_bytes(b"not arrow" * 10)
        reader = BatchReader(root, 0, timeout_s=5)
        next(reader)
        assert eventually(lambda r=reader: r._ahead.wait(0))
        with pytest.raises(BatchFormatError):
            next(reader)
        with pytest.raises(BatchFormatError):
            next(reader)  # sticky
        del reader
    assert eventually(lambda: not _reader_threads(before), 2), _reader_threads(before)


_ABANDON = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from harness.batches import write_manifest, write_steps
import stoker.protocol
from stoker import BatchReader
real = stoker.protocol.write_ack_and_unlink
def slow_ack(rank_dir, content):  # an ack still queued when the trainer's loop ends
    time.sleep(0.2)
    return real(rank_dir, content)
stoker.protocol.write_ack_and_unlink = slow_ack
root = Path({root!r})
write_manifest(root, world_size=1, num_steps=10, patch_dim=8)
write_steps(root, [0, 1, 2], world_size=1, patch_dim=8)
reader = BatchReader(root, 0, timeout_s=None)
for batch in reader:
    if batch.step == 2:
        {how}
print("t_exit", time.monotonic(), flush=True)
"""


@pytest.mark.parametrize("how", ["break", "raise KeyboardInterrupt"])
def test_a_process_that_abandons_a_waiting_read_ahead_exits_at_once_with_its_acks(shm_root, how):
    script = _ABANDON.format(
        tests=str(Path(__file__).resolve().parents[1]), root=str(shm_root), how=how
    )  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, env=env
    )
    t_end = time.monotonic()
    if how == "break":
        assert p.returncode == 0, p.stderr
        t_exit = float(p.stdout.split()[-1])
        # the read-ahead of step 3 (never written) holds nothing up: not its 60 s give-up, not
        # the 5 s cap of the exit flush (a loaded machine may take a second or two to exit)
        assert t_end - t_exit < 4.0
    else:
        assert "KeyboardInterrupt" in p.stderr
    # the acks handed over before the exit were written, although the ack thread is a daemon
    # (step 2 is the trainer's, not acked)
    assert _consumed(shm_root) == 1
    assert sorted(os.listdir(rank_dir(shm_root, 0))) == ["ack.json", "step-0000000002.arrow"]


# ------------------------------------------------------------------ interrupts, timeouts
@BOTH
def test_keyboard_interrupt_while_waiting_leaves_the_reader_usable(shm_root, read_ahead, request):
    write_manifest(shm_root, world_size=1, num_steps=3, patch_dim=D)
    write_steps(shm_root, [0], world_size=1, patch_dim=D)
    reader = BatchReader(shm_root, 0, timeout_s=5, read_ahead=read_ahead)
    assert next(reader).step == 0
    # a background job of a non-interactive shell (./stoker test's streams) starts with SIGINT
    # ignored, and then interrupt_main does nothing: Python's own handler, for this test only
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    threading.Timer(0.05, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        next(reader)  # waits for step 1
    assert eventually(lambda: _consumed(shm_root) == 0)
    write_steps(shm_root, [1, 2], world_size=1, patch_dim=D)
    assert [b.step for b in reader] == [1, 2]
    assert _consumed(shm_root) == 2 and reader.batches_read == 3


@BOTH
def test_an_exception_in_the_trainer_loop_then_going_on(shm_root, read_ahead):
    make_job(shm_root, world_size=1, num_steps=4, patch_dim=D)
    reader = BatchReader(shm_root, 0, timeout_s=5, read_ahead=read_ahead)
    with pytest.raises(KeyboardInterrupt):
        for b in reader:
            if b.step == 1:
                raise KeyboardInterrupt
    assert [b.step for b in reader] == [2, 3]
    assert _consumed(shm_root) == 3


@BOTH
def test_timeout_then_retry_returns_the_step(shm_root, read_ahead):
    write_manifest(shm_root, world_size=1, num_steps=3, patch_dim=D)
    write_steps(shm_root, [0], world_size=1, patch_dim=D)
    reader = BatchReader(shm_root, 0, timeout_s=0.1, read_ahead=read_ahead)
    assert next(reader).step == 0
    with pytest.raises(TimeoutError, match="step-0000000001"):
        next(reader)
    write_steps(shm_root, [1, 2], world_size=1, patch_dim=D)
    assert [b.step for b in reader] == [1, 2]
    assert _consumed(shm_root) == 2


# ------------------------------------------------------------------ start / stop edge cases
@BOTH
@pytest.mark.parametrize(
    ("start", "stop", "steps", "consumed", "left"),
    [
        (None, None, [0, 1, 2, 3], 3, []),
        (None, -1, [], None, [0, 1, 2, 3]),
        (None, 0, [0], 0, [1, 2, 3]),
        (2, 1, [], 1, [2, 3]),  # stop before start: the start ack only
        (3, None, [3], 3, []),
        (4, None, [], 3, []),  # start at the end: nothing to read, the skip acked
    ],
)
def test_start_and_stop_edge_cases_agree_in_both_modes(
    shm_root, read_ahead, start, stop, steps, consumed, left
):
    make_job(shm_root, world_size=1, num_steps=4, patch_dim=D)
    reader = BatchReader(
        shm_root, 0, timeout_s=1, start_step=start, stop_after_step=stop, read_ahead=read_ahead
    )
    assert [b.step for b in reader] == steps
    assert reader._ahead is None  # no read-ahead of a step past the end
    with pytest.raises(StopIteration):
        next(reader)
    assert _consumed(shm_root) == consumed
    files = sorted(p.name for p in rank_dir(shm_root, 0).glob("step-*.arrow"))
    assert files == [f"step-{s:010d}.arrow" for s in left]
    assert reader.batches_read_ahead == (max(0, len(steps) - 1) if read_ahead else 0)


# ------------------------------------------------------------------ fork
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_read_on_while_the_parent_holds_the_rank(shm_root):
    """The read-ahead and ack threads and the rank lock do not survive fork(): a child that
    iterates on would be a second reader of the rank (e.g. forked DataLoader workers over a
    started reader), so it fails at once, naming the parent, instead of taking some of the
    rank's batches or waiting for a read-ahead that nobody runs; the parent reads on."""
    write_manifest(shm_root, world_size=1, num_steps=4, patch_dim=D)
    write_steps(shm_root, [0], world_size=1, patch_dim=D)
    reader = BatchReader(shm_root, 0, timeout_s=2)
    assert next(reader).step == 0  # the read-ahead of step 1 waits
    write_steps(shm_root, [1, 2, 3], world_size=1, patch_dim=D)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        errors = []
        for _ in range(2):  # the error repeats
            try:
                next(reader)
                errors.append("read")
            except RankInUseError as e:
                errors.append(str(e))
        os.write(w, json.dumps(errors).encode())
        os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    out = json.loads(os.read(r, 10000).decode())
    os.close(r)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(out) == 2 and all(f"this process's parent, {os.getpid()}" in e for e in out), out
    assert [b.step for b in reader] == [1, 2, 3]
    assert _consumed(shm_root) == 3
    reader.close()
