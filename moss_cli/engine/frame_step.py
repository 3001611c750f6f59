"""One frame for a block of running requests: the draws' inputs from each row's own stream, then
the frame itself, eager (calling the logits hook before each draw) or compiled (one graph; the
hook then sees the logits afterwards)."""

from __future__ import annotations

from typing import Sequence

import torch

from ..model.talker import MossTTSLocal
from .compiled import CompiledFrame
from .frame import FrameDraws, choose_codes, choose_stop, start_frame
from .sampling import RowParams, draw_uniforms


class FrameStep:
    def __init__(self, model: MossTTSLocal, logits_hook, compiled: CompiledFrame | None) -> None:
        self.model = model
        self.logits_hook = logits_hook
        self.compiled = compiled
        self.device = next(model.parameters()).device
        self._params: dict[tuple, tuple] = {}  # see _row_params

    def __call__(self, rows: Sequence, hidden: torch.Tensor, size: int) -> tuple[list[bool], torch.Tensor | None]:
        """(stop flags of the real rows, codes [size, n_vq]; None when every row stopped, eager)."""
        draws = self._frame_draws(rows, size)
        if self.compiled is None:
            return self._eager_frame(rows, hidden, draws)
        stop_flags, codes, stop_logits, audio_logits = self.compiled(self.model, hidden, draws)
        stops = stop_flags[: len(rows)].tolist()
        if self.logits_hook is not None:
            self._replay_hook(rows, stops, stop_logits, audio_logits)
        return stops, codes

    def _eager_frame(self, rows: Sequence, hidden: torch.Tensor, draws: FrameDraws):
        """(stop flags for the real rows, codes [block, n_vq] or None when every row stopped), with
        the logits hook called right before each draw of a row still drawing."""
        model, n = self.model, len(rows)
        active = [True] * n

        def choose(codebook: int, logits: torch.Tensor) -> torch.Tensor:
            if self.logits_hook is not None:
                logits = logits.clone()
                for i, r in enumerate(rows):
                    if active[i]:
                        replaced = self.logits_hook(r.request.key, len(r.frames), codebook, logits[i], n, r.generator)
                        if replaced is not None:
                            logits[i] = replaced
            return draws.draw(codebook, logits)

        local_hidden, past = start_frame(model, hidden)
        stops = choose_stop(model, local_hidden, choose)[:n].tolist()
        for i, stop in enumerate(stops):
            active[i] = not (stop and not rows[i].request.ignore_stop)
        if not any(active):
            return stops, None
        # Stopped and idle rows stay in the block (their codes are ignored) so its shape is fixed.
        return stops, choose_codes(model, local_hidden, past, choose)

    def _replay_hook(self, rows: Sequence, stops: list[bool], stop_logits, audio_logits) -> None:
        """A compiled frame has no callbacks: the hook sees each draw's logits after the frame (the
        streams' states are the same: a frame's uniforms are drawn before it). It may only record."""
        n = len(rows)
        for codebook in range(-1, audio_logits.shape[0]):
            logits = stop_logits if codebook == -1 else audio_logits[codebook]
            for i, r in enumerate(rows):
                if codebook >= 0 and stops[i] and not r.request.ignore_stop:
                    continue
                if self.logits_hook(r.request.key, len(r.frames), codebook, logits[i], n, r.generator) is not None:
                    raise ValueError("a logits hook cannot replace logits in a compiled frame")

    def _frame_draws(self, rows: Sequence, size: int) -> FrameDraws:
        """Every sampling row draws all its uniforms for the frame (stop head + codebooks) from its
        own stream now, so its tokens depend only on its logits and its stream; each head is then
        filtered and drawn for the whole block at once."""
        n_vq, device = self.model.cfg.n_vq, self.device
        idle = size - len(rows)
        uniforms = torch.zeros(size, 1 + n_vq, device=device)
        sampling = [i for i, r in enumerate(rows) if r.request.do_sample]
        if sampling:
            uniforms[sampling] = draw_uniforms([rows[i].generator for i in sampling], 1 + n_vq, device)
        stop, audio = self._row_params(rows, size)
        seen = None
        if any(r.seen is not None for r in rows):
            vocab = self.model.cfg.audio_vocab_size
            blank = torch.zeros(n_vq, vocab, dtype=torch.bool, device=device)
            seen = torch.stack([r.seen if r.seen is not None else blank for r in rows] + [blank] * idle)
        return FrameDraws(uniforms, stop, audio, seen)

    def _row_params(self, rows: Sequence, size: int) -> tuple[RowParams, RowParams]:
        """(stop head, audio heads) parameters of a block's rows. They depend only on which requests
        sit where, which stays so for most frames, so they are kept per layout (holding the requests,
        so no id in a key is reused while it is kept)."""
        held = [r.request for r in rows] + [None] * (size - len(rows))  # None: an idle row
        key = tuple(map(id, held))
        if key not in self._params:
            if len(self._params) >= 64:  # the layouts of requests long gone
                self._params.clear()
            # Idle rows draw as the first row does (their tokens are ignored), so they ask the
            # sampler for no work of their own (an argmax, a wider short list).
            requests = [r.request for r in rows] + [rows[0].request] * (size - len(rows))
            greedy = [not r.do_sample for r in requests]
            stop = RowParams.of([r.stop for r in requests], greedy, self.device)
            audio = RowParams.of([r.audio for r in requests], greedy, self.device)
            self._params[key] = (held, stop, audio)
        return self._params[key][1:]
