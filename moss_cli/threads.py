"""How many CPU threads torch uses, and how idle OpenMP threads wait.

On a shared 2-core box a tiny model run with torch's default thread count spends most of its time
in OpenMP threads spinning against the other busy process (up to 20x slower; `python
benchmarks/busy_machine.py` measures it). Small models gain nothing from a second thread, so the
default is chosen from the size of the work; idle threads sleep instead of spinning unless the
user chose a wait policy.
"""

from __future__ import annotations

import os
import sys

# Below this many talker parameters a decode step's matrix products are too small to split
# across threads profitably (thread hand-off costs more than it saves).
SMALL_MODEL_PARAMS = 50_000_000

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
SPIN_ENV = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")  # the user chose how idle threads wait


def quiet_openmp() -> None:
    """Make idle OpenMP threads sleep rather than spin, unless the user set a policy.

    Must run before torch is imported: the OpenMP runtime reads the variable once, at load."""
    if "torch" in sys.modules or any(os.environ.get(name) for name in SPIN_ENV):
        return
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


def talker_parameters(cfg) -> int:
    """Approximate parameter count of a talker from its config (no weights needed)."""
    b, loc = cfg.backbone, cfg.local
    attention = b.hidden_size * b.head_dim * (2 * b.num_heads + 2 * b.num_kv_heads)
    layer = attention + 3 * b.hidden_size * b.intermediate_size
    local = loc.num_layers * (4 * loc.hidden_size**2 + 2 * loc.hidden_size * loc.inner_size)
    embeddings = b.vocab_size * b.hidden_size + sum(cfg.audio_codebook_sizes) * b.hidden_size
    return b.num_layers * layer + local + embeddings


def default_threads(parameters: int, available: int) -> int:
    """One thread for small models; otherwise every core this process may use."""
    return 1 if parameters < SMALL_MODEL_PARAMS else max(1, available)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def user_chose_threads() -> bool:
    return any(os.environ.get(name) for name in THREAD_ENV)


def apply_threads(requested: int | None, cfg) -> int:
    """Set torch's intra-op thread count: `requested` (--threads) wins, then the user's
    OMP_NUM_THREADS / MKL_NUM_THREADS (left as torch read it), then the size-based default."""
    import torch

    if requested is not None:
        torch.set_num_threads(requested)
    elif not user_chose_threads():
        torch.set_num_threads(default_threads(talker_parameters(cfg), available_cores()))
    return torch.get_num_threads()
