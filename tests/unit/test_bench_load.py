"""`moss bench --server`'s pieces without a server: what a response's arrival tells (vllm-omni's time to
first packet, RTF, underrun), the figures and their names, the arms' seeds, and the load's pacing."""

import asyncio
import math
import re
from pathlib import Path

import numpy as np
import pytest

from moss_cli.bench.arms import BENCH_SEED, arm_seed, check_deploy_seed, must_hold, parse_arms
from moss_cli.bench.figures import figures, ratios
from moss_cli.bench.load import Load, drive, name_neighbours, timing
from moss_cli.config.builtin import builtin_requests
from moss_cli.errors import MossError
from moss_cli.remote.reply import Reply

RATE = 1000  # samples per second, mono int16: 2000 bytes are a second of audio


def _reply(seconds: float, arrivals, header: int = 0) -> Reply:
    samples = int(seconds * RATE)
    reply = Reply("r", "c", np.zeros((samples, 1), dtype="<i2"), RATE, arrivals=arrivals)
    reply.wall_s = arrivals[-1][0] if arrivals else 0.0
    assert not arrivals or arrivals[-1][1] == header + 2 * samples
    return reply


def test_time_to_first_packet_counts_audio_not_a_header():
    # a 44-byte WAV header alone at 10 ms, then 0.5 s of audio at 30 ms, the rest (0.5 s) at 200 ms
    reply = _reply(1.0, [(0.010, 44), (0.030, 44 + 1000), (0.200, 44 + 2000)], header=44)
    t = timing(reply, streamed=True)
    assert t.ttfp_s == pytest.approx(0.030) and t.latency_s == pytest.approx(0.2)
    assert t.audio_s == pytest.approx(1.0) and t.samples == 1000 and t.rtf == pytest.approx(0.2)
    assert t.underrun_s == 0.0 and t.continuity_ok and t.underruns == 0  # 0.5 s buffered, next came 0.17 s later


def test_an_underrun_is_how_long_a_real_time_player_would_have_waited():
    # 0.1 s of audio at 0 s, the next at 0.35 s: a player starting at the first piece waits 0.25 s
    reply = _reply(0.3, [(0.0, 200), (0.35, 400), (0.36, 600)])
    t = timing(reply, streamed=True)
    assert t.underrun_s == pytest.approx(0.25) and t.underruns == 2 and not t.continuity_ok  # then 0.36 - 0.2


def test_bodies_read_whole_have_no_time_to_first_packet():
    t = timing(_reply(0.5, [(0.1, 1000)]), streamed=False)
    assert t.ttfp_s is None and t.underrun_s is None and t.continuity_ok is None and t.rtf == pytest.approx(0.2)


def test_figures_have_vllm_omnis_names_and_order():
    samples = {"e2el": [0.1, 0.2, 0.3, 0.4], "audio_ttfp": [0.01, 0.02], "audio_duration": [1.0, 1.0, 2.0, 2.0]}
    samples |= {"audio_frames": [1, 1, 2, 2], "audio_continuity_ok": [True, False]}
    out = figures(samples, completed=4, failed=1, duration_s=2.0, most=3)
    assert out["request_throughput"] == 2.0 and out["audio_throughput"] == 3.0 and out["total_audio_duration_s"] == 6.0
    assert out["failed"] == 1 and out["max_concurrent_requests"] == 3 and out["audio_continuity_ok_rate"] == 0.5
    assert out["mean_e2el_ms"] == 250.0 and out["median_e2el_ms"] == 250.0 and out["p99_e2el_ms"] == 397.0
    assert out["p50_audio_ttfp_ms"] == 15.0 and "mean_audio_rtf" not in out  # nothing measured, nothing reported
    assert out["p50_e2el_ms"] <= out["p90_e2el_ms"] <= out["p99_e2el_ms"]


def test_cost_ratios_pair_each_round_with_the_baselines_same_round():
    arm = [{"median_e2el_ms": 20.0, "audio_throughput": 1.0}, {"median_e2el_ms": 30.0, "audio_throughput": 1.0}]
    base = [{"median_e2el_ms": 10.0, "audio_throughput": 2.0}, {"median_e2el_ms": 10.0, "audio_throughput": 1.0}]
    out = ratios(arm, base)
    assert out["median_e2el_ms"] == [2.5, 2.0, 3.0] and out["audio_throughput"] == [0.75, 0.5, 1.0]


def test_arms_seeds_and_what_must_hold():
    assert parse_arms("seeded, unseeded,seeded") == ("seeded", "unseeded")
    for bad in ("", "lucky", "seeded,lucky"):
        with pytest.raises(MossError, match="--arms|expected"):
            parse_arms(bad)
    assert arm_seed("unseeded", 7, 3, 42) is None and arm_seed("seeded", 7, 3, 42) == 7
    assert arm_seed("seeded", None, 3, 42) == BENCH_SEED + 3 and arm_seed("deploy-seed", 7, 3, 42) == 42
    assert arm_seed("seeded", 0, 3, 42) == 0  # an explicit seed 0 is a seed
    with pytest.raises(MossError, match="needs --deploy"):
        check_deploy_seed(("deploy-seed",), None, deploy_given=False)
    with pytest.raises(MossError, match="gives no stage-0 seed"):
        check_deploy_seed(("deploy-seed",), None, deploy_given=True)
    for allow in (False, True):
        assert must_hold("seeded", False, allow) and must_hold("deploy-seed", False, allow)
        assert must_hold("unseeded", True, allow)  # the deploy seed is known: unseeded requests must get it
    assert must_hold("unseeded", False, False)  # not reproducible, whatever the cause
    assert not must_hold("unseeded", False, True)  # --allow-unseeded: reported only


def test_the_built_in_set_is_what_docs_bench_md_says_it_sends():
    doc = " ".join((Path(__file__).resolve().parents[2] / "docs" / "bench.md").read_text().split())
    found = re.search(r"the audit's built-in set \((\d+) texts, (\d+)-(\d+) frames\)", doc)
    assert found, "docs/bench.md no longer says what the built-in set is"
    frames = [r.max_new_frames for r in builtin_requests(for_server=True)]
    assert tuple(map(int, found.groups())) == (len(frames), min(frames), max(frames))


def test_the_load_keeps_at_most_its_concurrency_in_flight_and_names_neighbours():
    in_flight, most = [0], [0]

    async def send(index: int):
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        await asyncio.sleep(0.01)
        in_flight[0] -= 1
        if index == 3:
            raise MossError("refused")
        return index

    sent, wall = asyncio.run(drive(Load(3, 7), send, MossError))
    assert [s.index for s in sent] == list(range(7)) and most[0] == 3 and wall > 0
    assert sent[3].error == "refused" and sent[3].reply is None and sent[0].reply == 0
    name_neighbours(sent, lambda s: f"r#{s.index}")
    assert set(sent[0].neighbours) >= {"r#1", "r#2"} and "r#0" not in sent[0].neighbours


def test_poisson_arrivals_for_a_duration_stop_by_themselves():
    async def send(index: int):
        await asyncio.sleep(0.001)
        return index

    sent, wall = asyncio.run(drive(Load(4, None, duration_s=0.2, request_rate=100.0), send, MossError))
    assert 3 <= len(sent) <= 60 and wall < 1.0  # about 20 arrivals in 0.2 s at 100/s
    assert all(b.start_s >= a.start_s for a, b in zip(sent, sent[1:]))
    assert math.isinf(Load(1, 1).request_rate)
