"""Why an id differs between two runs, as far as the two sides record it: a run-level setting that
changes how every request samples, a seed or a setting the manifests show, a request fingerprint
the journals hold, an environment field both sides record; by elimination, the numbers of the
machine (the talker's when the codes differ, else the codec's)."""

from __future__ import annotations

from ..config.effective import SeedSource
from ..report.metrics import describe_change
from .sides import SETTINGS

# Recorded environment fields that change how every request of a run samples: a change of one is
# the cause of each id, before a seed whose value it leaves alone (the legacy mode records the run's
# global stream as each request's seed source, its seed the deploy seed).
SAMPLING_SETTINGS = ("legacy_global_rng",)


def _seed(row: dict) -> str:
    source = row.get("seed_source")
    if row.get("seed") is None:
        return "none (unseeded)" if source in (None, SeedSource.NONE) else f"none ({source})"
    return str(row["seed"]) + (
        f" ({source})" if source and source not in (SeedSource.REQUEST, SeedSource.DEPLOY) else ""
    )


def _same(x, y) -> bool:
    """Manifest values as read: numbers compare as numbers ("1.7" == "1.70"), missing equals missing."""
    x, y = ("" if x is None else str(x)), ("" if y is None else str(y))
    try:
        return float(x) == float(y)
    except ValueError:
        return x == y


def _seed_cause(a: dict, b: dict) -> str | None:
    """What a difference in the seeds of one id explains: the run's one global stream on one side
    only is the legacy mode, a run-level setting (`settings`), whatever the seeds; another seed, or
    no seed (unseeded draws vary), is `seed`; the same seed given by the request on one side and by
    the deploy file on the other seeds the same generator, so it explains nothing."""
    if (a.get("seed_source") == SeedSource.GLOBAL) != (b.get("seed_source") == SeedSource.GLOBAL):
        return "settings"
    if a.get("seed") != b.get("seed") or a.get("seed") is None:
        return "seed"
    return None


def named_differences(a: dict, b: dict, changes: dict[str, tuple]) -> tuple[str | None, list[str]]:
    """(the main cause, every difference in words) between two rows of one id; `changes`: the
    environment fields both sides record with different values (field -> (a, b))."""
    named = [describe_change(k, *changes[k]) for k in SAMPLING_SETTINGS if k in changes]
    cause = "settings" if named else None
    differ = a.get("seed") != b.get("seed") or (a.get("seed_source") or "") != (b.get("seed_source") or "")
    seed = _seed_cause(a, b) if differ else None
    if seed is not None:
        cause = cause or seed
        unrecorded = seed == "settings" and not named  # the environment does not say: the seed sources do
        why = (
            ": --legacy-global-rng on one side only, every draw from the run's one global stream" if unrecorded else ""
        )
        named.append(f"seed {_seed(a)} -> {_seed(b)}{why}")
    for key in SETTINGS:
        if key in a and key in b and not _same(a[key], b[key]):
            cause = cause or ("content" if key == "text" else "settings")
            named.append("text differs" if key == "text" else f"{key} {a[key]} -> {b[key]}")
    return cause, named


def likely_cause(
    rows: tuple[dict, dict], codes_equal: bool | None, fingerprints: tuple, changes: dict[str, tuple]
) -> tuple[str, str]:
    """(cause, detail) for an id whose audio differs; `changes`: as named_differences."""
    cause, named = named_differences(*rows, changes)
    if cause is not None:
        return cause, "; ".join(named)
    environment = [describe_change(k, x, y) for k, (x, y) in changes.items()]
    fa, fb = fingerprints
    if fa and fb and fa != fb:
        return "settings", (
            "same seed and settings in both manifests, but the journals' request fingerprints differ: the frame "
            "budget, prompt fields, reference audio, numerics mode, dtype, audio format or checkpoints changed"
        )
    if environment:
        return "environment", "same seed and settings; the environment changed: " + "; ".join(environment)
    same = (
        "same request fingerprint (content, seed, sampling, numerics mode, dtype, checkpoints)"
        if fa and fb
        else "same seed and settings in both manifests"
    )
    if codes_equal is None:
        return "unexplained", f"{same}; the codes are not known on both sides (a server that sends no codes hash)"
    if codes_equal:
        return "codec-numeric", f"identical codes, different PCM: the codec's numbers differ ({same})"
    if fa and fb:
        return "numeric", f"{same}: the talker's numbers differ (another device, thread count, torch build or kernels)"
    return "unexplained", f"{same}: likely another device, dtype, thread count, torch build or checkpoint"
