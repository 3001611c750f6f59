"""Synthesis and audits on a Ray cluster (the optional `ray` extra), imported only when `--ray` is used.

cluster.py (connecting to Ray, the workers' placement and lifetime), worker.py (one Ray actor: a
loaded talker + codec and its own continuously batching engine), dispatch.py (handing requests to
workers, re-sending a dead worker's unfinished ones), synth.py (`moss synth --ray`: the job writes
every output on the driver), audit.py (`moss audit-determinism --ray`). Design: docs/scale-out.md.
"""
