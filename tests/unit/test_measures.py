"""measures/: the one level rule and the waveform measures every report shows."""

import math

import pytest
import torch

from moss_cli.errors import MossError
from moss_cli.measures import LEVELS, check_level, passes
from moss_cli.measures.waveform import first_differing_sample, format_metrics, measure


def _rule(level, codes_equal, pcm_equal, snr_db, same_speech=None):
    return passes(level, 60.0, codes_equal=codes_equal, pcm_equal=pcm_equal, snr_db=snr_db, same_speech=same_speech)


def test_each_level_passes_what_it_promises():
    # identical audio passes everywhere
    assert all(_rule(level, True, True, None) for level in LEVELS)
    # equal codes, other PCM at 70 dB: codes and waveform pass, bitwise fails, speech only if judged the same
    assert _rule("codes", True, False, 70.0) and _rule("waveform", True, False, 70.0)
    assert not _rule("bitwise", True, False, 70.0)
    assert not _rule("speech", True, False, 70.0) and _rule("speech", True, False, 70.0, same_speech=True)
    assert not _rule("speech", True, False, 70.0, same_speech=False)
    # below the SNR floor, or codes that differ, fail the waveform level
    assert not _rule("waveform", True, False, 59.9) and not _rule("waveform", False, False, 70.0)
    # unknown codes: identical PCM stands for them at codes, the SNR decides at waveform
    assert not _rule("codes", None, False, 70.0) and _rule("codes", None, True, None)
    assert _rule("waveform", None, False, 70.0) and not _rule("waveform", None, False, 10.0)


def test_a_level_a_command_does_not_support_is_bad_input():
    assert check_level("speech") == "speech"
    with pytest.raises(MossError, match=r"unknown level 'loose'; expected one of bitwise, waveform") as error:
        check_level("loose", ("bitwise", "waveform"))
    assert error.value.field == "--level"
    with pytest.raises(MossError):
        check_level("codes", ("bitwise", "waveform"))


def test_the_waveform_trio_of_a_clip_and_a_noisy_copy():
    t = torch.arange(16000, dtype=torch.float64) / 16000
    clean = (0.5 * torch.sin(2 * math.pi * 440 * t)).float()[None]
    noise = 0.005 * torch.randn(1, 16000, generator=torch.Generator().manual_seed(0))
    noisy = clean + noise
    got = measure(clean, noisy)
    assert list(got) == ["snr_db", "log_spectral_distance", "max_abs_diff"]  # the reports' JSON keys, in order
    expected_snr = 10 * math.log10(clean.double().pow(2).sum() / noise.double().pow(2).sum())
    assert got["snr_db"] == pytest.approx(expected_snr, abs=0.01)
    assert got["max_abs_diff"] == pytest.approx(float(noise.abs().max()), rel=1e-5)
    assert got["log_spectral_distance"] > 0
    same = measure(clean, clean.clone())
    assert same == {"snr_db": None, "log_spectral_distance": 0.0, "max_abs_diff": 0.0}
    assert format_metrics(same) == "SNR inf dB, LSD 0.00 dB, max abs 0"


def test_the_first_differing_sample():
    a = torch.zeros(2, 100)
    b = a.clone()
    assert first_differing_sample(a, b) is None
    b[1, 37] = 1e-4  # any channel counts
    assert first_differing_sample(a, b) == 37
    assert first_differing_sample(a, a[:, :60]) == 60  # a prefix: the common length
    assert first_differing_sample(a[:, :0], a) == 0
