"""moss: batch speech synthesis with MOSS-TTS-Local models, and proof that it is reproducible."""

__version__ = "0.1.0"

__all__ = ["Talker", "load_talker", "load_codec", "MossError", "__version__"]


def __getattr__(name: str):
    # The API pulls in torch (about 1 s to import); `moss --help` and `--version` must not pay for it.
    if name in ("Talker", "load_talker", "load_codec"):
        from . import api

        return getattr(api, name)
    if name == "MossError":
        from .errors import MossError

        return MossError
    raise AttributeError(f"module 'moss_cli' has no attribute {name!r}")
