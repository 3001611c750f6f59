"""Outputs: audio files and the manifest, written atomically."""
