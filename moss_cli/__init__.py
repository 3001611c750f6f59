"""moss: batch speech synthesis with MOSS-TTS-Local models, and proof that it is reproducible."""

__version__ = "0.1.0"

from .api import Talker, load_codec, load_talker  # noqa: E402
from .errors import MossError  # noqa: E402

__all__ = ["Talker", "load_talker", "load_codec", "MossError", "__version__"]
