"""A Ray cluster (the optional `ray` extra), imported only when `--ray` is used: cluster.py
(connecting to Ray, the workers' placement and lifetime), worker.py (one Ray actor: a loaded talker
+ codec and its own continuously batching engine), dispatch.py (handing requests to workers,
re-sending a dead worker's unfinished ones). Its users sit above it: jobs/ray.py (`moss synth
--ray`: the job writes every output on the driver) and audit/ray_executor.py (`moss
audit-determinism --ray`). Design: docs/scale-out.md.
"""
