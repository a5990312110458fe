"""Video preprocessing benchmark driver (bench/video-preprocess.sh; bench/README.md).

Subcommands (run with the model venv, ``.stoker/model-venv``: transformers 5.23.0, torch 2.15.0,
torchvision 0.29.2, PyAV 16.0.1; torchcodec 0.17.0 from ``bench/video-requirements.txt`` on
PYTHONPATH for the torchcodec peer):

* ``clips <shared data dir> <out dir> <set>...``: writes the benchmark clips once (kept when
  ``manifest.json`` matches ``CLIPS_VERSION``): per set (``SETS``) a few H.264 mp4 clips, 30 fps,
  10 s, made with PyAV's libx264 at FFmpeg's defaults (preset medium, crf 23, keyint 250, yuv420p;
  one encoder thread, so the files are the same on every run). Each clip pans across one of the
  shared photos (scaled to 1.3x the frame, Lanczos) from one corner to the opposite one, with a
  textured square moving over it: real detail, in motion, at a realistic bitrate.
* ``peer <clip dir> <backend> <fps> <min_pixels> <max_pixels> <workers> <warmup> <passes>
  <round>``: the peer a careful engineer writes: a torch ``DataLoader`` (``batch_size=None``, one
  video per item, ``num_workers`` workers, persistent, each with ``torch.set_num_threads(1)``)
  whose dataset calls transformers' ``Qwen2VLVideoProcessor`` (the torchvision backend, the only
  one of 5.23.0) on the clip path, as ``scripts/golden/make_video_golden.py`` calls it:
  ``do_sample_frames=True``, so it loads the video with ``transformers.video_utils.load_video``
  (``backend`` ``pyav``: ``fetch_videos`` swapped for the same call with ``backend="pyav"``;
  ``torchcodec``: the processor's own ``fetch_videos``, transformers' default) and samples, resizes,
  normalises and patchifies. Each worker first preprocesses ``warmup`` videos (not timed); then the
  loader delivers ``passes`` x clips videos. Prints ``RESULT {json}`` like the Java bench: wall
  time, and CPU time of the main process and its workers (``/proc/<pid>/stat``).
* ``compare <clip> <backend> <fps> <min_pixels> <max_pixels> <java dump> <round>``: the peer's
  ``pixel_values_videos`` of one clip against Stoker's (``VideoPreprocessBench dump``), bit for bit;
  prints ``COMPARE {json}``.
* ``report <results file> <clips dir> <out json> <out md> <settings json>``: means per contender
  over the rounds, the Stoker/peer ratios per round (wall-clock videos/s, and videos per CPU
  second), and whether each stayed on the same side of 1 in both orders.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

CLIPS_VERSION = 1
SOURCES = (
    "qwen-messages/images/photos/landmark.jpg",
    "qwen-messages/images/photos/birds.jpg",
    "qwen-messages/images/photos/origamis.jpg",
    "qwen-messages/images/screens/desktop.jpeg",
    "llava-style/images/exif/landscape_orient1.jpg",
    "llava-style/images/photos/retina.jpg",
)

# set name -> (width, height, clips); "smoke" only checks the script quickly
SETS = {
    "720p": (1280, 720, 8),
    "360p": (640, 360, 4),
    "1080p": (1920, 1080, 4),
    "smoke": (320, 180, 2),
}
RATE, SECONDS = 30, 10
X264 = {"preset": "medium", "crf": "23", "threads": "1"}
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


# ---------------------------------------------------------------------------------------------
# clips


def make_clip(photo: Path, out: Path, width: int, height: int, seed: int) -> dict[str, Any]:
    """One clip: a pan over ``photo`` with a textured square moving over it (see the docstring)."""
    import av
    import numpy as np
    from PIL import Image

    img = Image.open(photo).convert("RGB")
    w, h = img.size
    cw, ch = (w, w * 9 // 16) if w * 9 <= h * 16 else (h * 16 // 9, h)
    img = img.crop(((w - cw) // 2, (h - ch) // 2, (w - cw) // 2 + cw, (h - ch) // 2 + ch))
    bw, bh = width * 13 // 10, height * 13 // 10
    big = np.asarray(img.resize((bw, bh), Image.Resampling.LANCZOS))
    side = height // 6
    yy, xx = np.mgrid[0:side, 0:side]
    square = np.stack(
        [(xx * 7 + yy * 3) % 256, (xx ^ yy) * 4 % 256, ((xx // 4 + yy // 4) % 2) * 255], axis=-1
    ).astype(np.uint8)
    frames = RATE * SECONDS
    tmp = out.with_suffix(".part")
    with av.open(str(tmp), "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=RATE, options=dict(X264))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for k in range(frames):
            f = k / (frames - 1)
            if seed % 2:
                f = 1 - f
            x, y = round(f * (bw - width)), round(f * (bh - height))
            frame = big[y : y + height, x : x + width].copy()
            # the square bounces on a Lissajous path, a different one per clip
            sx = round((width - side) * (0.5 + 0.5 * np.sin(2 * np.pi * k / (97 + seed))))
            sy = round((height - side) * (0.5 + 0.5 * np.sin(2 * np.pi * k / (71 + 2 * seed))))
            frame[sy : sy + side, sx : sx + side] = np.roll(square, k, axis=1)
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    tmp.rename(out)
    data = out.read_bytes()
    return {
        "clip": out.name,
        "source_photo": str(photo.name),
        "width": width,
        "height": height,
        "fps": RATE,
        "frames": frames,
        "seconds": SECONDS,
        "bytes": len(data),
        "kbit_per_s": round(len(data) * 8 / SECONDS / 1000),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def clips(data: Path, out: Path, sets: list[str]) -> None:
    from concurrent.futures import ProcessPoolExecutor

    import av

    for name in sets:
        width, height, count = SETS[name]
        d = out / name
        manifest = d / "manifest.json"
        spec = {"version": CLIPS_VERSION, "x264": X264, "av": av.__version__, "set": name}
        if manifest.exists() and json.loads(manifest.read_text())["spec"] == spec:
            print(f"[clips] {d}: kept", file=sys.stderr)
            continue
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob("*"):
            old.unlink()
        t0 = time.perf_counter()
        with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
            jobs = [
                pool.submit(
                    make_clip,
                    data / SOURCES[i % len(SOURCES)],
                    d / f"{name}_{i}.mp4",
                    width,
                    height,
                    i,
                )
                for i in range(count)
            ]
            rows = [j.result() for j in jobs]
        manifest.write_text(json.dumps({"spec": spec, "clips": rows}, indent=2) + "\n")
        total = sum(r["bytes"] for r in rows)
        print(
            f"[clips] {d}: {count} clips, {total / 1e6:.1f} MB, {time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
        )


# ---------------------------------------------------------------------------------------------
# the peer


def pyav_fetch(video: Any, sample_indices_fn: Any = None) -> Any:
    """``BaseVideoProcessor.fetch_videos`` with ``backend="pyav"`` (as the golden script)."""
    from transformers.video_utils import load_video

    if isinstance(video, list):
        return list(zip(*[pyav_fetch(v, sample_indices_fn) for v in video], strict=True))
    return load_video(video, backend="pyav", sample_indices_fn=sample_indices_fn)


def processor(backend: str, fps: float, min_pixels: int, max_pixels: int) -> Any:
    """``Qwen2VLVideoProcessor`` with the qwen2-vl preset's values (as the golden script)."""
    from transformers import Qwen2VLVideoProcessor

    vp = Qwen2VLVideoProcessor(
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
        patch_size=14,
        temporal_patch_size=2,
        merge_size=2,
        image_mean=CLIP_MEAN,
        image_std=CLIP_STD,
        min_frames=4,
        max_frames=768,
        do_sample_frames=True,
        fps=fps,
        # 5.23.0's behaviour when unset (as the golden script leaves it), without its warning
        cap_pixels_per_frame=False,
    )
    if backend == "pyav":
        vp.fetch_videos = pyav_fetch
    elif backend != "torchcodec":
        raise SystemExit(f"backend pyav or torchcodec: {backend}")
    return vp


def preprocess(vp: Any, path: str) -> dict[str, Any]:
    import numpy as np

    out = vp(videos=[path], return_tensors="pt", return_metadata=True)
    indices = np.asarray(out["video_metadata"][0].frames_indices)
    return {
        "pixel_values_videos": out["pixel_values_videos"],
        "video_grid_thw": out["video_grid_thw"],
        "frames_indices": [int(i) for i in indices],
    }


class ClipDataset:
    """Item ``i``: clip ``i % len(paths)`` preprocessed (a map-style torch dataset)."""

    def __init__(self, paths: list[str], vp: Any) -> None:
        self.paths, self.vp = paths, vp

    def __len__(self) -> int:
        return 1 << 30  # indices come from CountSampler

    def __getitem__(self, i: int) -> dict[str, Any]:
        return preprocess(self.vp, self.paths[i % len(self.paths)])


class CountSampler:
    """Yields ``0 .. n - 1``; ``n`` is set in the main process before each epoch."""

    def __init__(self) -> None:
        self.n = 0

    def __iter__(self) -> Any:
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n


def worker_init(_: int) -> None:
    import torch

    # N workers each with torch's default intra-op pool (one thread per core) would run N x cores
    # threads on cores cores; DataLoader's worker loop sets this too, set here to be explicit.
    torch.set_num_threads(1)


def proc_cpu_s(pid: int) -> float:
    """utime + stime of process ``pid`` in seconds, from ``/proc/<pid>/stat``."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peer(
    clip_dir: Path,
    backend: str,
    fps: float,
    min_pixels: int,
    max_pixels: int,
    workers: int,
    warmup: int,
    passes: int,
    round_: int,
) -> None:
    import torch
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    paths = [str(p) for p in sorted(clip_dir.glob("*.mp4"))]
    if not paths:
        raise SystemExit(f"no .mp4 clip in {clip_dir}")
    sampler = CountSampler()
    loader = DataLoader(
        ClipDataset(paths, processor(backend, fps, min_pixels, max_pixels)),  # type: ignore[arg-type]
        batch_size=None,
        sampler=sampler,
        num_workers=workers,
        persistent_workers=True,
        worker_init_fn=worker_init,
    )
    sampler.n = warmup * workers  # round robin: warmup items per worker
    it = iter(loader)
    for _ in it:
        pass
    pids = [p.pid for p in it._workers]  # type: ignore[attr-defined]
    videos = passes * len(paths)
    sampler.n = videos
    cpu0 = time.process_time() + sum(proc_cpu_s(p) for p in pids)
    t0 = time.perf_counter()
    sampled = through = 0
    checksum = 0
    for item in loader:
        idx = item["frames_indices"]
        sampled += len(idx)
        through += idx[-1] + 1
        checksum += int(item["pixel_values_videos"].numel())
    wall = time.perf_counter() - t0
    cpu = time.process_time() + sum(proc_cpu_s(p) for p in pids) - cpu0
    result = {
        "round": round_,
        "contender": f"peer-{backend}",
        "workers": workers,
        "clip_dir": str(clip_dir),
        "clips": len(paths),
        "warmup_videos_per_worker": warmup,
        "passes": passes,
        "videos": videos,
        "sampled_frames": sampled,
        "frames_through_last_sample": through,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "videos_per_s": round(videos / wall, 4),
        "frames_per_s": round(sampled / wall, 3),
        "videos_per_cpu_s": round(videos / cpu, 4),
        "frames_per_cpu_s": round(sampled / cpu, 3),
        "checksum": checksum,
    }
    print("RESULT " + json.dumps(result), flush=True)


def compare(
    clip: Path,
    backend: str,
    fps: float,
    min_pixels: int,
    max_pixels: int,
    dump: Path,
    round_: int,
) -> None:
    import numpy as np

    out = preprocess(processor(backend, fps, min_pixels, max_pixels), str(clip))
    peer_values = out["pixel_values_videos"].numpy().astype("<f4", copy=False).ravel()
    stoker = np.fromfile(dump, dtype="<f4")
    same_size = peer_values.size == stoker.size
    row: dict[str, Any] = {
        "round": round_,
        "clip": clip.name,
        "peer": f"peer-{backend}",
        "shape": list(out["pixel_values_videos"].shape),
        "grid_thw": [int(v) for v in out["video_grid_thw"][0]],
        "frames_indices": out["frames_indices"],
        "values": int(peer_values.size),
        "stoker_values": int(stoker.size),
    }
    if same_size:
        bits_equal = peer_values.view(np.uint32) == stoker.view(np.uint32)
        row["bit_equal"] = bool(bits_equal.all())
        row["values_differing"] = int((~bits_equal).sum())
        row["max_abs_diff"] = float(np.abs(peer_values - stoker).max())
    else:
        row["bit_equal"] = False
    print("COMPARE " + json.dumps(row), flush=True)


# ---------------------------------------------------------------------------------------------
# report


def report(results: Path, clips_dir: Path, out_json: Path, out_md: Path, settings: str) -> None:
    rows = []
    compares = []
    for line in results.read_text().splitlines():
        if line.startswith("RESULT "):
            rows.append(json.loads(line[len("RESULT ") :]))
        elif line.startswith("COMPARE "):
            compares.append(json.loads(line[len("COMPARE ") :]))
    cfg = json.loads(settings)
    cores = int(cfg["cores"])
    sets = sorted({Path(r["clip_dir"]).name for r in rows})
    summary: dict[str, Any] = {}
    md = []
    for s in sets:
        manifest = json.loads((clips_dir / s / "manifest.json").read_text())["clips"]
        mb = sum(c["bytes"] for c in manifest) / 1e6
        kbit = statistics.mean(c["kbit_per_s"] for c in manifest)
        c0 = manifest[0]
        md.append(
            f"\n### Set `{s}`: {len(manifest)} clips, {c0['width']}x{c0['height']}, "
            f"{c0['fps']} fps, {c0['seconds']} s, H.264 ({mb:.1f} MB in all, "
            f"{kbit:.0f} kbit/s on average)\n"
        )
        md.append(
            "| contender | workers | rounds | videos/s | sampled frames/s | videos/s per core "
            "| frames/s per core | videos per CPU-s | CPU-s / wall-s |"
        )
        md.append("|---|---|---|---|---|---|---|---|---|")
        set_rows = [r for r in rows if Path(r["clip_dir"]).name == s]
        groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for r in set_rows:
            groups.setdefault((r["contender"], r["workers"]), []).append(r)
        means: dict[str, Any] = {}
        for (contender, workers), rs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            m = {
                k: statistics.mean(r[k] for r in rs)
                for k in ("videos_per_s", "frames_per_s", "videos_per_cpu_s", "frames_per_cpu_s")
            }
            used = min(workers, cores)
            m["videos_per_s_per_core"] = m["videos_per_s"] / used
            m["frames_per_s_per_core"] = m["frames_per_s"] / used
            m["cpu_over_wall"] = statistics.mean(r["cpu_s"] / r["wall_s"] for r in rs)
            m["rounds"] = [r["round"] for r in rs]
            m["per_round_videos_per_s"] = [r["videos_per_s"] for r in rs]
            means[f"{contender}/{workers}"] = m
            md.append(
                f"| {contender} | {workers} | {len(rs)} | {m['videos_per_s']:.3f} | "
                f"{m['frames_per_s']:.2f} | {m['videos_per_s_per_core']:.3f} | "
                f"{m['frames_per_s_per_core']:.2f} | {m['videos_per_cpu_s']:.3f} | "
                f"{m['cpu_over_wall']:.2f} |"
            )
        ratios = {}
        md.append("")
        md.append(
            "| Stoker / peer | workers | videos/s, per round (mean) | held in both orders "
            "| videos per CPU-s, per round (mean) | held in both orders |"
        )
        md.append("|---|---|---|---|---|---|")
        peers = sorted({r["contender"] for r in set_rows if r["contender"] != "stoker"})
        for p in peers:
            for workers in sorted({r["workers"] for r in set_rows}):
                wall, cpu = [], []
                for rnd in sorted({r["round"] for r in set_rows}):
                    a = [
                        r
                        for r in set_rows
                        if (r["contender"], r["workers"], r["round"]) == ("stoker", workers, rnd)
                    ]
                    b = [
                        r
                        for r in set_rows
                        if (r["contender"], r["workers"], r["round"]) == (p, workers, rnd)
                    ]
                    if a and b:
                        wall.append(a[0]["videos_per_s"] / b[0]["videos_per_s"])
                        cpu.append(a[0]["videos_per_cpu_s"] / b[0]["videos_per_cpu_s"])
                if not wall:
                    continue
                held_wall, held_cpu = held(wall), held(cpu)
                ratios[f"stoker/{p}/{workers}"] = {
                    "wall_per_round": [round(x, 3) for x in wall],
                    "cpu_per_round": [round(x, 3) for x in cpu],
                    "wall_mean": round(statistics.mean(wall), 3),
                    "cpu_mean": round(statistics.mean(cpu), 3),
                    "wall_held_in_both_orders": held_wall,
                    "cpu_held_in_both_orders": held_cpu,
                }
                md.append(
                    f"| vs {p} | {workers} | {', '.join(f'{x:.2f}' for x in wall)} "
                    f"({statistics.mean(wall):.2f}) | {'yes' if held_wall else 'no'} | "
                    f"{', '.join(f'{x:.2f}' for x in cpu)} ({statistics.mean(cpu):.2f}) | "
                    f"{'yes' if held_cpu else 'no'} |"
                )
        summary[s] = {"clips": manifest, "contenders": means, "ratios": ratios}
    if compares:
        md.append("\n### Outputs compared (`pixel_values_videos` of one clip)\n")
        for c in compares:
            verdict = (
                "bit-equal"
                if c["bit_equal"]
                else f"NOT bit-equal ({c.get('values_differing', 'size differs')} values differ, "
                f"max abs diff {c.get('max_abs_diff', 'n/a')})"
            )
            md.append(
                f"* {c['clip']}, Stoker vs {c['peer']}: shape {c['shape']}, grid "
                f"{c['grid_thw']}, frames {c['frames_indices']}: **{verdict}**"
            )
    doc = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "machine": {
            "cores": cores,
            "cpu": cpu_model(),
            "python": platform.python_version(),
        },
        "settings": cfg,
        "sets": summary,
        "compare": compares,
        "rows": rows,
    }
    out_json.write_text(json.dumps(doc, indent=2) + "\n")
    head = [
        f"# Video preprocessing: Stoker vs the DataLoader peer ({doc['date_utc']} UTC)",
        "",
        f"Machine: {cores} cores ({doc['machine']['cpu']}). Settings: "
        + ", ".join(f"{k} {v}" for k, v in cfg.items())
        + ". Written by bench/video-preprocess.sh; see bench/README.md.",
    ]
    out_md.write_text("\n".join(head + md) + "\n")
    print("\n".join(head + md))


def held(ratios: list[float]) -> bool:
    """Whether a Stoker/peer ratio kept its side of 1 in every round (rounds alternate the order,
    so at least two rounds cover both orders)."""
    return len(ratios) >= 2 and (min(ratios) > 1 or max(ratios) < 1)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main() -> None:
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "clips":
        clips(Path(args[0]), Path(args[1]), args[2:])
    elif cmd == "peer":
        peer(
            Path(args[0]),
            args[1],
            float(args[2]),
            int(args[3]),
            int(args[4]),
            int(args[5]),
            int(args[6]),
            int(args[7]),
            int(args[8]),
        )
    elif cmd == "compare":
        compare(
            Path(args[0]),
            args[1],
            float(args[2]),
            int(args[3]),
            int(args[4]),
            Path(args[5]),
            int(args[6]),
        )
    elif cmd == "report":
        report(Path(args[0]), Path(args[1]), Path(args[2]), Path(args[3]), args[4])
    else:
        raise SystemExit(f"unknown subcommand {cmd}; see the module docstring")


if __name__ == "__main__":
    main()
