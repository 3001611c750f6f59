"""What vllm-omni 0.30.0 does with MOSS-TTS-Local requests, as plain data: the audio sampler it
fixes, the speech body's names for request-file fields, the fields it drops, and why an unseeded
request's audio can vary there. Every fact cites vllm-omni's code (paths: the `vllm_omni` package
of its 0.30.0 wheel); the modules that act on a fact import it from here."""

from __future__ import annotations

VERSION = "0.30.0"

# The audio sampler, whatever the deploy file's stage-0 sampling params say: the model card's values
# (model_executor/models/moss_tts/modeling_moss_tts_talker.py:1634-1654, "the generic stage
# SamplingParams are for the backbone token loop"); the continue/stop gate keeps generate_frame's
# defaults (modeling_moss_tts_local_depth.py:274-276). Also the OpenMOSS reference generate() defaults.
AUDIO_SAMPLER = {"temperature": 1.7, "top_p": 0.8, "top_k": 25, "repetition_penalty": 1.0}
STOP_GATE = {"temperature": 1.0, "top_p": 1.0, "top_k": 50}
AUDIO_SAMPLER_TEXT = (
    f"temperature {AUDIO_SAMPLER['temperature']}, top_p {AUDIO_SAMPLER['top_p']}, "
    f"top_k {AUDIO_SAMPLER['top_k']}, repetition_penalty {AUDIO_SAMPLER['repetition_penalty']}"
)

# What a deployment's stage-0 keys drive for MOSS-TTS-Local (`moss config show`): not the audio sampler.
AUDIO_SAMPLER_SHORT = "/".join(str(AUDIO_SAMPLER[k]) for k in ("temperature", "top_p", "top_k", "repetition_penalty"))
STAGE0_NOTE = (
    f"vllm-omni {VERSION} samples MOSS-TTS-Local's audio codes at "
    f"{AUDIO_SAMPLER_TEXT.replace('repetition_penalty', 'repetition penalty')} whatever stage 0 says, and the "
    f"continue/stop gate at {STOP_GATE['temperature']} / top_k {STOP_GATE['top_k']} / top_p {STOP_GATE['top_p']} "
    "(model_executor/models/moss_tts/modeling_moss_tts_talker.py:1634-1654, modeling_moss_tts_local_depth.py:274-276)"
)
# The body's extra_params that vllm-omni sets on stage 0 (serving_speech.py:2023-2025), whose MOSS-TTS-Local
# logits are one-hot, so they change no audio.
STAGE0_SAMPLING = ("temperature", "top_p", "top_k")
DEFAULT_VOICE = "default"  # the voice vllm-omni reads as no voice (serving_speech.py:2526-2528)

# The speech body (entrypoints/openai/protocol/audio.py): request-file field -> body field, where
# they differ only by name; the MOSS prompt fields that have no body field travel in `extra_params`.
RENAMED = {"text": "input", "instruction": "instructions", "max_new_frames": "max_new_tokens"}
EXTRA_PARAMS = ("tokens", "quality", "sound_event", "ambient_sound")

# Names a user may carry over from an OpenAI-style API -> the request-file field that does what they
# mean for a local run: the speech request has no such fields and drops them silently.
OPENAI_SAMPLING = {
    "temperature": "audio_temperature",
    "top_p": "audio_top_p",
    "top_k": "audio_top_k",
    "repetition_penalty": "audio_repetition_penalty",
}

# Why request-file fields have no effect there. The request model ignores unknown body fields
# (pydantic's default; protocol/audio.py:58), and the MOSS adapter builds the Local prompt from the
# text, the reference, its transcript and the language only (tts_adapters/moss_tts.py:337-385);
# `extra_params` reach the stage sampler's extra_args, not the prompt (serving_speech.py:2014-2029).
DROPPED_SAMPLER = (
    "vllm-omni's speech request has no such field and drops it silently; its MOSS-TTS-Local audio sampler is "
    f"fixed at {AUDIO_SAMPLER_TEXT.replace('repetition_penalty', 'repetition penalty')} "
    "(model_executor/models/moss_tts/modeling_moss_tts_talker.py:1634-1654)"
)
DROPPED_PROMPT = (
    "vllm-omni's MOSS-TTS-Local prompt ignores it (only text, ref_audio, ref_text and language reach it: "
    "tts_adapters/moss_tts.py:337-385)"
)
DROPPED_INSTRUCTION = DROPPED_PROMPT + "; 'instructions' is read for MOSS-VoiceGenerator only (moss_tts.py:359-360)"

# Why an unseeded request's audio can vary there.
UNSEEDED_CAUSES = (
    "the deploy seed does not reach the residual sampler (vllm-omni 0.30.0 gives tts_local_seed to seeded "
    "requests only, entrypoints/openai/serving_speech.py:2036-2044, and an unseeded request's audio draws from "
    "the process-wide RNG, worker/gpu_model_runner.py:1968-1979)"
)
RETRY_CAUSE = (
    "or a retry with a random seed (vllm-omni retries an unseeded, non-streaming request without "
    "max_new_tokens once with a random seed when its adapter rejects the generated audio: "
    "entrypoints/openai/serving_speech.py:2632-2657; 0.30.0's MOSS adapter rejects none, tts_adapters/base.py:301-314)"
)
BATCH_ITEM_CAUSE = (
    "SpeechBatchItem has no seed field, entrypoints/openai/protocol/audio.py:446-463, and each item is "
    "merged into a speech request without one, serving_speech.py:2736-2765"
)

# What would make a server's bits independent of its batch: vLLM's batch-invariant mode (vLLM's
# docs/features/batch_invariance.md: VLLM_BATCH_INVARIANT=1, beta, NVIDIA compute capability 9.0+).
# vllm-omni 0.30.0 passes the variable on to vLLM (config/environment_variable_inventory.py:95) and
# reads it in its own layers only for LTX-2 (diffusion/models/ltx2/ltx2_phase_adapter.py:211-212).
BATCH_INVARIANT_ADVICE = (
    "batch-invariant kernels on the server would make the bits stable: vLLM's VLLM_BATCH_INVARIANT=1 (beta, "
    "NVIDIA GPUs of compute capability 9.0 or higher), which vllm-omni 0.30.0 passes on to vLLM "
    "(config/environment_variable_inventory.py:95) but reads in its own layers only for LTX-2 "
    "(diffusion/models/ltx2/ltx2_phase_adapter.py:211-212), so audit again with it set; or serve one request "
    "at a time; or judge the audio at --level speech"
)
