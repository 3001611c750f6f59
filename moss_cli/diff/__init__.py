"""`moss diff`: compare two runs (output directories of `moss synth`, or golden files) id by id."""
