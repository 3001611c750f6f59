"""`moss synth` as one job (job.py): validate the request file, plan what an earlier run already
finished, synthesise the rest, and write each request's audio, its journal record and the manifest
as it finishes (one output directory, `io/output_dir.py`), whatever the source of the audio:
local.py (this machine's engine), server.py (a running speech server, `--server`), ray.py (Ray
workers, `--ray`); report.py: the summary the terminal shows."""
