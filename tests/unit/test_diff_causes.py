"""moss diff's likely cause of an id whose audio differs, from what the two sides record."""

from moss_cli.diff.causes import likely_cause


def _row(seed, source, **settings) -> dict:
    return {"seed": seed, "seed_source": source, "audio_temperature": "1.7", **settings}


def _cause(a: dict, b: dict, changes: dict | None = None) -> tuple[str, str]:
    return likely_cause((a, b), False, (None, None), changes or {})


def test_a_run_level_sampling_setting_outranks_the_seed():
    legacy = {"legacy_global_rng": (False, True)}
    assert _cause(_row(42, "deploy"), _row(42, "global"), legacy) == (
        "settings",
        "legacy_global_rng False -> True; seed 42 -> 42 (global)",
    )
    # Its own seed replaced by the global stream's: still the setting first.
    assert _cause(_row(1, "request"), _row(42, "global"), legacy)[1].startswith("legacy_global_rng False -> True;")
    # Not recorded: the seed sources say that one run alone used the global stream.
    cause, detail = _cause(_row(42, "deploy"), _row(42, "global"))
    assert cause == "settings" and "--legacy-global-rng on one side only" in detail


def test_a_seed_is_a_cause_where_its_value_changes_or_it_is_missing_not_where_only_its_source_does():
    assert _cause(_row(2, "request"), _row(5, "request")) == ("seed", "seed 2 -> 5")
    assert _cause(_row(None, "none"), _row(None, "unknown"))[0] == "seed"  # unseeded draws vary
    assert _cause(_row(42, "global"), _row(7, "global"))[0] == "seed"  # both legacy, another deploy seed
    # The same seed from the request on one side and from the deploy file on the other: one generator.
    cause, detail = _cause(_row(42, "request"), _row(42, "deploy"), {"threads": (1, 8)})
    assert (cause, detail) == ("environment", "same seed and settings; the environment changed: threads 1 -> 8")
