"""Ratios of bench/transform-ceiling.sh's RESULT lines (goals from issue 8).

All from the minimum over the repeats of the process CPU time per image (min_ms): other tenants
of a shared machine do not add CPU time to the process, but they still slow it down through
shared caches and hyperthreads, which only ever adds, so the minimum is the least disturbed:

* per core: Pillow peer ms/img divided by Stoker's ms/img (goal >= 2x);
* vs ceiling: Stoker's ms/img divided by the libjpeg-turbo decode alone (goal <= 2.5x);
* 2 threads: aggregate img/s from wall time, and the CPU cost per image with 2 threads relative
  to 1 (1.00 = the work does not grow per image; the wall figure needs 2 idle cores).
"""

from __future__ import annotations

import sys


def main() -> None:
    rows: dict[tuple[str, str, int], dict[str, float]] = {}
    for line in open(sys.argv[1]):
        if not line.startswith("RESULT "):
            continue
        kv = dict(part.split("=", 1) for part in line.split()[1:])
        key = (kv.pop("set"), kv.pop("mode"), int(kv.pop("threads")))
        rows[key] = {k: float(v) for k, v in kv.items()}
    for s in sorted({k[0] for k in rows}):

        def ms(mode: str, threads: int = 1, s: str = s) -> float | None:
            r = rows.get((s, mode, threads))
            return r["min_ms"] if r else None

        pillow, ceiling, dct_ceiling = ms("pillow"), ms("tj-decode"), ms("tj-decode-dct")
        print(f"== set {s}: Pillow {pillow} CPU ms/img, libjpeg-turbo decode {ceiling} CPU ms/img")
        for mode in ("imageio", "tj", "tj-dct"):
            m = ms(mode)
            if m is None:
                continue
            line = f"  {mode:8s} {m:8.2f} CPU ms/img  {1000 / m:6.1f} img/s/core"
            if pillow:
                line += f"  | vs Pillow per core {pillow / m:4.2f}x (goal >= 2)"
            if ceiling:
                line += f"  | vs decode ceiling {m / ceiling:4.2f}x (goal <= 2.5)"
            if mode == "tj-dct" and dct_ceiling:
                line += f" ({m / dct_ceiling:4.2f}x of the DCT-scaled decode)"
            two = rows.get((s, mode, 2))
            if two:
                line += (
                    f"  | 2 threads {1000 / two['wall_ms']:6.1f} img/s wall,"
                    f" CPU/img x{two['min_ms'] / m:4.2f}"
                )
            print(line)


if __name__ == "__main__":
    main()
