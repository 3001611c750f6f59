"""How close a decode step can come to `moss bench`'s floor on this machine, and where the rest goes.

    python benchmarks/step_floor.py [--preset 35m] [--batch 1,8,32] [--frames 24] [--repeats 5] [--threads 1]

Per batch size, alternated within each repeat in one process (random weights of the preset,
float32, the invariant engine):

- grouped: the step's matrix products grouped by weight (the backbone, the local layer at all
  n_vq positions back to back, then the heads), nothing between them;
- floor: the same products in the order a step must run them (`moss bench`'s floor: each local
  position followed by the head it feeds, since the next position needs that head's code);
- KV reads: every backbone layer's keys and values read once, at the mean cache length of the run
  (`moss_cli.bench.floor.kv_read_step`, attention's least memory traffic; `moss bench` reports the
  same bound);
- engine: the engine's decode step (`moss bench`'s timed run).

Times in ms, medians [min–max] over the repeats; ratios from each repeat's own figures. floor + KV
reads is what an engine with no other cost at all would take, so floor / (floor + KV) is the best
efficiency any engine could report here.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from rich.console import Console
from rich.table import Table

from moss_cli.bench import BenchOptions
from moss_cli.bench.floor import floor_weights, kv_read_step, time_products
from moss_cli.bench.models import MODES, load_models
from moss_cli.bench.run import _talker_run
from moss_cli.numerics.layout import EngineLayout

VARIANTS = ("grouped", "floor", "KV reads", "engine")


def grouped_weights(model) -> list[torch.Tensor]:
    """The floor's weights grouped by weight: every local position back to back, then the heads."""
    backbone = [m.weight for m in model.transformer.layers.modules() if isinstance(m, torch.nn.Linear)]
    local = [m.weight for m in model.local_transformer.modules() if isinstance(m, torch.nn.Linear)]
    heads = model.packed_heads or [e.weight for e in model.audio_embeddings]
    stop = [model.local_text_lm_head.weight] if hasattr(model, "local_text_lm_head") else []
    return backbone + local * model.cfg.n_vq + stop + heads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="35m")
    parser.add_argument("--batch", default="1,8,32")
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    options = BenchOptions(random_weights=args.preset, dtype="float32")
    model, _, prompts, what = load_models(options, torch.device("cpu"), torch.float32)
    numerics = MODES["invariant"]
    console = Console(width=150)  # the ranges need the room
    console.print(f"{what}, float32, {args.threads} thread(s), {args.frames} frames, {args.repeats} repeats")
    table = Table("B", *VARIANTS, "floor/engine", "floor/(floor+KV)")
    with torch.inference_mode():
        for batch in (int(b) for b in args.batch.split(",")):
            layout = EngineLayout.fix(model, numerics, batch)
            rows = layout.steps.padded(batch)  # what a step really computes
            run = _talker_run(model, layout, prompts, batch, 2)  # warm-up (and the prompt's length)
            length = run.prompt_tokens // batch + args.frames // 2
            times = {v: [] for v in VARIANTS}
            for _ in range(args.repeats):
                times["grouped"].append(time_products(grouped_weights(model), rows))
                times["floor"].append(time_products(floor_weights(model), rows))
                times["KV reads"].append(kv_read_step(model, rows, length))
                times["engine"].append(_talker_run(model, layout, prompts, batch, args.frames).step_s)
            ratio = [f / e for f, e in zip(times["floor"], times["engine"])]
            bound = [f / (f + kv) for f, kv in zip(times["floor"], times["KV reads"])]
            table.add_row(
                str(batch),
                *(_cell([t * 1e3 for t in times[v]]) for v in VARIANTS),
                _cell(ratio, 2),
                _cell(bound, 2),
            )
    console.print(table)


def _cell(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}–{max(values):.{digits}f}]"


if __name__ == "__main__":
    main()
