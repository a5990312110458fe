"""The trainer's reader of one DP rank: which batch file when, acks, generations, threads.

Its part of the contract (``docs/batch-protocol.md``, "Consuming" and "Generations and resume"):
read steps ``start .. num_steps - 1`` of the rank in order, each exactly once; acknowledge step
``s`` (``ack.json``, which paces the job's prefetch) and unlink its file when step ``s + 1`` is
requested; announce a start after the generation's ``first_step``; follow the job to a new
generation and go on at the same step, or raise :class:`~stoker.protocol.ResumeError` when the
job will not produce it. The files' names and fields are :mod:`stoker.protocol`'s, mapping and
checking one file is :mod:`stoker.batch`'s.

Typical trainer loop, one process per DP rank::

    from stoker import BatchReader

    # start_step: the step after the trainer checkpoint's step; default: the job's first_step
    reader = BatchReader("/dev/shm/stoker/my-job", rank=dp_rank, start_step=None)
    for batch in reader:                 # waits for each step's file
        inputs = batch.to_torch()        # dict of torch tensors over the mapped memory
        loss = model(**inputs).loss      # batch.backfilled_slots: rows that repeat another row
        ...
    print(reader.wait_time_ratio)

The job directory holds ``manifest.json``, which names the current *generation*; batches live in
``gen-<generation>/rank-<r>/step-<s:010d>.arrow``. Requesting step ``s + 1`` acknowledges step
``s`` (``ack.json`` in the same directory, which also paces the job's prefetch) and unlinks its
file, both on a background thread, while another maps the next step's file ahead. When the job is
resubmitted while the trainer runs (a new generation), the reader follows the manifest to the new
generation's directory and continues at the same step. While it reads, the reader holds an
exclusive ``flock`` on ``reader-<rank>.lock`` in the job directory, so a second reader of the rank
(a trainer process of an earlier run still alive) fails with :class:`~stoker.protocol.RankInUseError`
instead of taking some of the rank's batches.
"""

from __future__ import annotations

import atexit
import fcntl
import functools
import os
import queue
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import protocol
from .batch import Batch, checks_for, read_batch_file
from .protocol import BatchFormatError, Manifest, RankInUseError, ResumeError, resume_fix

__all__ = ["BatchReader"]

#: Seconds a read-ahead thread waits for its file when the reader has no ``timeout_s``; the
#: request that needs the file then waits for it itself.
_READ_AHEAD_GIVE_UP_S = 60.0
#: Seconds the interpreter's exit waits at most for each reader's queued acks.
_EXIT_FLUSH_S = 5.0


class _BackgroundThread:
    """A reader's daemon thread: runs the tasks handed to it one after another.

    A daemon, so a task still waiting for a file never holds up the interpreter's exit; started
    once, so handing over a task costs a queue put, not a thread start (which waits for the new
    thread to be scheduled). The first exception a task raises is kept for :meth:`take_error`
    (the later tasks still run). The thread holds no reference to a task once it has run (an
    exception a task kept, raised in the trainer's request, refers to the reader).
    """

    def __init__(self, name: str) -> None:
        self._tasks: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, task: Callable[[], object]) -> None:
        """Queue ``task``; it runs after the tasks queued before it."""
        self._tasks.put(task)

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until the tasks queued so far have run (or the thread ended: stopped by another
        thread meanwhile, or not carried over into a forked child), at most ``timeout_s``."""
        done = threading.Event()
        self.submit(done.set)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not done.wait(0.05):
            if not self._thread.is_alive():
                return
            if deadline is not None and time.monotonic() >= deadline:
                return

    def take_error(self) -> Exception | None:
        """The first exception a task raised since the last call, or ``None``; clears it."""
        if self._error is None:  # the common case, without the lock
            return None
        with self._lock:
            error, self._error = self._error, None
        return error

    def stop(self) -> None:
        """End the thread once the queued tasks have run."""
        self._tasks.put(None)

    def _run(self) -> None:
        while True:
            task = self._tasks.get()
            if task is None:
                return
            try:
                task()
            except Exception as e:  # noqa: BLE001 - kept for the reader to raise
                with self._lock:
                    if self._error is None:
                        self._error = e
                del e
            del task


#: The ack threads of the live readers, flushed when the interpreter exits.
_ACK_THREADS: weakref.WeakSet[_BackgroundThread] = weakref.WeakSet()


@atexit.register
def _flush_acks_at_exit() -> None:
    """Write the acks still queued when the interpreter exits (the ack threads are daemons: a
    trainer that ends without :meth:`BatchReader.close` would otherwise lose the last ones).
    ``atexit`` runs while daemon threads still run."""
    for thread in list(_ACK_THREADS):
        thread.flush(_EXIT_FLUSH_S)


class _RankLock:
    """A reader's exclusive ``flock`` on its rank's lock file, ``<job dir>/reader-<rank>.lock``
    (:func:`~stoker.protocol.reader_lock_name`), so that two readers of one rank on a node fail
    instead of silently sharing its batches.

    The file holds the holder's pid and host, for the message of the reader that finds it taken.
    The kernel releases the lock when the holding process ends, however it ends. A lock file
    removed or replaced while held (the job directory removed and made again for a new job of
    the same name, or the file deleted by hand) would let a second reader lock a new file, so
    the holder checks with :meth:`check` that the file at the path is still the one it locked,
    and stops if not. In a forked child the descriptor is closed (without unlocking: the lock
    belongs to the open file, which the parent still holds), so a child that outlives its
    parent does not keep the rank locked.
    """

    def __init__(self, path: Path, rank: int) -> None:
        self.path = path
        self.rank = rank
        self._fd: int | None = None
        _LOCKS.add(self)

    def hold(self) -> None:
        """Take the lock (nothing if held).

        Raises:
            RankInUseError: another reader holds it (the message names it).
            OSError: the lock file cannot be opened (e.g. the job directory is not writable).
        """
        if self._fd is not None:
            return
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 256, 0).decode("utf-8", "replace").split()
                os.close(fd)
                raise RankInUseError(self._in_use_message(holder)) from None
            except BaseException:
                os.close(fd)
                raise
            if self._is_current(fd):  # not replaced between the open and the lock
                break
            os.close(fd)
        stamp = f"{os.getpid()} {socket.gethostname()}\n".encode()
        os.pwrite(fd, stamp, 0)  # then cut to it: a reader that looks never sees it empty
        os.ftruncate(fd, len(stamp))
        self._fd = fd

    def check(self) -> None:
        """Whether the lock still guards the rank: the file at :attr:`path` is the one held.

        Raises:
            RankInUseError: it was removed or replaced (the job directory made again, or the
                file deleted), so another reader may hold the rank; nothing if not held.
        """
        if self._fd is None or self._is_current(self._fd):
            return
        raise RankInUseError(
            f"rank {self.rank}: {self.path}, which this reader locked, was removed or replaced "
            "(the job directory made again for another job of the same name, or the lock file "
            "deleted), so this reader stops: another reader may now hold the rank, and this one "
            "would take some of its batches. A trainer of an earlier run: stop it"
        )

    def release(self) -> None:
        """Close the descriptor, which unlocks the file once no other process holds a copy of it
        (in a forked child: the parent's lock stays); nothing if not held."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def _is_current(self, fd: int) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)

    def _in_use_message(self, holder: list[str]) -> str:
        pid = int(holder[0]) if holder and holder[0].isdigit() else None
        host = holder[1] if len(holder) > 1 else "?"
        if pid is None:
            who = "another process"
        elif pid == os.getpid() and host == socket.gethostname():
            who = (
                "another open BatchReader of this process: close() it first, or drop what keeps "
                "it alive (a stored exception's traceback, a generator over it)"
            )
        elif pid == os.getppid() and host == socket.gethostname():
            who = (
                f"this process's parent, {pid}: a reader does not go on in a forked child; "
                "make the reader in the child, or close it in the parent before the fork"
            )
        elif host == socket.gethostname():
            state = "still running" if _alive(pid) else "ended; a process it forked holds it"
            who = f"process {pid}, {state}"
        else:
            who = f"process {pid} on {host}"
        return (
            f"rank {self.rank}: another reader holds {self.path} ({who}). Two readers of one "
            "rank would each take, acknowledge and unlink some of its batches, and each wait "
            "forever for a step the other took; stop the other reader (a trainer of an earlier "
            "run left running?) before starting this one"
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: The rank locks of this process, whose descriptors a forked child closes.
_LOCKS: weakref.WeakSet[_RankLock] = weakref.WeakSet()


def _close_locks_in_child() -> None:
    for lock in list(_LOCKS):
        lock.release()


os.register_at_fork(after_in_child=_close_locks_in_child)


class _ReadAhead:
    """One step's batch file, mapped and checked on the reader's background thread.

    :meth:`run` waits for the file of ``step`` in ``rank_dir`` to appear (a ``stat`` every
    ``poll_interval_s``, for at most ``give_up_s``, or until :meth:`cancel`), then runs
    :func:`read_batch_file` with the checks that ``manifest`` implies, so the trainer's next
    request finds the batch mapped and validated. The :class:`BatchReader` still decides whether
    to use it (same generation, same step) and reads the file itself when the read-ahead gave
    up, was cancelled or saw the file vanish.

    What the trainer's request does with it is kept to attribute reads and calls into C (no
    ``pathlib``, no ``threading.Event``): the request runs right after the trainer's compute,
    on a core whose caches that compute evicted, where each further piece of Python code it
    touches costs a tenth of a millisecond or more.
    """

    def __init__(
        self,
        manifest: Manifest,
        rank: int,
        rank_dir: Path,
        step: int,
        poll_interval_s: float,
        give_up_s: float,
    ) -> None:
        self.manifest = manifest
        self.rank = rank
        self.rank_dir = rank_dir
        self.step = step
        self._poll_interval_s = poll_interval_s
        self._give_up_s = give_up_s
        self._running = threading.Lock()  # held until run() finished
        self._running.acquire()
        self._waiting = threading.Lock()  # held until cancel()
        self._waiting.acquire()
        self._batch: Batch | None = None
        self._error: Exception | None = None

    def run(self) -> None:
        """Wait for the file and map it (on the background thread)."""
        try:
            path = self.rank_dir / protocol.batch_file_name(self.step)
            give_up = time.monotonic() + self._give_up_s
            while self._waiting.locked() and time.monotonic() < give_up:
                if path.exists():
                    self._batch = read_batch_file(
                        path, **checks_for(self.manifest, self.rank, self.step)
                    )
                    return
                if self._waiting.acquire(timeout=self._poll_interval_s):
                    return  # cancelled
        except FileNotFoundError:
            pass  # removed between the check and the mapping: the reader reads it itself
        except Exception as e:  # noqa: BLE001 - raised in the trainer's request, as if read there
            self._error = e
        finally:
            self._running.release()

    @property
    def finished(self) -> bool:
        """Whether :meth:`run` finished (without waiting)."""
        return not self._running.locked()

    def wait(self, timeout_s: float) -> bool:
        """Whether :meth:`run` finished, waiting at most ``timeout_s``."""
        if not self._running.acquire(timeout=timeout_s):
            return False
        self._running.release()
        return True

    def result(self) -> Batch | None:
        """The mapped batch, or ``None`` (gave up, cancelled, file vanished); call once
        :attr:`finished`.

        Raises:
            BatchFormatError: the file did not pass :func:`read_batch_file`'s checks.
        """
        if self._error is not None:
            raise self._error
        return self._batch

    def cancel(self) -> None:
        """Stop waiting for the file (a mapping already made is dropped with this object)."""
        try:
            self._waiting.release()
        except RuntimeError:
            pass  # cancelled before


class BatchReader:
    """Iterate the batches of one DP rank from a Stoker job directory.

    Args:
        root: job directory, e.g. ``/dev/shm/stoker/<job-name>`` (holds ``manifest.json``).
        rank: 0-based DP rank; reads ``<root>/gen-<generation>/rank-<rank>/``.
        poll_interval_s: seconds between checks for a file that is not there yet.
        timeout_s: maximum seconds to wait for the manifest or any one batch file (restarted
            when the reader follows a new generation); ``None`` waits forever.
        start_step: first step to read, i.e. the step after the trainer checkpoint's step.
            ``None`` (default): the manifest's ``first_step``. A start step after
            ``first_step`` is announced to the job on the first request: ``ack.json`` gets
            ``consumed_step = start_step - 1`` (so the job's prefetch gate moves on and the sink
            does not write steps the trainer skips) and files of earlier steps are unlinked.
        manifest_poll_interval_s: while waiting for a batch file, seconds between checks of
            ``manifest.json`` for a new generation (a ``stat``; the file is parsed only when
            it changed).
        stop_after_step: last step to read (a trainer that stops, e.g. to be restarted from its
            checkpoint at that step); ``None`` (default): ``num_steps - 1``. The request after
            it acknowledges it, as at the end of the run, and ends the iteration.
        read_ahead: after returning a batch, map and check the next step's file on a daemon
            thread while the trainer computes (waiting for it if it is not there yet), and write
            each ack and unlink the acked file on another, in order, so a request only hands
            over a mapped batch. An error writing an ack is raised (once) by a later request;
            the request that ends the iteration, :meth:`close` and the interpreter's exit wait
            for every ack. ``False`` does all of it in the request, on the trainer's thread.

    Iterating yields :class:`Batch` for steps ``start_step .. end_step - 1``, in order, each
    exactly once (``end_step``: ``num_steps``, or ``stop_after_step + 1`` if that is smaller).
    If the job is resubmitted meanwhile (new generation in ``manifest.json``), the reader
    switches to the new generation's directory: it acks ``next_step - 1`` there, unlinks that
    directory's files of earlier steps and keeps waiting for ``next_step``.

    Raises (while iterating):
        TimeoutError: a file did not appear within ``timeout_s`` (message names the path).
        BatchFormatError: the manifest or a batch file does not match the protocol/schema,
            or a new generation changed ``world_size`` or ``micro_batch_size`` (message names
            the file).
        RankInUseError: another reader of ``rank`` holds the rank's lock in the job directory
            (``reader-<rank>.lock``, an exclusive ``flock`` each reader takes on its first request
            and keeps until :meth:`close`; the message names the process), the lock file was
            removed or replaced while this reader held it (the job directory made again), or a
            started reader goes on in a forked child while the parent holds the rank. Two
            readers of one rank would each take some of its batches. Raised by a started
            reader, it repeats on every later request; by the first request, the next one tries
            again.
        ResumeError: (a ``ValueError``) ``start_step`` is before the generation's
            ``first_step``, a new generation starts after the reader's next step, or the
            rank's ``ack.json`` already marks the next step consumed. The message names the
            steps and the ``--stoker.resume-step`` to resubmit the job with. The error repeats
            on every later request.
        ValueError: ``rank`` is outside ``[0, world_size)``.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        rank: int,
        *,
        poll_interval_s: float = 0.005,
        timeout_s: float | None = None,
        start_step: int | None = None,
        manifest_poll_interval_s: float = 0.1,
        stop_after_step: int | None = None,
        read_ahead: bool = True,
    ) -> None:
        if rank < 0:
            raise ValueError(f"rank must be >= 0, got {rank}")
        if poll_interval_s <= 0:
            raise ValueError(f"poll_interval_s must be > 0, got {poll_interval_s}")
        if manifest_poll_interval_s <= 0:
            raise ValueError(
                f"manifest_poll_interval_s must be > 0, got {manifest_poll_interval_s}"
            )
        if start_step is not None and start_step < 0:
            raise ValueError(f"start_step must be >= 0, got {start_step}")
        if stop_after_step is not None and stop_after_step < -1:
            raise ValueError(f"stop_after_step must be >= -1, got {stop_after_step}")
        self.root = Path(root)
        self._manifest_path = str(
            self.root / protocol.MANIFEST_FILE
        )  # a str: stat'ed every request
        self.rank = rank
        self.poll_interval_s = poll_interval_s
        self.timeout_s = timeout_s
        self.manifest_poll_interval_s = manifest_poll_interval_s
        self._requested_start = start_step
        self._stop_after = stop_after_step
        self.read_ahead = read_ahead
        self._lock = _RankLock(self.root / protocol.reader_lock_name(rank), rank)
        self._pid = os.getpid()  # the threads below are not carried over into a forked child
        self._ahead: _ReadAhead | None = None
        self._reads: _BackgroundThread | None = None  # read-ahead
        self._acks: _BackgroundThread | None = None  # acks and unlinks, in order
        self._manifest: Manifest | None = None
        self._manifest_sig: tuple[int, int, int] | None = None
        self._next_manifest_check = 0.0
        self._next_step: int | None = None  # resolved on the first request
        self._pending_ack: tuple[int, Path] | None = None  # (step, its rank directory)
        self._rank_dir: tuple[Manifest, Path] | None = None  # rank_dir of that manifest
        self._failure: Exception | None = None
        self._t0: float | None = None
        self._done = False
        #: Seconds spent inside ``__next__`` (waiting, acking, mapping), i.e. data-wait time.
        self.data_wait_s = 0.0
        #: Number of batches returned.
        self.batches_read = 0
        #: Number of returned batches the read-ahead had mapped (the rest were mapped in the
        #: request: the first one, and any after a generation switch or a read-ahead give-up).
        self.batches_read_ahead = 0
        #: Number of returned batches acknowledged in ``ack.json`` (or handed to the ack thread
        #: to write; skip acks not counted).
        self.steps_acked = 0
        #: Samples (back-filled ones included; unpacked, one per row), back-filled samples,
        #: rows (packed: several samples each), images and patches returned so far.
        self.samples_read = 0
        self.backfilled_read = 0
        self.rows_read = 0
        self.images_read = 0
        self.patches_read = 0
        #: Bytes of batch files mapped so far.
        self.bytes_mapped = 0
        #: Last step acknowledged (also by a start or generation-switch ack), or ``None``.
        self.last_acked_step: int | None = None
        #: Times the reader followed the job to a new generation.
        self.generation_switches = 0

    # ------------------------------------------------------------------ public API
    @property
    def manifest(self) -> Manifest:
        """The manifest of the generation being read; waits for ``manifest.json``.

        Raises:
            TimeoutError: no manifest within ``timeout_s``.
            BatchFormatError: the manifest is invalid.
            ValueError: ``rank`` is outside ``[0, world_size)``.
        """
        if self._manifest is None:
            path = self.root / protocol.MANIFEST_FILE
            self._wait_for(path)
            sig = self._stat_manifest()  # before reading: a newer file is then seen as changed
            m = Manifest.load(path)
            if self.rank >= m.world_size:
                raise ValueError(f"rank {self.rank} is outside world_size {m.world_size} ({path})")
            self._manifest, self._manifest_sig = m, sig
            self._next_manifest_check = time.monotonic() + self.manifest_poll_interval_s
        return self._manifest

    @property
    def generation(self) -> str:
        """The generation being read (``manifest.generation``)."""
        return self.manifest.generation

    @property
    def rank_dir(self) -> Path:
        """``<root>/gen-<generation>/rank-<rank>``, the directory being read."""
        m = self.manifest
        if self._rank_dir is None or self._rank_dir[0] is not m:
            self._rank_dir = (m, m.rank_dir(self.root, self.rank))
        return self._rank_dir[1]

    @property
    def num_steps(self) -> int:
        """Steps of the whole run, all epochs (from the manifest)."""
        return self.manifest.num_steps

    @property
    def end_step(self) -> int:
        """One past the last step this reader returns: ``num_steps``, or ``stop_after_step + 1``."""
        if self._stop_after is None:
            return self.num_steps
        return min(self.num_steps, self._stop_after + 1)

    @property
    def start_step(self) -> int:
        """The first step this reader returns: ``start_step`` if given, else ``first_step``."""
        if self._requested_start is not None:
            return self._requested_start
        return self.manifest.first_step

    @property
    def next_step(self) -> int:
        """The step the next request returns (``start_step`` before the first request)."""
        return self.start_step if self._next_step is None else self._next_step

    @property
    def elapsed_s(self) -> float:
        """Seconds since the first batch was requested (0 before)."""
        return 0.0 if self._t0 is None else time.monotonic() - self._t0

    @property
    def wait_time_ratio(self) -> float:
        """``data_wait_s / elapsed_s`` in [0, 1]; 0.0 before the first request."""
        el = self.elapsed_s
        return min(1.0, self.data_wait_s / el) if el > 0 else 0.0

    def counters(self) -> dict[str, float | int]:
        """Snapshot of the counters (for logging/metrics)."""
        return {
            "rank": self.rank,
            "batches_read": self.batches_read,
            "batches_read_ahead": self.batches_read_ahead,
            "steps_acked": self.steps_acked,
            "samples_read": self.samples_read,
            "backfilled_read": self.backfilled_read,
            "rows_read": self.rows_read,
            "images_read": self.images_read,
            "patches_read": self.patches_read,
            "bytes_mapped": self.bytes_mapped,
            "generation_switches": self.generation_switches,
            "data_wait_s": self.data_wait_s,
            "elapsed_s": self.elapsed_s,
            "wait_time_ratio": self.wait_time_ratio,
        }

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        """Ack the previous step, wait for the next file and return its :class:`Batch`."""
        t_start = time.monotonic()
        if self._t0 is None:
            self._t0 = t_start
        try:
            if self._failure is not None:
                raise self._failure
            if self._pid != os.getpid():
                self._after_fork()
            if self._next_step is None:
                try:
                    self._start(t_start)
                except BaseException:
                    self._lock.release()  # a reader that did not start holds no rank
                    raise
            assert self._next_step is not None
            if self._done or self._next_step >= self.end_step:
                self._ack_pending(t_start, background=False)
                self.close()
                raise StopIteration
            step = self._next_step
            try:
                mapped = self._take_mapped(step, t_start)
                if mapped is None:
                    # the job may be waiting for this ack (its prefetch bound) to write the step
                    self._ack_pending(t_start, background=self.read_ahead)
                    batch, rank_dir = self._wait_and_read(step, t_start), self.rank_dir
                else:
                    batch, rank_dir = mapped
                    # only now: a woken background thread contends with the request for the GIL
                    self._ack_pending(t_start, background=True)
                    self.batches_read_ahead += 1
            except (ResumeError, BatchFormatError, RankInUseError) as e:
                self._failure = e
                # a request that raises still acks the step returned before (and the threads
                # end after writing it), unless the rank may be another reader's now; the error
                # repeats on every later request
                if not isinstance(e, RankInUseError):
                    self._hand_over_ack(t_start, background=self.read_ahead)
                else:
                    self._pending_ack = None
                self._stop_threads()
                self._lock.release()
                raise
            self._next_step += 1
            self._pending_ack = (step, rank_dir)
            if self.read_ahead and self._next_step < self.end_step:
                self._start_read_ahead(self._next_step)
            self.batches_read += 1
            self.samples_read += batch.num_samples
            self.backfilled_read += len(batch.backfilled_slots)
            self.rows_read += batch.num_rows
            self.images_read += batch.num_images
            self.patches_read += int(batch.pixel_values.shape[0])
            self.bytes_mapped += batch.mapping_range[1]
            return batch
        finally:
            self.data_wait_s += time.monotonic() - t_start

    def close(self) -> None:
        """Stop iterating, wait for the acks handed to the background thread (so ``ack.json``
        says :attr:`last_acked_step` when it returns; an error writing one is not raised) and
        end the background threads (also at the end of the iteration; when the reader is
        garbage-collected, without waiting). The current (unacknowledged) step is left in place,
        not acked."""
        self._done = True
        acks = self._acks
        if acks is not None and self._pid == os.getpid():
            acks.flush()
        self._stop_threads()
        self._lock.release()

    def __del__(self) -> None:
        # not close(): garbage collection may run this on any thread, the ack thread included
        if hasattr(self, "_acks"):  # not if __init__ raised
            self._done = True
            self._stop_threads()
            self._lock.release()

    def _stop_threads(self) -> None:
        self._drop_read_ahead()
        for thread in (self._reads, self._acks):
            if thread is not None:
                thread.stop()
        self._reads = self._acks = None

    def _after_fork(self) -> None:
        """In a forked child: the parent's background threads and its rank lock did not come
        along; start over (the acks the parent handed over are the parent's to write). A reader
        that had started must lock the rank again to go on: while the parent holds it, that
        fails (:class:`RankInUseError`, repeated on every later request)."""
        self._pid = os.getpid()
        self._ahead = self._reads = self._acks = None
        if self._next_step is not None and not self._done:
            try:
                self._lock.hold()
            except RankInUseError as e:
                self._failure = e
                raise

    # ------------------------------------------------------------------ internals
    def _start(self, t_request: float) -> None:
        m = self.manifest
        self._lock.hold()
        start = self.start_step
        if start < m.first_step:
            raise ResumeError(
                f"rank {self.rank}: start_step {start} is before first_step {m.first_step} of "
                f"generation {m.generation} ({self.root / protocol.MANIFEST_FILE}): the job does not "
                f"produce steps before {m.first_step}; {resume_fix(start)}"
            )
        self._adopt(m, start, t_request, announce=start > m.first_step)
        self._next_step = start

    def _adopt(self, m: Manifest, next_step: int, t_request: float, *, announce: bool) -> None:
        """Start reading generation ``m`` at ``next_step``; with ``announce``, ack the skip."""
        rank_dir = m.rank_dir(self.root, self.rank)
        consumed = protocol.read_consumed_step(rank_dir / protocol.ACK_FILE)
        if consumed is not None and consumed >= next_step:
            raise ResumeError(
                f"rank {self.rank}: {rank_dir / protocol.ACK_FILE} says step {consumed} was already "
                f"consumed in generation {m.generation}, so the job will not write step "
                f"{next_step} again; {resume_fix(next_step)}"
            )
        if not announce:
            return
        try:
            # the sink creates the generation directory before it publishes the manifest; a
            # missing one was removed by a newer generation, which the manifest check will find
            rank_dir.mkdir(mode=0o700, exist_ok=True)
            self._write_ack(rank_dir, next_step - 1, t_request)
        except FileNotFoundError:
            return
        protocol.unlink_steps_below(rank_dir, next_step)

    def _ack_content(self, step: int, t_request: float) -> dict[str, Any]:
        # data-wait so far, including the part of the current request already spent
        data_wait = self.data_wait_s + (time.monotonic() - t_request)
        return protocol.ack_content(step, data_wait, self.elapsed_s)

    def _flush_acks(self) -> None:
        """Wait for the acks handed to the background thread, so a later one cannot overtake
        them (what writing one raised is raised by :meth:`_raise_ack_error`)."""
        acks = self._acks
        if acks is not None:
            acks.flush()

    def _raise_ack_error(self) -> None:
        """Raise, once, what writing an ack on the background thread raised."""
        acks = self._acks
        error = None if acks is None else acks.take_error()
        if error is not None:
            raise error

    def _write_ack(self, rank_dir: Path, step: int, t_request: float) -> None:
        self._flush_acks()
        protocol.write_json_atomic(rank_dir / protocol.ACK_FILE, self._ack_content(step, t_request))
        self.last_acked_step = step

    def _ack_pending(self, t_request: float, *, background: bool) -> None:
        """:meth:`_hand_over_ack`, then raise, once, what writing an earlier ack on the thread
        raised (this ack is handed over or written all the same)."""
        self._hand_over_ack(t_request, background=background)
        self._raise_ack_error()

    def _hand_over_ack(self, t_request: float, *, background: bool) -> None:
        """Ack the step returned last and unlink its file: with ``background``, on the ack
        thread (the syscalls, milliseconds when unlinking a large file frees its pages, are
        then off the request; an error writing an ack is raised by a later request), else
        right here."""
        if self._pending_ack is not None:
            step, rank_dir = self._pending_ack
            self._pending_ack = None
            task = functools.partial(
                protocol.write_ack_and_unlink, rank_dir, self._ack_content(step, t_request)
            )
            if background:
                if self._acks is None:
                    self._acks = _BackgroundThread(f"stoker-ack-rank-{self.rank}")
                    _ACK_THREADS.add(self._acks)
                self._acks.submit(task)
                written = True
            else:
                self._flush_acks()
                written = task()
            if written:
                self.last_acked_step = step
                self.steps_acked += 1

    def _stat_manifest(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self._manifest_path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _check_generation(self, t_request: float) -> bool:
        """Follow a new generation named by ``manifest.json``; returns whether it switched."""
        now = time.monotonic()
        if now < self._next_manifest_check:
            return False
        self._next_manifest_check = now + self.manifest_poll_interval_s
        self._lock.check()  # before anything is read or acked in a job directory made again
        sig = self._stat_manifest()
        if sig is None or sig == self._manifest_sig:
            return False
        path = self.root / protocol.MANIFEST_FILE
        try:
            m = Manifest.load(path)
        except BatchFormatError:
            if not path.exists():  # removed between stat and read
                return False
            raise
        old = self.manifest
        if m.generation == old.generation:
            self._manifest_sig = sig
            return False  # rewritten by another sink subtask or after a failover
        if (m.world_size, m.micro_batch_size) != (old.world_size, old.micro_batch_size):
            raise BatchFormatError(
                f"{path}: generation {m.generation} has world_size {m.world_size} and "
                f"micro_batch_size {m.micro_batch_size}, but this reader started on generation "
                f"{old.generation} with world_size {old.world_size} and micro_batch_size "
                f"{old.micro_batch_size}; restart the trainer with the new configuration"
            )
        assert self._next_step is not None
        if self._next_step < m.first_step:
            raise ResumeError(
                f"rank {self.rank}: the job was resubmitted (generation {m.generation}) and "
                f"produces steps from first_step {m.first_step}, but this reader needs step "
                f"{self._next_step} next; {resume_fix(self._next_step)}"
            )
        self._adopt(m, self._next_step, t_request, announce=True)
        # only now: a switch that failed half-way (an ack that could not be written, an
        # interrupt) is tried again by the next request instead of being lost
        self._manifest, self._manifest_sig = m, sig
        self.generation_switches += 1
        return True

    def _start_read_ahead(self, step: int) -> None:
        self._drop_read_ahead()
        give_up_s = _READ_AHEAD_GIVE_UP_S if self.timeout_s is None else self.timeout_s
        self._ahead = _ReadAhead(
            self.manifest, self.rank, self.rank_dir, step, self.poll_interval_s, give_up_s
        )
        if self._reads is None:
            self._reads = _BackgroundThread(f"stoker-read-ahead-rank-{self.rank}")
        self._reads.submit(self._ahead.run)

    def _drop_read_ahead(self) -> None:
        if self._ahead is not None:
            self._ahead.cancel()
            self._ahead = None

    def _take_mapped(self, step: int, t_request: float) -> tuple[Batch, Path] | None:
        """``(batch, its rank directory)`` when the read-ahead has already mapped ``step`` of the
        generation being read (after following a new generation, if any), without waiting;
        ``None`` otherwise.

        Raises:
            BatchFormatError: the read-ahead's file did not pass the checks, or the new
                generation's manifest is invalid or changed the batch shape.
            ResumeError: the new generation will not produce ``step``.
        """
        ahead = self._ahead
        if ahead is None or not ahead.finished:
            return None
        self._check_generation(t_request)
        _, batch = self._take_read_ahead(step)
        return None if batch is None else (batch, ahead.rank_dir)

    def _take_read_ahead(self, step: int) -> tuple[bool, Batch | None]:
        """``(True, batch)`` when the read-ahead of ``step`` finished with a batch, ``(True,
        None)`` when there is none to wait for (or it ended without one: read it here),
        ``(False, None)`` when it is still waiting for the file (after up to one poll
        interval)."""
        ahead = self._ahead
        if ahead is None:
            return True, None
        # a Manifest object is replaced only when the reader follows a new generation
        if ahead.manifest is not self._manifest or ahead.step != step:
            self._drop_read_ahead()  # a new generation: its directory is read here
            return True, None
        if not ahead.wait(self.poll_interval_s):
            return False, None
        self._ahead = None
        return True, ahead.result()

    def _wait_and_read(self, step: int, t_request: float) -> Batch:
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        while True:
            if self._check_generation(t_request) and self.timeout_s is not None:
                deadline = time.monotonic() + self.timeout_s
            path = self.rank_dir / protocol.batch_file_name(step)
            settled, ready = self._take_read_ahead(step)
            if ready is not None:
                self.batches_read_ahead += 1
                return ready
            if settled and path.exists():
                try:
                    return read_batch_file(path, **checks_for(self.manifest, self.rank, step))
                except FileNotFoundError:
                    pass  # removed since: its generation was replaced; the check will follow
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {self.timeout_s}s waiting for {path}")
            if settled:
                time.sleep(self.poll_interval_s)

    def _wait_for(self, path: Path) -> None:
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        while not path.exists():
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {self.timeout_s}s waiting for {path}")
            time.sleep(self.poll_interval_s)
