"""A client of a running speech server (vllm-omni, or `moss serve`) over its OpenAI-compatible
speech API: requests in, decoded audio out, no files (like moss_cli.pipeline for the local engine).
`settings.py`: the connection settings and the secrets kept out of every output; `reply.py`: an
answer's audio and headers; `client.py`: sending, with bounded concurrency, timeouts and reported
retries."""
