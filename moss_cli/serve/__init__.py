"""`moss serve`: vllm-omni's OpenAI-compatible speech API served by moss's engine.

errors.py (OpenAI-style error bodies), media.py (`ref_audio`: data URIs and allowed paths),
requests.py (a JSON body -> a prepared request, with limits), audio.py (response bodies), app.py
(FastAPI routes over the one `pipeline.live.LiveEngine` every request joins), server.py (uvicorn,
signals, shutdown). FastAPI and uvicorn are imported only by app.py and server.py.
"""
