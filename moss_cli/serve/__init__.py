"""`moss serve`: vllm-omni's OpenAI-compatible speech API served by moss's engine.

errors.py (OpenAI-style error bodies), media.py (`ref_audio`: data URIs and allowed paths),
requests.py (a JSON body -> a prepared request, with limits), service.py (the one engine thread
every HTTP request joins), audio.py (response bodies), app.py (FastAPI routes), server.py (uvicorn,
signals, shutdown). FastAPI and uvicorn are imported only by app.py and server.py.
"""
