"""Where the embedded job's CPU and threads' time go, from async-profiler's collapsed stacks
(bench/README.md, "Where the embedded job's CPU goes (`profile.sh`)").

    python bench/profile_breakdown.py CPU.collapsed [--interval 5ms] [--wall WALL.collapsed]
    python bench/profile_breakdown.py --raw .stoker/bench-profile [--out bench/results]

Input: collapsed stacks as async-profiler writes them with ``threads`` (``[thread name tid=N];
root frame;...;leaf frame COUNT``, Java frames as ``pkg/Class.method``, native and JVM frames by
symbol, kernel frames ending in ``_[k]``).

CPU profile: each stack goes to one category (:data:`CATEGORIES`). A stack on a JVM thread of its
own (GC workers, JIT compilers, the VM thread and the other service threads) goes by the thread
(:func:`thread_category`); any other by its frames: the matching frame nearest to the leaf among the
specific patterns wins (so the chained operator that is really running counts, not the task loop
below it, and a serializer called from the tokenizer counts as serialization); if no specific
pattern matches, the nearest generic one (``io/netty`` without the SDK above it, Flink's runtime,
the JDK); kernel frames never decide. Output: a table of categories (CPU-seconds = samples x
interval, share of the JVM's profiled CPU, which of it in the kernel), one of threads (grouped by
name with numbers folded, Flink subtasks apart) with each thread's top categories, and the
hottest leaf frames of each category that is not image work.

Wall-clock profile: every thread is sampled at the same rate whatever it does, so a thread's
samples split into running (the leaf is not a blocking call) and waiting, and each wait is named
by the frames that explain it (:data:`WAITS`: the task mailbox with nothing to do, the async
operator's full queue, network buffers, a lock, a thread pool with no work, an event loop, a
safepoint). A thread that is runnable but waiting for a core is sampled where it was preempted,
so it counts as running; the run-queue delay from ``/proc/<pid>/task/<tid>/schedstat``, when the
harness recorded it, tells those apart.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The categories, in the order of the table: (name, essential image work?).
CATEGORIES = [
    ("decode: JPEG (libjpeg-turbo)", True),
    ("decode: PNG/GIF/other (ImageIO, zlib)", True),
    ("decode: to RGB, EXIF orientation", True),
    ("resize (bicubic)", True),
    ("normalize + patchify", True),
    ("tokenize (HF tokenizers, chat template)", False),
    ("parse records (JSON)", False),
    ("source (JSONL read, splits, prefetch gate)", False),
    ("S3 client (AWS SDK, Netty, fetch)", False),
    ("Flink serialization + network stack", False),
    ("Arrow encode + batch file write", False),
    ("Flink checkpoints + state", False),
    ("Flink runtime (task loop, timers, RPC, other)", False),
    ("logging + metrics", False),
    ("Flink REST server (the web UI; the harness's metric polls)", False),
    ("JVM: allocation slow path (new arrays, zeroing)", False),
    ("JVM: GC", False),
    ("JVM: JIT compiler", False),
    ("JVM: other (VM thread, interpreter, class loading, safepoints)", False),
    ("JDK / other Java", False),
    ("unknown frames", False),
]
IMAGE_WORK = {name for name, essential in CATEGORIES if essential}

#: Specific frame patterns (the match nearest to the leaf wins), in order of precedence where two
#: match the same frame.
SPECIFIC: list[tuple[str, str]] = [
    (
        "JVM: allocation slow path (new arrays, zeroing)",
        r"^(OptoRuntime::new_|MemAllocator::|TypeArrayKlass::allocate|ObjArrayKlass::allocate|"
        r"InstanceKlass::allocate_instance|CollectedHeap::array_allocate|"
        r"CollectedHeap::obj_allocate|Unsafe_AllocateMemory|JVM_NewArray)",
    ),
    (
        "JVM: GC",
        r"^(PSScavenge::|PSParallelCompact::|ParallelScavengeHeap::|VM_ParallelGC|"
        r"VM_CollectForAllocation|G1CollectedHeap::|VM_G1)",
    ),
    (
        "decode: JPEG (libjpeg-turbo)",
        r"(org/libjpegturbo/|dev/stoker/operators/image/TurboJpeg|^tj[A-Z]|^_?jpeg_|^jsimd_|"
        r"^jinit_|^decode_mcu|^decompress_(onepass|data|smooth)|^ycc_|^rgb_|^h[12]v[12]_|"
        r"^process_data_|^sep_upsample|^jpeg_idct|^[a-z_]*idct[a-z_0-9]*$|^fill_bit_buffer|"
        r"^jpeg_fill|^consume_data|^decode_mcu_fast|^jcopy_|^start_pass|"
        r"com/sun/imageio/plugins/jpeg/|libjpeg|libturbojpeg)",
    ),
    (
        "decode: PNG/GIF/other (ImageIO, zlib)",
        r"(com/sun/imageio/|javax/imageio/|"
        r"dev/stoker/operators/image/(PngIntegrity|LibWebpDecoder|IconDirectory|ImageReaders|"
        r"ImageFormat|RejectedFormats)|sun/awt/image/|java/awt/image/|^WebP|libwebp)",
    ),
    (
        "decode: to RGB, EXIF orientation",
        r"dev/stoker/operators/image/(RgbConverter|ExifOrientation|RgbImage|ImageDecoder)",
    ),
    ("resize (bicubic)", r"dev/stoker/operators/image/(BicubicResampler|SmartResize)"),
    (
        "normalize + patchify",
        r"(dev/stoker/operators/image/Patchifier|dev/stoker/connectors/shm/VideoPatchifier|"
        r"dev/stoker/connectors/shm/ArrowBatchEncoder\.put(Video)?Pixels)",
    ),
    (
        "tokenize (HF tokenizers, chat template)",
        r"(ai/djl/|dev/stoker/operators/tokenize/|tokenizers::|^_?ZN\d*tokenizers|onig|"
        r"libtokenizers|regex_automata|regex::|aho_corasick|^_?ZN\d*regex)",
    ),
    (
        "parse records (JSON)",
        r"(com/fasterxml/jackson/|dev/stoker/operators/(parse|json)/)",
    ),
    (
        "source (JSONL read, splits, prefetch gate)",
        r"(dev/stoker/connectors/source/|org/apache/flink/connector/base/source/|"
        r"org/apache/flink/streaming/api/operators/SourceOperator|dev/stoker/connectors/feedback/|"
        r"dev/stoker/connectors/protocol/Ack)",
    ),
    (
        "S3 client (AWS SDK, Netty, fetch)",
        r"(software/amazon/awssdk/|dev/stoker/connectors/fetch/|org/reactivestreams/|"
        r"sun/security/ssl/|com/sun/crypto/|javax/crypto/|"
        r"org/apache/flink/streaming/api/operators/async/)",
    ),
    (
        "Flink serialization + network stack",
        r"(org/apache/flink/runtime/io/network/|org/apache/flink/streaming/runtime/io/|"
        r"org/apache/flink/core/memory/|org/apache/flink/api/common/typeutils/|"
        r"org/apache/flink/api/java/typeutils/runtime/|org/apache/flink/runtime/plugable/|"
        r"org/apache/flink/streaming/runtime/streamrecord/StreamElementSerializer|"
        r"org/apache/flink/shaded/netty4/|dev/stoker/operators/model/TokenizedSampleSerializer|"
        r"org/apache/flink/types/StringValue|org/apache/flink/streaming/runtime/tasks/"
        r"(RecordWriterOutput|BroadcastingOutputCollector)|org/apache/flink/runtime/io/disk/)",
    ),
    (
        "Arrow encode + batch file write",
        r"(org/apache/arrow/|dev/stoker/connectors/shm/|dev/stoker/connectors/protocol/)",
    ),
    (
        "Flink checkpoints + state",
        r"(org/apache/flink/runtime/checkpoint/|org/apache/flink/runtime/state/|"
        r"org/apache/flink/state/|org/apache/flink/contrib/streaming/state/|org/rocksdb/|"
        r"rocksdb::|org/apache/flink/streaming/runtime/tasks/SubtaskCheckpointCoordinator|"
        r"org/apache/flink/streaming/api/operators/StreamOperatorStateHandler)",
    ),
    (
        "logging + metrics",
        r"(org/apache/logging/|org/slf4j/|org/apache/flink/runtime/metrics/|"
        r"org/apache/flink/metrics/|dev/stoker/operators/metrics/)",
    ),
]
#: Generic patterns, used only when no specific one matches: the first pattern (in this order) that
#: some frame matches, so a Netty or Flink frame anywhere wins over the JDK code it calls.
GENERIC: list[tuple[str, str]] = [
    ("S3 client (AWS SDK, Netty, fetch)", r"^io/netty/"),
    (
        "Flink runtime (task loop, timers, RPC, other)",
        r"(org/apache/flink/|org/apache/pekko/|scala/|akka/)",
    ),
    (
        "JVM: other (VM thread, interpreter, class loading, safepoints)",
        r"(::|^Interpreter$|^JVM_|^jni_|^JNI_|^Java_java_lang|^call_stub|^SafepointSynchronize)",
    ),
    ("JDK / other Java", r"^(java|javax|jdk|sun|com/sun)/"),
    ("JDK / other Java", r"/"),
]
_SPECIFIC = [(name, re.compile(p)) for name, p in SPECIFIC]
_GENERIC = [(name, re.compile(p)) for name, p in GENERIC]
_KERNEL = re.compile(r"_\[k\]$")
_ANNOTATION = re.compile(r"_\[[a-z0-9]\]$")

#: Threads whose whole time is one category.
THREAD_CATEGORIES: list[tuple[str, str]] = [
    (
        "Flink REST server (the web UI; the harness's metric polls)",
        r"^(flink-rest-server|"
        r"Flink-DispatcherRestEndpoint)",
    ),
    ("JVM: GC", r"^(GC Thread|ParGC|PSYoung|G1 |GC task)"),
    ("JVM: JIT compiler", r"^C[12] Compiler ?Thre"),
    (
        "JVM: other (VM thread, interpreter, class loading, safepoints)",
        r"^(VM Thread|VM Periodic|Service Thread|Sweeper|Monitor Deflati|Signal Dispatch|"
        r"Attach Listener|Notification Thr|Reference Handl|Finalizer|Common-Cleaner|"
        r"Async-profiler|JFR )",
    ),
]
_THREAD_CATEGORIES = [(name, re.compile(p)) for name, p in THREAD_CATEGORIES]

#: Wall-clock profile: a sample is waiting when its leaf (kernel frames dropped) is one of these.
BLOCKING_LEAF = re.compile(
    r"(futex|pthread_cond_(timed)?wait|epoll_wait|epoll_pwait|^__?poll|^poll$|^ppoll|select$|"
    r"nanosleep|^accept|^__libc_recv|^recv|^read$|^__libc_read|^__read|sem_wait|sigwait|"
    r"sigsuspend|^waitpid|^wait4|Unsafe\.park|Object\.wait|Thread\.sleep|LockSupport\.park|"
    r"PlatformEvent::park|PlatformMonitor::wait|PlatformParker|Parker::park|Monitor::wait|"
    r"ObjectMonitor::(wait|enter|EnterI)|JVM_Sleep|JVM_MonitorWait|Net\.poll|EPoll\.wait|"
    r"SocketDispatcher\.read|^__GI___poll|^__GI_epoll)"
)
#: What a waiting sample waits for: the first of :data:`VM_WAITS`, then of :data:`JAVA_WAITS`, that
#: any of its frames matches (the patterns in order of precedence: those that only a wait of that
#: kind has come before those of a thread's loop, which every sample of the thread has).
VM_WAITS: list[tuple[str, str]] = [
    (
        "GC (an allocation waits for the collection)",
        r"^(VMThread::execute|VMThread::wait_until_executed|ParallelScavengeHeap::mem_allocate)",
    ),
    (
        "safepoint (GC or another VM operation)",
        r"^(SafepointSynchronize::block|SafepointMechanism::|ThreadBlockInVM|HandshakeState::)",
    ),
    ("lock or monitor contention", r"^ObjectMonitor::(enter|EnterI)"),
]
JAVA_WAITS: list[tuple[str, str]] = [
    (
        "network buffer (output full: hard back-pressure)",
        r"(LocalBufferPool\.(request|toBufferBuilder)|requestMemorySegmentBlocking|"
        r"requestBufferBuilderBlocking)",
    ),
    ("task mailbox", r"TaskMailboxImpl\.take"),
    ("source fetcher: hand-over queue full", r"FutureCompletingBlockingQueue\.(put|waitOnPut)"),
    (
        "lock or monitor contention",
        r"(ReentrantLock(\$\w+)?\.lock|ReentrantReadWriteLock\$\w+\.lock)",
    ),
    (
        "waiting on a future or latch",
        r"(CompletableFuture\.(get|join|waitingGet|timedGet)|FutureTask\.(get|awaitDone)|"
        r"CountDownLatch\.await)",
    ),
    ("sleep", r"java/lang/Thread\.sleep"),
    ("socket read (blocking)", r"(SocketInputStream|NioSocketImpl\.read|SocketDispatcher\.read)"),
    (
        "thread pool / timer with no work",
        r"(ThreadPoolExecutor\.getTask|ScheduledThreadPoolExecutor|DelayedWorkQueue|"
        r"ForkJoinPool\.(awaitWork|scan|runWorker)|LinkedBlockingQueue\.(take|poll)|"
        r"SynchronousQueue|LinkedBlockingDeque\.(take|poll)|ArrayBlockingQueue\.(take|poll))",
    ),
    (
        "event loop waiting for I/O (Netty, NIO)",
        r"(NioEventLoop|EpollEventLoop|SelectorImpl|EPoll|SingleThreadEventExecutor)",
    ),
    ("source fetcher: no split to read", r"SplitFetcher\.|SplitFetcherManager"),
]
#: The task mailbox's wait, told apart by the frames below it.
MAILBOX_IDLE = "task mailbox: no input, or output not available (idle / soft back-pressure)"
ASYNC_FULL = "async fetch queue full (capacity): yield in processElement"
MAILBOX_YIELD = "mailbox yield in an operator"
_VM_WAITS = [(name, re.compile(p)) for name, p in VM_WAITS]
_JAVA_WAITS = [(name, re.compile(p)) for name, p in JAVA_WAITS]
_WAIT_PLUMBING = re.compile(
    r"^(java/lang/Object\.wait|java/lang/Thread\.sleep|jdk/internal/misc/Unsafe|"
    r"java/util/concurrent/locks/)"
)
RUNNING = "running (or runnable, waiting for a core)"

_TID = re.compile(r"^\[(.*) tid=(\d+)\]$")
_FLINK_TASK = re.compile(r"^(.*) \((\d+)/(\d+)\)(#\d+)?$")


@dataclass
class Stack:
    """One line of a collapsed file: the thread's name and id, the frames root first, the count."""

    thread: str
    tid: int
    frames: list[str]
    count: int


def read_collapsed(path: Path) -> list[Stack]:
    """The stacks of an async-profiler collapsed file written with ``threads``."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if not line:
            continue
        text, _, count = line.rpartition(" ")
        frames = text.split(";")
        m = _TID.match(frames[0])
        if m:
            thread, tid, frames = m.group(1), int(m.group(2)), frames[1:]
        else:
            thread, tid = "[no thread]", -1
        out.append(Stack(thread, tid, frames, int(count)))
    return out


def seconds(text: str) -> float:
    """``5ms``, ``50us``, ``1s``, ``200000`` (ns) as seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ns|us|ms|s)?", text.strip())
    if not m:
        raise ValueError(f"not an interval: {text!r}")
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, None: 1e-9}[m.group(2)]
    return float(m.group(1)) * scale


def short_chain(text: str) -> str:
    """A Flink operator chain's name shortened to its first operator and the last one of its main
    branch (``Source: jsonl-source -> ... -> sample-accounting``); short names stay."""
    if len(text) <= 60 or " -> " not in text:
        return text
    main = text.split(",")[0]
    ops = [o.strip(" ()") for o in main.split(" -> ")]
    return f"{ops[0]} -> ... -> {ops[-1]}"


def thread_group(name: str) -> str:
    """A thread's row in the tables: a Flink task thread keeps its subtask (``(1/2)``, attempt
    dropped), a long operator chain in it is shortened (:func:`short_chain`); any other name has
    its numbers folded (``GC Thread#N``, ``aws-java-sdk-NettyEventLoop-N-N``) but the JIT's
    ``C1``/``C2``."""
    m = _FLINK_TASK.match(name)
    if m:
        head, chain = "", m.group(1)
        for prefix in (
            "OutputFlusher for ",
            "Source Data Fetcher for ",
            "System Time Trigger for ",
            "Time Trigger for ",
        ):
            if chain.startswith(prefix):
                head, chain = prefix, chain.removeprefix(prefix)
        return f"{head}{short_chain(chain)} ({m.group(2)}/{m.group(3)})"
    if re.match(r"^C[12] Compiler", name):
        return name[:2] + " " + re.sub(r"\d+", "N", name[3:])
    return re.sub(r"\d+", "N", name)


def thread_category(thread: str) -> str | None:
    """The category of every stack of a JVM-internal thread, else None."""
    for name, pattern in _THREAD_CATEGORIES:
        if pattern.search(thread):
            return name
    return None


def _strip(frame: str) -> str:
    return _ANNOTATION.sub("", frame)


def _decide(frames: list[str]) -> tuple[str, str | None]:
    user = [_strip(f) for f in reversed(frames) if not _KERNEL.search(f)]  # leaf first
    for f in user:
        for name, pattern in _SPECIFIC:
            if pattern.search(f):
                return name, f
    for name, pattern in _GENERIC:
        for f in user:
            if pattern.search(f):
                return name, f
    return "unknown frames", None


def frame_category(frames: list[str]) -> str:
    """The category of a stack by its frames (root first): the specific match nearest the leaf,
    else the first generic pattern that a frame matches; kernel frames never decide."""
    return _decide(frames)[0]


def decide(stack: Stack) -> tuple[str, str]:
    """The category of one stack (:func:`thread_category`, else :func:`frame_category`; a VM
    thread's stack doing GC work counts as GC) and the frame that decided it (the leaf where the
    thread did)."""
    by_thread = thread_category(stack.thread)
    if by_thread is not None and not by_thread.startswith("JVM: other"):
        return by_thread, leaf(stack)
    by_frames, frame = _decide(stack.frames)
    if by_thread is not None and by_frames != "JVM: GC":
        return by_thread, leaf(stack)
    return by_frames, frame or leaf(stack)


def categorize(stack: Stack) -> str:
    """The category of one stack (:func:`decide`)."""
    return decide(stack)[0]


def leaf(stack: Stack) -> str:
    """The stack's leaf frame, kernel frames dropped (``[kernel]`` if nothing else)."""
    for frame in reversed(stack.frames):
        if not _KERNEL.search(frame):
            return _strip(frame)
    return "[kernel]"


def in_kernel(stack: Stack) -> bool:
    return bool(stack.frames) and bool(_KERNEL.search(stack.frames[-1]))


def wait_reason(stack: Stack) -> str:
    """:data:`RUNNING` if the sample's leaf is not a blocking call, else what it waits for
    (:data:`VM_WAITS`, then :data:`JAVA_WAITS`, the mailbox told apart by
    :data:`MAILBOX_IDLE`, :data:`ASYNC_FULL`, :data:`MAILBOX_YIELD`; else ``other wait: <the
    nearest Java frame that is not wait plumbing>``, or ``JVM / native thread idle``)."""
    frames = [_strip(f) for f in stack.frames if not _KERNEL.search(f)]
    if not frames or not BLOCKING_LEAF.search(frames[-1]):
        return RUNNING
    for name, pattern in _VM_WAITS:
        if any(pattern.search(f) for f in frames):
            return name
    java = [f for f in reversed(frames) if "/" in f]
    for name, pattern in _JAVA_WAITS:
        if any(pattern.search(f) for f in java):
            if name != "task mailbox":
                return name
            if any("MailboxExecutorImpl.yield" in g for g in java):
                return ASYNC_FULL if any("AsyncWaitOperator" in g for g in java) else MAILBOX_YIELD
            return MAILBOX_IDLE
    caller = next((f for f in java if not _WAIT_PLUMBING.search(f)), None)
    return f"other wait: {caller}" if caller else "JVM / native thread idle"


@dataclass
class CpuBreakdown:
    """The CPU profile's samples by category, by thread group and by (category, leaf)."""

    interval_s: float
    samples: int = 0
    by_category: Counter = field(default_factory=Counter)
    kernel_by_category: Counter = field(default_factory=Counter)
    by_thread: Counter = field(default_factory=Counter)
    thread_categories: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    tids: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    #: per category, the frames that decided it (:func:`decide`)
    frames: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))

    @classmethod
    def of(cls, stacks: list[Stack], interval_s: float) -> CpuBreakdown:
        b = cls(interval_s)
        for s in stacks:
            cat, frame = decide(s)
            group = thread_group(s.thread)
            b.samples += s.count
            b.by_category[cat] += s.count
            b.kernel_by_category[cat] += s.count if in_kernel(s) else 0
            b.by_thread[group] += s.count
            b.thread_categories[group][cat] += s.count
            b.tids[group].add(s.tid)
            b.frames[cat][frame] += s.count
        return b

    def cpu_s(self, samples: int) -> float:
        return samples * self.interval_s

    def image_share(self) -> float:
        return sum(self.by_category[c] for c in IMAGE_WORK) / max(self.samples, 1)


@dataclass
class WallBreakdown:
    """The wall-clock profile's samples by thread group and wait reason."""

    samples: int = 0
    by_thread: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    tids: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    running_categories: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))

    @classmethod
    def of(cls, stacks: list[Stack]) -> WallBreakdown:
        b = cls()
        for s in stacks:
            group = thread_group(s.thread)
            reason = wait_reason(s)
            b.samples += s.count
            b.by_thread[group][reason] += s.count
            b.tids[group].add(s.tid)
            if reason == RUNNING:
                b.running_categories[group][categorize(s)] += s.count
        return b

    def waiting_share(self, group: str) -> float:
        c = self.by_thread[group]
        return 1 - c[RUNNING] / max(sum(c.values()), 1)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _top(counter: Counter, n: int, total: int | None = None, skip: str | None = None) -> str:
    """The ``n`` largest entries as ``name share; ...``, names over 120 characters (Rust's
    generic symbols) cut."""
    total = total or max(sum(counter.values()), 1)
    items = [(k, v) for k, v in counter.most_common() if k != skip][:n]
    return "; ".join(f"{_cut(k)} {_pct(v / total)}" for k, v in items)


def _cut(name: str, width: int = 120) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def _sched(
    phase: dict[str, Any] | None, tids: set[int]
) -> tuple[float, float, float, float] | None:
    """(CPU s, seconds on a CPU, run-queue seconds, system CPU s) of threads ``tids`` over
    ``phase`` from the harness's /proc snapshots (a thread started meanwhile from 0); None
    without them."""
    if not phase or "threads" not in phase.get("start", {}):
        return None
    a, b = phase["start"]["threads"], phase["end"]["threads"]
    out = [0.0, 0.0, 0.0, 0.0]
    for tid in tids:
        t = str(tid)
        if t in b:
            x = a.get(t, [b[t][0], 0.0, 0.0, 0.0, 0.0])
            for i in range(len(b[t]) - 1):
                out[i] += b[t][i + 1] - x[i + 1]
    return out[0], out[1], out[2], out[3]


def cpu_tables(
    b: CpuBreakdown, phase: dict[str, Any] | None = None, top_threads: int = 25
) -> list[str]:
    """Markdown: the categories, the threads, and for the largest categories that are not image
    work the frames that decided their samples."""
    window = phase["end"]["unix"] - phase["start"]["unix"] if phase else None
    total = max(b.samples, 1)
    kernel = sum(b.kernel_by_category.values()) > 0  # kernel stacks: perf events only

    def row(label: str, n: int, k: int | None) -> str:
        cells = [label, f"{b.cpu_s(n):.1f}", _pct(n / total)]
        cells += [_pct(k / max(n, 1)) if k is not None else ""] if kernel else []
        cells += [f"{b.cpu_s(n) / window:.2f}"] if window else []
        return "| " + " | ".join(cells) + " |"

    head = ["category", "CPU-s", "share"] + (["of it in the kernel"] if kernel else [])
    head += ["cores"] if window else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    image = 0
    for name, essential in CATEGORIES:
        n = b.by_category.get(name, 0)
        if not n:
            continue
        image += n if essential else 0
        label = f"{name} (image work)" if essential else name
        lines.append(row(label, n, b.kernel_by_category[name]))
    lines.append(row("**all**", b.samples, sum(b.kernel_by_category.values())))
    lines.append(row("of it essential image work", image, None))
    lines += [
        "",
        "| thread | threads | CPU-s (profile) | share | CPU-s (/proc) | of it system (/proc) "
        "| run-queue wait, s | top categories |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rest = 0
    for k, (group, n) in enumerate(b.by_thread.most_common()):
        if k >= top_threads:
            rest += n
            continue
        sched = _sched(phase, b.tids[group])
        proc = f"{sched[0]:.1f}" if sched else ""
        system = f"{sched[3]:.1f}" if sched else ""
        rq = f"{sched[2]:.1f}" if sched else ""
        lines.append(
            f"| {group} | {len(b.tids[group])} | {b.cpu_s(n):.1f} | {_pct(n / total)} | {proc} | "
            f"{system} | {rq} | {_top(b.thread_categories[group], 3)} |"
        )
    if rest:
        lines.append(f"| (other threads) | | {b.cpu_s(rest):.1f} | {_pct(rest / total)} | | | | |")
    lines += [
        "",
        "The largest categories that are not image work, by the frame that put each sample there "
        "(the matching frame nearest the leaf; the leaf for the JVM's own threads), share of all "
        "samples:",
        "",
    ]
    others = [(c, n) for c, n in b.by_category.most_common() if c not in IMAGE_WORK][:6]
    for cat, n in others:
        lines.append(f"* **{cat}** ({_pct(n / total)}): {_top(b.frames[cat], 6, total)}")
    return lines


def wall_tables(
    w: WallBreakdown, phase: dict[str, Any] | None = None, min_share: float = 0.0, top: int = 30
) -> list[str]:
    """Markdown: per thread group, the share of its samples running and waiting, what it waits
    for, and (from the harness's schedstat snapshots) the share of the window on a CPU and in the
    run queue."""
    window = phase["end"]["unix"] - phase["start"]["unix"] if phase else None
    lines = [
        "| thread | threads | samples | running | waiting | waits (share of the thread's samples) "
        "| on a CPU (schedstat) | runnable, waiting for a core (schedstat) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    groups = sorted(w.by_thread, key=lambda g: -w.by_thread[g][RUNNING])[:top]
    for g in groups:
        c = w.by_thread[g]
        n = sum(c.values())
        if c[RUNNING] / max(w.samples, 1) < min_share:
            continue
        sched = _sched(phase, w.tids[g])
        per = len(w.tids[g]) * window if window else None
        on = _pct(sched[1] / per) if sched and per else ""
        rq = _pct(sched[2] / per) if sched and per else ""
        lines.append(
            f"| {g} | {len(w.tids[g])} | {n} | {_pct(c[RUNNING] / n)} | "
            f"{_pct(1 - c[RUNNING] / n)} | {_top(c, 4, n, skip=RUNNING)} | {on} | {rq} |"
        )
    return lines


def flink_table(polls: list[dict[str, Any]], phase: str) -> list[str]:
    """Markdown: per job vertex, Flink's busy / idle / back-pressured ms per second (mean over the
    phase's polls of the subtasks' average) and the job's gauges (mean of the sum over subtasks)."""
    polls = [p for p in polls if p["phase"] == phase]
    if not polls:
        return ["(no Flink metrics were polled)"]
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    parallelism: dict[str, int] = {}
    for p in polls:
        for vertex, v in p["vertices"].items():
            parallelism[vertex] = v["parallelism"]
            for metric, agg in v["metrics"].items():
                key = "avg" if metric.endswith(("TimeMsPerSecond", "PoolUsage")) else "sum"
                if agg.get(key) is not None:
                    values[vertex][metric].append(float(agg[key]))
    lines = [
        f"Flink's task metrics over the phase ({len(polls)} polls; busy / idle / back-pressured: "
        "ms per second, mean of the subtasks; pool usage: mean of the subtasks; the job's gauges: "
        "sum over the subtasks):",
        "",
        "| vertex | parallelism | busy | idle | back-pressured | other metrics |",
        "|---|---|---|---|---|---|",
    ]
    for vertex in values:
        m = {k: sum(v) / len(v) for k, v in values[vertex].items()}
        other = "; ".join(
            f"{k.split('.')[-1] if k.startswith('Shuffle') else k}: {v:.2f}"
            for k, v in sorted(m.items())
            if not k.endswith("TimeMsPerSecond")
            and (k == "numRecordsInPerSecond" or not k.endswith("numRecordsInPerSecond"))
        )
        name = short_chain(vertex)
        lines.append(
            f"| {name} | {parallelism[vertex]} | {m.get('busyTimeMsPerSecond', float('nan')):.0f} "
            f"| {m.get('idleTimeMsPerSecond', float('nan')):.0f} "
            f"| {m.get('backPressuredTimeMsPerSecond', float('nan')):.0f} | {other} |"
        )
    return lines


def machine_lines(phase: dict[str, Any], cores: int) -> list[str]:
    """Markdown: the phase's window, its rate, and who used the cores (the JVM, the S3 server, the
    trainer's process, everything else on the machine)."""
    a, b = phase["start"], phase["end"]
    dt = b["unix"] - a["unix"]
    busy = (b["machine"]["busy"] - a["machine"]["busy"]) / dt
    jvm = (b["jvm_cpu_s"] - a["jvm_cpu_s"]) / dt
    others = phase.get("others_cpu_s", {})
    s3 = others.get("s3", float("nan")) / dt
    trainer = others.get("trainer", float("nan")) / dt
    rest = busy - jvm - (s3 if s3 == s3 else 0) - (trainer if trainer == trainer else 0)
    return [
        f"Window: {dt:.1f} s, samples {a['samples']} to {b['samples']} of the pass "
        f"({(b['samples'] - a['samples']) / dt:.2f} samples/s); load average "
        f"{a['loadavg'][0]:.2f} at the start, {b['loadavg'][0]:.2f} at the end. Cores in use "
        f"(CPU-s per s, of {cores}): the machine {busy:.2f}; the job's JVM {jvm:.2f}; the local "
        f"S3 server {s3:.2f}; the trainer's process {trainer:.2f}; everything else (other "
        f"people's work) {rest:.2f}; idle {max(cores - busy, 0):.2f}.",
    ]


def trace_lines(
    stacks: list[Stack], phase: dict[str, Any] | None, meta: dict[str, Any] | None
) -> list[str]:
    """Markdown: the calls of the traced method in its window, per step, and their callers (the
    stacks whose leaf is the method; any other stack the profiler recorded is counted apart)."""
    method = meta["trace"] if meta else None
    frame = None
    if method:
        cls, _, name = method.rpartition(".")
        frame = cls.replace(".", "/") + "." + name
    ours = [s for s in stacks if frame is None or (s.frames and s.frames[-1] == frame)]
    others = sum(s.count for s in stacks) - sum(s.count for s in ours)
    calls = sum(s.count for s in ours)
    title = f"`{method}`" if method else "the traced method"
    lines = [f"## Calls of {title} (async-profiler method instrumentation, every call)", ""]
    if phase:
        a, b = phase["start"], phase["end"]
        n = b["samples"] - a["samples"]
        steps = n / meta["batch_size"] if meta else None
        per = f", {calls / steps:.2f} per step of {meta['batch_size']}" if steps else ""
        lines += [
            f"{calls} calls while samples {a['samples']} to {b['samples']} were consumed "
            f"({n} samples{per}; {b['unix'] - a['unix']:.1f} s)"
            + (f"; {others} other samples left out." if others else "."),
            "",
        ]
    callers: Counter = Counter()
    threads: dict[str, Counter] = defaultdict(Counter)
    for s in ours:
        java = [f for f in s.frames if "/" in f or "." in f]
        key = " <- ".join(reversed(java[-4:]))
        callers[key] += s.count
        threads[key][thread_group(s.thread)] += s.count
    lines += [f"* {n} x {c} ({_top(threads[c], 2)})" for c, n in callers.most_common(5)]
    return lines


@dataclass
class Report:
    """Both profiles of one run with the harness's records (``phases`` and ``flink_metrics`` from
    ``profile-run.json``)."""

    cpu: CpuBreakdown
    wall: WallBreakdown | None
    phases: dict[str, Any]
    flink_metrics: list[dict[str, Any]]
    cores: int
    trace: list[Stack] | None = None

    @classmethod
    def of(
        cls,
        cpu: list[Stack],
        cpu_interval_s: float,
        wall: list[Stack] | None = None,
        phases: dict[str, Any] | None = None,
        flink_metrics: list[dict[str, Any]] | None = None,
        cores: int = 0,
        trace: list[Stack] | None = None,
    ) -> Report:
        return cls(
            CpuBreakdown.of(cpu, cpu_interval_s),
            WallBreakdown.of(wall) if wall is not None else None,
            phases or {},
            flink_metrics or [],
            cores,
            trace,
        )

    def markdown(self, meta: dict[str, Any] | None = None) -> str:
        lines: list[str] = []
        cpu_phase = self.phases.get("cpu")
        wall_phase = self.phases.get("wall")
        if meta:
            run = meta["run"]
            lines += [
                "# Where the embedded job's CPU goes: async-profiler",
                "",
                f"Measured {meta['date']} on {meta['host']} (`bench/profile.sh`, "
                "bench/README.md). Command:",
                "",
                "```bash",
                meta["command"],
                "```",
                "",
                "stoker-embedded as in `loaders.sh` pass 1"
                + (
                    " but the JSONL read from local disk (`--jsonl-local`)"
                    if meta.get("jsonl_local")
                    else ""
                )
                + f": {meta['samples']} samples, B = "
                f"{meta['batch_size']}, {meta['cores']} cores, GET latency {meta['latency_ms']} "
                f"+- {meta['jitter_ms']} ms, a trainer that does not sleep. The run: "
                f"{run['samples_per_s']:.2f} samples/s from the CPU profile's start to the last "
                f"batch, {run['samples_per_s_from_first_batch']:.2f} from the first batch, time to "
                f"first batch {run['time_to_first_batch_s']:.1f} s, CPU utilization "
                f"{100 * run['cpu_utilization']:.0f}% of the cores (the contender's process "
                "tree, psutil).",
                "",
                f"**Load caveat**: load average {meta['loadavg_before'][0]:.2f} before the run and "
                f"{meta['loadavg_after'][0]:.2f} after (1-minute). Where other people's work ran "
                "on the same cores, absolute rates are not meaningful; the shares are. Raw files "
                f"(collapsed stacks, flame graphs `cpu.html`, `wall.html`, `profile-run.json`, the "
                f"job's logs): `{meta['raw_dir']}/` (not committed).",
                "",
            ]
        lines += [
            f"## CPU profile (async-profiler `event={meta['cpu_event'] if meta else 'cpu'}`, "
            f"{self.cpu.interval_s * 1000:g} ms of CPU per sample, {self.cpu.samples} samples)",
            "",
        ]
        if cpu_phase and self.cores:
            lines += machine_lines(cpu_phase, self.cores)
            jvm = cpu_phase["end"]["jvm_cpu_s"] - cpu_phase["start"]["jvm_cpu_s"]
            lines += [
                "",
                f"The profile holds {self.cpu.cpu_s(self.cpu.samples):.1f} CPU-s of the JVM's "
                f"{jvm:.1f} CPU-s in the window (/proc).",
                "",
            ]
        lines += cpu_tables(self.cpu, cpu_phase)
        if self.wall is not None:
            lines += [
                "",
                f"## Wall-clock profile (async-profiler `event=wall`, {self.wall.samples} samples)",
                "",
            ]
            if wall_phase and self.cores:
                lines += machine_lines(wall_phase, self.cores) + [""]
            lines += [
                "Each thread is sampled at the same rate whatever it does; running = the sample's "
                "leaf is not a blocking call (a thread preempted while runnable counts as "
                "running: the schedstat columns split the window into time on a CPU and time "
                "runnable in the run queue, per thread of the group). Threads ordered by running "
                "samples; only the 30 busiest.",
                "",
            ]
            lines += wall_tables(self.wall, wall_phase)
            if self.flink_metrics:
                lines += ["", *flink_table(self.flink_metrics, "wall")]
        if self.trace is not None:
            lines += ["", *trace_lines(self.trace, self.phases.get("trace"), meta)]
        return "\n".join(lines) + "\n"

    def data(self) -> dict[str, Any]:
        """The tables as JSON-able values (CPU-seconds and sample counts)."""
        out: dict[str, Any] = {
            "cpu": {
                "interval_s": self.cpu.interval_s,
                "samples": self.cpu.samples,
                "by_category": dict(self.cpu.by_category),
                "kernel_by_category": dict(self.cpu.kernel_by_category),
                "by_thread": {
                    g: {
                        "samples": n,
                        "threads": len(self.cpu.tids[g]),
                        "categories": dict(self.cpu.thread_categories[g]),
                    }
                    for g, n in self.cpu.by_thread.items()
                },
                "image_work_share": self.cpu.image_share(),
            }
        }
        if self.wall is not None:
            out["wall"] = {
                "samples": self.wall.samples,
                "by_thread": {g: dict(c) for g, c in self.wall.by_thread.items()},
            }
        out["phases"] = {
            k: {kk: vv for kk, vv in v.items() if kk not in ("start", "end")}
            | {
                "window_s": v["end"]["unix"] - v["start"]["unix"],
                "samples": [v["start"]["samples"], v["end"]["samples"]],
                "jvm_cpu_s": v["end"]["jvm_cpu_s"] - v["start"]["jvm_cpu_s"],
                "loadavg": [v["start"]["loadavg"], v["end"]["loadavg"]],
            }
            for k, v in self.phases.items()
        }
        return out


def from_raw(raw: Path) -> tuple[Report, dict[str, Any]]:
    """The report of a ``bench/profile.sh`` run from its raw directory (``report-input.json``, which
    the harness writes beside the collapsed files) and the run's metadata."""
    inp = json.loads((raw / "report-input.json").read_text())
    phases = inp["phases"]

    def stacks(name: str) -> list[Stack] | None:
        return read_collapsed(raw / f"{name}.collapsed") if name in phases else None

    report = Report.of(
        cpu=stacks("cpu") or [],
        cpu_interval_s=seconds(inp["meta"]["cpu_interval"]),
        wall=stacks("wall"),
        phases=phases,
        flink_metrics=inp["flink_metrics"],
        cores=inp["meta"]["cores"],
        trace=stacks("trace"),
    )
    return report, inp["meta"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cpu", type=Path, nargs="?", help="collapsed stacks of a CPU profile (threads)")
    p.add_argument("--interval", default="10ms", help="CPU time per sample (10ms)")
    p.add_argument("--wall", type=Path, help="collapsed stacks of a wall-clock profile")
    p.add_argument(
        "--raw",
        type=Path,
        help="a bench/profile.sh raw directory (.stoker/bench-profile): the whole report again, "
        "with this script's categories",
    )
    p.add_argument("--out", type=Path, help="with --raw: write profile.md and profile.json here")
    args = p.parse_args()
    if args.raw:
        report, meta = from_raw(args.raw)
        md = report.markdown(meta)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "profile.md").write_text(md)
            (args.out / "profile.json").write_text(
                json.dumps({"meta": meta, **report.data()}, indent=1)
            )
        print(md)
        return 0
    if args.cpu is None:
        p.error("give a CPU profile or --raw")
    report = Report.of(
        read_collapsed(args.cpu),
        seconds(args.interval),
        read_collapsed(args.wall) if args.wall else None,
    )
    print(report.markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
