"""The synthesis pipeline: requests in, decoded audio out (no files).

options.py (what a run is asked to do), models.py (deploy config, talker, codec), voices.py
(reference voices in prompts), streaming.py (chunked codec decode), synthesizer.py (the run).
"""

from .options import SynthOptions
from .synthesizer import Prepared, Synthesizer, SynthResult

__all__ = ["SynthOptions", "Synthesizer", "Prepared", "SynthResult"]
