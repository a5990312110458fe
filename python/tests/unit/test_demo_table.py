"""``./stoker demo``'s closing table (``stoker_tools.demo.comparison``) from the two loaders'
totals, without running them."""

from __future__ import annotations

from stoker_tools.demo import comparison

NAIVE = {
    "samples": 256,
    "images": 381,
    "elapsed_s": 77.19,
    "samples_per_s": 3.3,
    "wait_time_ratio": 0.554,
    "steady_wait_time_ratio": 0.545,
    "first_batch_s": 2.09,
    "dropped": 0,
}
STOKER = {
    "samples": 256,
    "images": 381,
    "elapsed_s": 39.34,
    "samples_per_s": 6.5,
    "wait_time_ratio": 0.167,
    "steady_wait_time_ratio": 0.001,
    "first_batch_s": 6.62,
}
RUN = {
    "world_size": 2,
    "micro_batch_size": 4,
    "step_time_ms": 1000,
    "prefetch_depth": "8",
    "cpus": 2,
}


def test_the_table_has_a_row_per_loader_and_the_headline_in_busy_shares():
    text = comparison(NAIVE, STOKER, **RUN, s3_latency_ms=50)
    lines = text.splitlines()
    assert lines[0] == (
        "Trainer busy share (1 - wait-time ratio): 2 DP ranks x 4 samples a step, a simulated "
        "step of 1000 ms (about a 7B Qwen-VL step on one GPU);"
    )
    assert "50 ms to each GET's first byte" in lines[1]
    header = next(x for x in lines if x.startswith("loader"))
    assert header.split("  ")[-1].strip() == "busy (whole run)"
    naive = next(x for x in lines if x.startswith("naive serial loop"))
    stoker = next(x for x in lines if x.startswith("Stoker, up to 8 batches ahead"))
    assert naive.split()[-7:] == ["256", "77.2", "3.3", "2.1", "54.5%", "45.5%", "44.6%"]
    assert stoker.split()[-7:] == ["256", "39.3", "6.5", "6.6", "0.1%", "99.9%", "83.3%"]
    assert len({len(header), len(naive), len(stoker)}) == 1  # aligned columns
    assert (
        "Steady state: the trainer is busy 45.5% of the time with the naive loop and 99.9% "
        "with Stoker." in lines
    )


def test_without_naive_figures_the_table_says_why():
    text = comparison(
        "it failed, exit 1", STOKER, **{**RUN, "step_time_ms": 20}, s3_latency_ms=None
    )
    assert "a simulated step of 20 ms;" in text  # no claim about a real step
    assert "the local dataset folder (no S3)" in text
    assert "naive serial loop: no figures (it failed, exit 1)" in text
    assert "Steady state: the trainer is busy 99.9% of the time with Stoker." in text
    assert not any(x.startswith("naive serial loop,") for x in text.splitlines())
    dropped = comparison({**NAIVE, "dropped": 3}, STOKER, **RUN, s3_latency_ms=0)
    assert "left out 3 sample(s)" in dropped and "(no added latency)" in dropped
