"""bench/profile_breakdown.py and bench/loaders/profiling.py: the attribution of async-profiler's
collapsed stacks to categories, threads and waits, and the profile phases (no JVM needed)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
from harness.paths import REPO_ROOT


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


pb = _load("bench_profile_breakdown", REPO_ROOT / "bench" / "profile_breakdown.py")
profiling = _load("bench_loaders_profiling", REPO_ROOT / "bench" / "loaders" / "profiling.py")

CHAIN = (
    "Source: jsonl-source -> (records -> parse -> fetch-images -> preprocess-images -> tokenize "
    "-> sample-accounting, padding-markers -> padding-slots)"
)
TASK = f"[{CHAIN} (1/2)#0 tid=10]"
TASK2 = f"[{CHAIN} (2/2)#0 tid=11]"
LOOP = (
    "java/lang/Thread.run;org/apache/flink/runtime/taskmanager/Task.run;"
    "org/apache/flink/streaming/runtime/tasks/mailbox/MailboxProcessor.runMailboxLoop"
)
PRE = f"{LOOP};dev/stoker/operators/media/PreprocessMediaFunction.processElement;"
PRE += "dev/stoker/operators/image/QwenImageProcessor.process"
SINK = "[arrow-shm-sink: Writer (1/1)#0 tid=12]"

#: stack -> (count, category it must land in)
CPU = [
    (
        f"{TASK};{PRE};dev/stoker/operators/image/TurboJpegDecoder.decode;"
        "org/libjpegturbo/turbojpeg/TJDecompressor.decompress;tjDecompress2;decode_mcu",
        30,
        "decode: JPEG (libjpeg-turbo)",
    ),
    (
        f"{TASK2};{PRE};dev/stoker/operators/image/BicubicResampler.resampleHorizontal",
        40,
        "resize (bicubic)",
    ),
    (  # the allocation nearest the leaf wins over the resampler that asked for it
        f"{TASK};{PRE};dev/stoker/operators/image/BicubicResampler.resample;_new_array_Java;"
        "OptoRuntime::new_array_C;MemAllocator::allocate;__memset_avx2_unaligned_erms",
        2,
        "JVM: allocation slow path (new arrays, zeroing)",
    ),
    (  # PNG: zlib under ImageIO is decode, and the kernel frame does not decide
        f"{TASK};{PRE};dev/stoker/operators/image/ImageDecoder.decode;javax/imageio/ImageIO.read;"
        "com/sun/imageio/plugins/png/PNGImageReader.readImage;java/util/zip/Inflater.inflate;"
        "inflate;asm_exc_page_fault_[k]",
        4,
        "decode: PNG/GIF/other (ImageIO, zlib)",
    ),
    (  # a serializer called from the tokenizer's output is serialization, not tokenize
        f"{TASK2};{LOOP};dev/stoker/operators/tokenize/TokenizeFunction.processElement;"
        "org/apache/flink/streaming/runtime/tasks/RecordWriterOutput.collect;"
        "dev/stoker/operators/model/TokenizedSampleSerializer.serialize;jbyte_disjoint_arraycopy",
        5,
        "Flink serialization + network stack",
    ),
    (
        f"{TASK};{LOOP};dev/stoker/operators/tokenize/TokenizeFunction.processElement;"
        "ai/djl/huggingface/tokenizers/jni/TokenizersLibrary.encode;"
        "tokenizers::tokenizer::TokenizerImpl::encode_single_sequence",
        3,
        "tokenize (HF tokenizers, chat template)",
    ),
    (
        f"{TASK};{LOOP};dev/stoker/operators/parse/ParseRecordFunction.processElement;"
        "com/fasterxml/jackson/core/json/ReaderBasedJsonParser.nextToken",
        2,
        "parse records (JSON)",
    ),
    (
        f"{SINK};{LOOP};dev/stoker/connectors/shm/ArrowBatchWriter.write;"
        "dev/stoker/connectors/shm/ArrowBatchEncoder.putPixels;"
        "dev/stoker/operators/image/Patchifier.patchify;java/nio/DirectByteBuffer.putFloat",
        9,
        "normalize + patchify",
    ),
    (  # Arrow's Netty allocator is Arrow, not the S3 client
        f"{SINK};{LOOP};dev/stoker/connectors/shm/ArrowBatchEncoder.encode;"
        "org/apache/arrow/memory/NettyAllocationManager.<init>;"
        "io/netty/buffer/PooledByteBufAllocatorL.allocate",
        3,
        "Arrow encode + batch file write",
    ),
    (
        f"{SINK};{LOOP};org/apache/arrow/vector/ipc/WriteChannel.write;"
        "sun/nio/ch/FileChannelImpl.write;__GI_write;copy_user_enhanced_fast_string_[k]",
        6,
        "Arrow encode + batch file write",
    ),
    (
        "[aws-java-sdk-NettyEventLoop-4-0 tid=20];io/netty/channel/nio/NioEventLoop.run;"
        "software/amazon/awssdk/http/nio/netty/internal/ResponseHandler.channelRead0",
        7,
        "S3 client (AWS SDK, Netty, fetch)",
    ),
    (  # Netty alone (no SDK frame) is the S3 client's event loop, by the generic pattern
        "[aws-java-sdk-NettyEventLoop-4-1 tid=21];io/netty/channel/nio/NioEventLoop.run;"
        "sun/nio/ch/SocketDispatcher.write;__GI_write;tcp_sendmsg_[k]",
        2,
        "S3 client (AWS SDK, Netty, fetch)",
    ),
    (
        "[GC Thread#0 tid=5];clone3;Thread::call_run;GangWorker::loop;PSScavenge::invoke",
        4,
        "JVM: GC",
    ),
    (
        "[VM Thread tid=6];VMThread::run;VM_ParallelGCFailedAllocation::doit;PSScavenge::invoke",
        2,
        "JVM: GC",
    ),
    ("[VM Thread tid=6];VMThread::run;SafepointSynchronize::begin", 1, "JVM: other"),
    ("[C2 CompilerThread0 tid=7];Thread::call_run;PhaseChaitin::Split", 6, "JVM: JIT compiler"),
    (  # class loading's zlib is not image decoding
        "[flink-pekko.actor.default-dispatcher-5 tid=30];java/lang/ClassLoader.loadClass;"
        "java/util/zip/Inflater.inflateBytesBytes;inflate",
        1,
        "JDK / other Java",
    ),
    (
        "[flink-rest-server-netty-worker-thread-1 tid=31];io/netty/channel/nio/NioEventLoop.run",
        1,
        "Flink REST server",
    ),
    ("[main tid=1];[unknown];[unknown]", 1, "unknown frames"),
]


def _write(tmp_path: Path, name: str, stacks: list[tuple]) -> Path:
    path = tmp_path / name
    path.write_text("".join(f"{s} {n}\n" for s, n, *_ in stacks))
    return path


def test_each_stack_lands_in_its_category(tmp_path: Path) -> None:
    stacks = pb.read_collapsed(_write(tmp_path, "cpu.collapsed", CPU))
    assert [s.count for s in stacks] == [n for _, n, _ in CPU]
    for stack, (_, _, want) in zip(stacks, CPU, strict=True):
        assert pb.categorize(stack).startswith(want), stack.frames
        assert pb.categorize(stack) in dict(pb.CATEGORIES)


def test_breakdown_sums_by_category_thread_and_kernel(tmp_path: Path) -> None:
    b = pb.CpuBreakdown.of(pb.read_collapsed(_write(tmp_path, "cpu.collapsed", CPU)), 0.005)
    assert b.samples == sum(n for _, n, _ in CPU) == 129
    assert b.by_category["resize (bicubic)"] == 40
    assert b.by_category["Arrow encode + batch file write"] == 9
    assert b.by_category["JVM: GC"] == 6
    assert b.kernel_by_category["Arrow encode + batch file write"] == 6  # the write's kernel copy
    assert b.kernel_by_category["decode: PNG/GIF/other (ImageIO, zlib)"] == 4
    assert b.cpu_s(b.by_category["decode: JPEG (libjpeg-turbo)"]) == pytest.approx(0.15)
    assert b.image_share() == pytest.approx((30 + 40 + 4 + 9) / 129)
    # threads: the chain's subtasks apart and shortened, pools folded, the JIT's C1/C2 kept
    task1 = "Source: jsonl-source -> ... -> sample-accounting (1/2)"
    assert b.by_thread[task1] == 30 + 2 + 4 + 3 + 2
    assert b.by_thread["Source: jsonl-source -> ... -> sample-accounting (2/2)"] == 45
    assert b.by_thread["aws-java-sdk-NettyEventLoop-N-N"] == 9
    assert b.tids["aws-java-sdk-NettyEventLoop-N-N"] == {20, 21}
    assert b.by_thread["GC Thread#N"] == 4
    assert b.by_thread["C2 CompilerThreadN"] == 6
    other = next(c for c, _ in pb.CATEGORIES if c.startswith("JVM: other"))
    assert b.thread_categories["VM Thread"] == {"JVM: GC": 2, other: 1}
    # the frame that decided: the matching frame nearest the leaf
    assert b.frames["resize (bicubic)"] == {
        "dev/stoker/operators/image/BicubicResampler.resampleHorizontal": 40
    }
    assert b.frames["JVM: allocation slow path (new arrays, zeroing)"] == {
        "MemAllocator::allocate": 2
    }


def test_thread_names() -> None:
    assert pb.thread_group(f"{CHAIN} (2/2)#1") == (
        "Source: jsonl-source -> ... -> sample-accounting (2/2)"
    )
    assert pb.thread_group(f"OutputFlusher for {CHAIN} (1/2)#0") == (
        "OutputFlusher for Source: jsonl-source -> ... -> sample-accounting (1/2)"
    )
    assert pb.thread_group("arrow-shm-sink: Writer (1/2)#0") == "arrow-shm-sink: Writer (1/2)"
    assert pb.thread_group("sdk-async-response-1-12") == "sdk-async-response-N-N"
    assert pb.thread_group("C1 CompilerThre") == "C1 CompilerThre"


WAIT_TAIL = "jdk/internal/misc/Unsafe.park;Unsafe_Park;Parker::park;___pthread_cond_wait;futex_[k]"
MAILBOX = (
    "org/apache/flink/streaming/runtime/tasks/mailbox/TaskMailboxImpl.take;"
    "java/util/concurrent/locks/AbstractQueuedSynchronizer$ConditionObject.await;"
    f"java/util/concurrent/locks/LockSupport.park;{WAIT_TAIL}"
)
#: stack -> (count, wait reason)
WALL = [
    (f"{TASK};{PRE};dev/stoker/operators/image/BicubicResampler.resample", 50, pb.RUNNING),
    (
        f"{TASK};{LOOP};org/apache/flink/streaming/runtime/tasks/mailbox/MailboxProcessor.processMail;"
        f"{MAILBOX}",
        20,
        pb.MAILBOX_IDLE,
    ),
    (
        f"{TASK};{LOOP};org/apache/flink/streaming/api/operators/async/AsyncWaitOperator.processElement;"
        "org/apache/flink/streaming/api/operators/async/AsyncWaitOperator.addToWorkQueue;"
        f"org/apache/flink/streaming/runtime/tasks/mailbox/MailboxExecutorImpl.yield;{MAILBOX}",
        15,
        pb.ASYNC_FULL,
    ),
    (
        f"{TASK};{LOOP};org/apache/flink/runtime/io/network/api/writer/RecordWriter.emit;"
        "org/apache/flink/runtime/io/network/buffer/LocalBufferPool.requestMemorySegmentBlocking;"
        "java/util/concurrent/CompletableFuture.get;java/util/concurrent/CompletableFuture.waitingGet;"
        f"java/util/concurrent/locks/LockSupport.park;{WAIT_TAIL}",
        10,
        "network buffer (output full: hard back-pressure)",
    ),
    (
        f"{TASK};{PRE};sun/awt/image/ByteInterleavedRaster.getByteData;_new_array_Java;"
        "OptoRuntime::new_array_C;MemAllocator::allocate;ParallelScavengeHeap::mem_allocate;"
        "VMThread::execute;Monitor::wait;___pthread_cond_wait;__futex_abstimed_wait_common",
        5,
        "GC (an allocation waits for the collection)",
    ),
    (
        "[aws-java-sdk-NettyEventLoop-4-0 tid=20];io/netty/channel/nio/NioEventLoop.run;"
        "io/netty/channel/nio/NioEventLoop.select;sun/nio/ch/EPoll.wait;epoll_wait",
        30,
        "event loop waiting for I/O (Netty, NIO)",
    ),
    (
        "[aws-java-sdk-NettyEventLoop-4-0 tid=20];io/netty/channel/nio/NioEventLoop.run;"
        "software/amazon/awssdk/http/nio/netty/internal/ResponseHandler.channelRead0",
        3,
        pb.RUNNING,
    ),
    (
        "[Source Data Fetcher for x (1/2)#0 tid=40];java/util/concurrent/Executors$RunnableAdapter.call;"
        "org/apache/flink/connector/base/source/reader/fetcher/SplitFetcher.run;"
        "java/util/concurrent/CountDownLatch.await;"
        "java/util/concurrent/locks/AbstractQueuedSynchronizer.acquire;"
        f"java/util/concurrent/locks/LockSupport.park;{WAIT_TAIL}",
        4,
        "waiting on a future or latch",
    ),
    (
        "[Finalizer tid=3];java/lang/ref/Finalizer$FinalizerThread.run;"
        "java/lang/ref/ReferenceQueue.remove;java/lang/Object.wait;JVM_MonitorWait;"
        "ObjectMonitor::wait;___pthread_cond_wait",
        2,
        "other wait: java/lang/ref/ReferenceQueue.remove",
    ),
    (
        "[GC Thread#0 tid=5];GangWorker::loop;PosixSemaphore::wait;__new_sem_wait_slow64",
        6,
        "JVM / native thread idle",
    ),
]


def test_wall_samples_split_into_running_and_what_they_wait_for(tmp_path: Path) -> None:
    stacks = pb.read_collapsed(_write(tmp_path, "wall.collapsed", WALL))
    for stack, (_, _, want) in zip(stacks, WALL, strict=True):
        assert pb.wait_reason(stack) == want, stack.frames
    w = pb.WallBreakdown.of(stacks)
    task = "Source: jsonl-source -> ... -> sample-accounting (1/2)"
    assert sum(w.by_thread[task].values()) == 100
    assert w.waiting_share(task) == pytest.approx(0.5)
    assert w.running_categories[task] == {"resize (bicubic)": 50}
    assert w.waiting_share("aws-java-sdk-NettyEventLoop-N-N") == pytest.approx(30 / 33)


def _phase(t0: float, t1: float, samples: tuple[int, int], jvm: tuple[float, float]) -> dict:
    def end(t: float, n: int, cpu: float, busy: float, thread_cpu: float) -> dict:
        return {
            "unix": t,
            "samples": n,
            "jvm_cpu_s": cpu,
            "machine": {"busy": busy, "total": 2 * t},
            "loadavg": [3.0, 2.0, 1.0],
            # tid -> [name, CPU s, on a CPU s, run-queue wait s, system CPU s]
            "threads": {
                "10": ["Source: jsonl-s", thread_cpu, thread_cpu, thread_cpu / 2, thread_cpu / 4]
            },
        }

    return {
        "start": end(t0, samples[0], jvm[0], 0.0, 1.0),
        "end": end(t1, samples[1], jvm[1], 1.8 * (t1 - t0), 1.0 + 0.5 * (t1 - t0)),
        "others_cpu_s": {"s3": 0.1 * (t1 - t0), "trainer": 0.05 * (t1 - t0)},
    }


def test_report_renders_the_tables_with_the_harness_records(tmp_path: Path) -> None:
    cpu = pb.read_collapsed(_write(tmp_path, "cpu.collapsed", CPU))
    wall = pb.read_collapsed(_write(tmp_path, "wall.collapsed", WALL))
    phases = {
        "cpu": _phase(100.0, 110.0, (300, 700), (5.0, 17.0)),
        "wall": _phase(110.0, 120.0, (700, 1100), (17.0, 29.0)),
    }
    polls = [
        {
            "phase": "wall",
            "unix": 115.0,
            "vertices": {
                CHAIN: {
                    "parallelism": 2,
                    "metrics": {
                        "busyTimeMsPerSecond": {"min": 800, "avg": 850, "max": 900, "sum": 1700},
                        "fetch-images.s3.requestsInFlight": {
                            "min": 1,
                            "avg": 2,
                            "max": 3,
                            "sum": 4,
                        },
                    },
                }
            },
        }
    ]
    report = pb.Report.of(cpu, 0.005, wall, phases, polls, cores=2)
    md = report.markdown()
    assert "| resize (bicubic) (image work) | 0.2 | 31.0% | 0.0% | 0.02 |" in md
    assert "| of it essential image work | 0.4 | 64.3% |" in md
    # the window: 400 samples in 10 s; machine 1.8 cores, JVM 1.2, S3 0.1, trainer 0.05
    assert "(40.00 samples/s)" in md
    assert "the machine 1.80; the job's JVM 1.20; the local S3 server 0.10; the trainer's " in md
    assert "everything else (other people's work) 0.45; idle 0.20" in md
    # schedstat of tid 10 over the wall window: 5 s on a CPU, 2.5 s in the run queue, of 10 s
    row = next(
        line
        for line in md.splitlines()
        if line.startswith("| Source: jsonl-source -> ... -> sample-accounting (1/2) | 1 | 100 |")
    )
    assert row.endswith("| 50.0% | 25.0% |")
    assert "| Source: jsonl-source -> ... -> sample-accounting | 2 | 850 |" in md
    assert "fetch-images.s3.requestsInFlight: 4.00" in md
    task = "Source: jsonl-source -> ... -> sample-accounting (1/2)"
    row = next(line for line in md.splitlines() if line.startswith(f"| {task} | 1 | 0.2 |"))
    assert "| 5.0 | 1.2 | 2.5 |" in row  # the CPU window's /proc: CPU, of it system, run queue
    data = report.data()
    assert data["cpu"]["by_category"]["resize (bicubic)"] == 40
    assert data["phases"]["cpu"]["window_s"] == 10.0


def test_seconds() -> None:
    assert pb.seconds("5ms") == 0.005
    assert pb.seconds("50us") == pytest.approx(5e-5)
    assert pb.seconds("1s") == 1.0
    assert pb.seconds("200000") == pytest.approx(2e-4)
    with pytest.raises(ValueError):
        pb.seconds("fast")


def test_proc_readers_see_this_process() -> None:
    threads = profiling.threads(os.getpid())
    assert str(os.getpid()) in threads  # the main thread's tid is the pid
    name, cpu, on_cpu, run_queue, system = threads[str(os.getpid())]
    assert cpu >= system >= 0 and on_cpu >= 0 and run_queue >= 0
    m = profiling.machine_cpu()
    assert 0 <= m["busy"] <= m["total"]
    assert profiling.process_cpu_s(os.getpid()) > 0


def test_phases_start_and_stop_at_their_fractions(tmp_path: Path, monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(profiling, "hotspot_attach", lambda pid, agent, opts: calls.append(opts))
    monkeypatch.setattr(profiling, "snapshot", lambda pid, n: {"samples": n})
    spec = {
        "agent": "/x/libasyncProfiler.so",
        "out_dir": str(tmp_path),
        "phases": [
            {"name": "wall", "event": "wall", "interval": "50ms", "from": 0.6, "to": 0.9},
            {"name": "cpu", "event": "cpu", "interval": "5ms", "from": 0.3, "to": 0.6},
        ],
    }
    run = profiling.ProfiledRun(4242, spec, total=100)
    for n in range(8, 101, 8):
        run.update(n)
    run.finish(100)
    assert [c.split(",")[0] for c in calls] == ["start", "dump", "stop", "start", "dump", "stop"]
    assert calls[0].startswith("start,event=cpu,interval=5ms,threads,file=")
    assert calls[3].startswith("start,event=wall,interval=50ms,threads,file=")
    assert [(p["name"], p["start"]["samples"], p["end"]["samples"]) for p in run.done] == [
        ("cpu", 32, 64),
        ("wall", 64, 96),
    ]
    assert (tmp_path / "profile-run.json").exists()
    spec["phases"][0]["from"] = 0.5
    with pytest.raises(ValueError, match="overlap"):
        profiling.ProfiledRun(4242, spec, total=100)


def test_trace_counts_calls_per_step(tmp_path: Path) -> None:
    reader = (
        "org/apache/flink/connector/base/source/reader/fetcher/SplitFetcherManager.createSplitFetcher;"
        "dev/stoker/connectors/source/ShuffledJsonlSource$$Lambda$1.get;"
        "dev/stoker/connectors/source/RecordLineReader.<init>"
    )
    trace = [
        (f"[Source: jsonl-source (1/2)#0 tid=10];{LOOP};{reader}", 30, None),
        (f"[Source: jsonl-source (2/2)#0 tid=11];{LOOP};{reader}", 20, None),
        ("[arrow-shm-sink: Writer (2/2)#0 tid=12];sun/nio/ch/FileDispatcherImpl.write0", 1, None),
    ]
    cpu = pb.read_collapsed(_write(tmp_path, "cpu.collapsed", CPU))
    phase = {"start": {"unix": 0.0, "samples": 800}, "end": {"unix": 10.0, "samples": 1200}}
    md = pb.Report.of(
        cpu, 0.005, phases={"trace": phase}, trace=pb.read_collapsed(_write(tmp_path, "t", trace))
    ).markdown(
        {
            "trace": "dev.stoker.connectors.source.RecordLineReader.<init>",
            "batch_size": 8,
            "cpu_event": "ctimer",
            "date": "today",
            "host": "2 cores",
            "command": "bench/profile.sh",
            "samples": 2000,
            "cores": 2,
            "latency_ms": 50,
            "jitter_ms": 20,
            "loadavg_before": [1.0],
            "loadavg_after": [1.0],
            "raw_dir": ".stoker/bench-profile",
            "run": {
                "samples_per_s": 1.0,
                "samples_per_s_from_first_batch": 1.0,
                "time_to_first_batch_s": 1.0,
                "cpu_utilization": 0.5,
            },
        }
    )
    assert "## Calls of `dev.stoker.connectors.source.RecordLineReader.<init>`" in md
    assert "50 calls while samples 800 to 1200 were consumed (400 samples, 1.00 per step of 8" in md
    assert "10.0 s); 1 other samples left out." in md
    assert "* 50 x dev/stoker/connectors/source/RecordLineReader.<init> <- " in md


def test_report_again_from_a_raw_directory(tmp_path: Path) -> None:
    _write(tmp_path, "cpu.collapsed", CPU)
    _write(tmp_path, "wall.collapsed", WALL)
    phases = {
        "cpu": _phase(100.0, 110.0, (300, 700), (5.0, 17.0)),
        "wall": _phase(110.0, 120.0, (700, 1100), (17.0, 29.0)),
    }
    meta = {
        "cpu_interval": "5ms",
        "cores": 2,
        "cpu_event": "ctimer",
        "date": "today",
        "host": "2 cores",
        "command": "bench/profile.sh",
        "samples": 1200,
        "batch_size": 8,
        "latency_ms": 50,
        "jitter_ms": 20,
        "loadavg_before": [1.0],
        "loadavg_after": [2.0],
        "raw_dir": str(tmp_path),
        "run": {
            "samples_per_s": 40.0,
            "samples_per_s_from_first_batch": 38.0,
            "time_to_first_batch_s": 12.0,
            "cpu_utilization": 0.8,
        },
    }
    (tmp_path / "report-input.json").write_text(
        json.dumps({"meta": meta, "phases": phases, "flink_metrics": []})
    )
    report, got = pb.from_raw(tmp_path)
    assert got == meta
    md = report.markdown(got)
    assert "**Load caveat**: load average 1.00 before the run and 2.00 after" in md
    assert (
        "## CPU profile (async-profiler `event=ctimer`, 5 ms of CPU per sample, 129 samples)" in md
    )
    assert "## Wall-clock profile" in md and "## Calls of" not in md
