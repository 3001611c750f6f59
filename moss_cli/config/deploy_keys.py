"""The keys vllm-omni 0.30.0 knows in a deploy file, for refusing typos (`sed:` for `seed:`,
`max_num_sqs:`) that moss would otherwise read as "not set".

vllm-omni paths are those of its 0.30.0 wheel's `vllm_omni` package. A stage's keys other than
`stage_id`, `runtime`, `engine_args`, the connectors and the *_params become engine arguments
(`config/stage_config.py:637-683`, `_parse_stage_deploy`: the StageDeployConfig fields by name, every
other key into `engine_extras`); the server's stage set-up refuses an engine argument that no config
owns (`config/omni_config.py:1299-1327`, "has explicit engine argument(s) with no structured config
owner"). `default_sampling_params` becomes vLLM's `SamplingParams(**...)` for an LLM stage, and both
stages of MOSS-TTS-Local are LLM stages (`model_executor/models/moss_tts/pipeline.py:100,117`), so an
unknown key there is a TypeError at stage start (`engine/stage_init_utils.py:636,728`). A diffusion
stage's `OmniDiffusionSamplingParams` knows other keys; moss accepts those only in a file that is not
MOSS-TTS-Local's (--allow-foreign-deploy), whose stage kinds it cannot know.
"""

from __future__ import annotations


def _names(*texts: str) -> frozenset[str]:
    return frozenset(name for text in texts for name in text.split())


# StageDeployConfig (config/stage_config.py:384-515).
_STAGE_DEPLOY_FIELDS = """
    stage_id devices num_replicas env async_chunk output_connectors input_connectors default_sampling_params
    default_pooling_params subtalker_sampling_params silence_ban_frames tensor_parallel_size enable_expert_parallel
    gpu_memory_utilization max_num_seqs max_num_batched_tokens max_model_len enforce_eager async_scheduling
    disable_hybrid_kv_cache_manager mm_processor_cache_gb mamba_ssm_cache_dtype compilation_config profiler_config
    skip_mm_profiling enable_flashinfer_autotune config_format load_format tokenizer_mode ulysses_degree
    ulysses_mode ulysses_a2a_permute ring_degree allgather_degree sequence_parallel_size cfg_parallel_size
    vae_patch_parallel_size vae_parallel_mode text_encoder_tp_size use_hsdp hsdp_shard_size hsdp_replicate_size
    model_class_name diffusion_load_format lora_path lora_backend lora_scale diffusers_load_kwargs
    diffusers_call_kwargs diffusion_quantization_config diffusion_attention_backend fastvideo_vsa_topk
    diffusion_attention_config diffusion_compile_granularity diffusion_compile_dynamic fa_deterministic
    cache_backend cache_config video_output_transport enable_cache_dit_summary step_execution vae_use_slicing
    vae_use_tiling vae_fast_path boundary_ratio flow_shift diffusion_kv_cache_dtype diffusion_kv_cache_skip_steps
    diffusion_kv_cache_skip_layers auxiliary_text_encoder enable_multithread_weight_load
    enable_broadcast_weight_load num_weight_load_threads diffusion_offload_config enable_cpu_offload
    enable_layerwise_offload enable_distributed_layerwise_offload dlo_use_allgather dlo_resident_layers
    host_weight_runtime_mode host_weight_runtime_root dlo_host_registration_limit_gib
    enable_diffusion_pipeline_profiler max_generated_image_size tts_max_instructions_length engine_extras
"""
# OmniEngineArgs' own fields (engine/arg_utils.py:142-454).
_OMNI_ENGINE_ARGS = """
    stage_id model_stage model_arch engine_output_type final_output hf_config_name
    custom_process_next_stage_input_func requires_full_payload_input stage_connector_spec subtalker_sampling_params
    silence_ban_frames async_chunk session_mode retains_state_across_chunks use_v2_model_runner
    supports_native_mrv2_data_plane active_stream_window duplex_max_sessions omni_kv_config quantization_config
    force_cutlass_fp8 worker_type pooling_output_decoder task_type worker_cls enable_sleep_mode omni
    request_batch_max_wait_ms fa_deterministic text_encoder_tp_size omni_master_address omni_master_port
    omni_dp_size_local omni_lb_policy omni_heartbeat_timeout output_modalities log_stats custom_pipeline_args
    has_sampling_extra_args sampling_extra_args_keys
"""
# The engine fields vllm-omni's typed stage configs own (config/omni_config.py:106-277, the
# *EngineOverrides TypedDicts).
_TYPED_ENGINE_FIELDS = """
    quantization_config quantization model model_arch model_subdir tokenizer_subdir revision tokenizer_revision
    code_revision seed logits_processors trust_remote_code dtype attention_backend attention_config moe_backend
    hf_overrides limit_mm_per_prompt interleave_mm_strings media_io_kwargs final_output active_stream_window
    use_v2_model_runner supports_native_mrv2_data_plane enable_sleep_mode subtalker_sampling_params
    silence_ban_frames has_sampling_extra_args custom_voice_dir task_type codec_frame_rate_hz enforce_eager
    max_cudagraph_capture_size enable_flashinfer_autotune enable_multithread_weight_load
    enable_broadcast_weight_load num_weight_load_threads disable_autocast served_model_name allowed_local_media_path
    allowed_media_domains max_logprobs logprobs_mode mm_processor_kwargs mm_processor_cache_type hf_token
    hf_config_path generation_config override_generation_config enable_prompt_embeds runner pooling_output_decoder
    tokenizer download_dir skip_tokenizer_init load_format tokenizer_mode config_format skip_mm_profiling
    kv_cache_memory_bytes gpu_memory_utilization enable_prefix_caching disable_hybrid_kv_cache_manager
    mm_processor_cache_gb mamba_ssm_cache_dtype max_num_seqs max_num_batched_tokens max_model_len
    enable_chunked_prefill async_scheduling additional_config distributed_executor_backend worker_cls devices
    num_replicas env num_gpus log_level log_stats pipeline_parallel_size data_parallel_size tensor_parallel_size
    sequence_parallel_size ulysses_degree ring_degree allgather_degree ulysses_mode ulysses_a2a_permute
    cfg_parallel_size vae_patch_parallel_size vae_parallel_mode text_encoder_tp_size use_hsdp mask_sp_padding
    hsdp_shard_size hsdp_replicate_size enable_expert_parallel omni_kv_config kv_transfer_config
"""
# OmniDiffusionConfig (diffusion/data.py:817-1763): the engine fields of a diffusion stage.
_DIFFUSION_CONFIG_FIELDS = """
    stage_id model model_class_name task_type dtype model_config tf_model_config diffusion_attention_config
    fa_deterministic cache_strategy parallel_config cache_backend cache_config video_output_transport
    enable_cache_dit_summary enable_prompt_embed_cache prompt_embed_cache_size enable_session_state_manager
    distributed_executor_backend nccl_port engine_backend diffusion_kv_mode enable_prefix_caching
    diffusion_kv_max_rows_per_request diffusion_model_runner_cls trust_remote_code revision num_gpus dist_timeout
    lora_path lora_scale lora_backend max_cpu_loras output_type diffusion_offload_config enable_cpu_offload
    enable_layerwise_offload enable_distributed_layerwise_offload dlo_use_allgather dlo_resident_layers
    host_weight_runtime_mode host_weight_runtime_root dlo_host_registration_limit_gib pin_cpu_memory vae_use_slicing
    vae_use_tiling vae_fast_path mask_strategy_file_path skip_time_steps moe_backend enforce_eager
    diffusion_compile_granularity diffusion_compile_dynamic enable_multithread_weight_load
    enable_broadcast_weight_load num_weight_load_threads enable_sleep_mode disable_autocast VSA_sparsity
    moba_config_path master_port worker_extension_cls custom_pipeline_args diffusion_load_format
    diffusers_load_kwargs diffusers_call_kwargs diffusers_pipeline_cls host port scheduler_port
    enable_stage_verification prompt_file_path model_paths model_loaded override_transformer_cls_name boundary_ratio
    flow_shift supports_multimodal_inputs max_multimodal_image_inputs supports_mixed_reference_inputs log_level
    omni_kv_config kv_transfer_config additional_config profiler_config cfg_kv_collect_func stage_input_payload_keys
    stage_output_payload_keys quantization_config quantization_config_is_auto_detected force_cutlass_fp8
    diffusion_kv_cache_dtype diffusion_kv_cache_skip_steps diffusion_kv_cache_skip_layers
    diffusion_kv_cache_skip_step_indices diffusion_kv_cache_skip_layer_indices enable_diffusion_pipeline_profiler
    step_execution streaming_output max_num_seqs kv_cache_memory_bytes gpu_memory_utilization max_num_batched_tokens
    max_model_len request_batch_max_wait_ms extras
"""
# vLLM's EngineArgs fields (vllm/engine/arg_utils.py, `class EngineArgs`, vLLM commit 99d7eb5d; vllm-omni
# 0.30.0 pins no vLLM version), which OmniEngineArgs extends and the typed configs map onto.
_VLLM_ENGINE_ARGS = """
    model served_model_name tokenizer hf_config_path runner convert task skip_tokenizer_init enable_prompt_embeds
    tokenizer_mode trust_remote_code allowed_local_media_path allowed_media_domains download_dir
    safetensors_load_strategy load_format config_format dtype kv_cache_dtype seed max_model_len cuda_graph_sizes
    cudagraph_capture_sizes max_cudagraph_capture_size distributed_executor_backend pipeline_parallel_size
    tensor_parallel_size decode_context_parallel_size data_parallel_size data_parallel_rank data_parallel_start_rank
    data_parallel_size_local data_parallel_address data_parallel_rpc_port data_parallel_hybrid_lb
    data_parallel_backend enable_expert_parallel all2all_backend enable_dbo dbo_decode_token_threshold
    dbo_prefill_token_threshold disable_nccl_for_dp_synchronization eplb_config enable_eplb
    expert_placement_strategy num_redundant_experts eplb_window_size eplb_step_interval eplb_log_balancedness
    max_parallel_loading_workers block_size enable_prefix_caching prefix_caching_hash_algo disable_sliding_window
    disable_cascade_attn swap_space cpu_offload_gb gpu_memory_utilization kv_cache_memory_bytes
    max_num_batched_tokens max_num_partial_prefills max_long_partial_prefills long_prefill_token_threshold
    max_num_seqs max_logprobs logprobs_mode disable_log_stats aggregate_engine_logging revision code_revision
    rope_scaling rope_theta hf_token hf_overrides tokenizer_revision quantization enforce_eager
    disable_custom_all_reduce limit_mm_per_prompt enable_mm_embeds interleave_mm_strings media_io_kwargs
    mm_processor_kwargs disable_mm_preprocessor_cache mm_processor_cache_gb mm_processor_cache_type
    mm_shm_cache_max_object_size_mb mm_encoder_tp_mode mm_encoder_attn_backend io_processor_plugin skip_mm_profiling
    video_pruning_rate enable_lora max_loras max_lora_rank default_mm_loras fully_sharded_loras max_cpu_loras
    lora_dtype lora_extra_vocab_size ray_workers_use_nsight num_gpu_blocks_override num_lookahead_slots
    model_loader_extra_config ignore_patterns enable_chunked_prefill disable_chunked_mm_input
    disable_hybrid_kv_cache_manager structured_outputs_config reasoning_parser guided_decoding_backend
    guided_decoding_disable_fallback guided_decoding_disable_any_whitespace
    guided_decoding_disable_additional_properties logits_processor_pattern speculative_config
    show_hidden_metrics_for_version otlp_traces_endpoint collect_detailed_traces scheduling_policy scheduler_cls
    external_parameters pooler_config override_pooler_config compilation_config worker_cls worker_extension_cls
    kv_transfer_config kv_events_config generation_config enable_sleep_mode override_generation_config model_impl
    override_attention_dtype calculate_kv_scales mamba_cache_dtype mamba_ssm_cache_dtype mamba_block_size
    additional_config use_tqdm_on_load pt_load_map_location enable_multimodal_encoder_data_parallel
    logits_processors async_scheduling kv_sharing_fast_prefill
"""
# Engine arguments of the newer vLLM that vllm-omni 0.30.0's own deploy files set
# (deploy/mammoth_moda2_fp8_kv.yaml:10).
_NEWER_VLLM_ENGINE_ARGS = "kv_cache_dtype_skip_layers"
# Stage metadata older deploy files still carry (config/omni_config.py:90-97).
_LEGACY_STAGE_METADATA = "final_output final_output_type is_comprehension"
# The nested sections of a stage (config/stage_config.py:605-620, _STAGE_RESERVED_KEYS).
_STAGE_SECTIONS = "runtime engine_args engine_extras"

# What a stage, its `engine_args:` or `engine_extras:`, or a platform's stage entry may set.
STAGE_KEYS = _names(
    _STAGE_DEPLOY_FIELDS,
    _OMNI_ENGINE_ARGS,
    _TYPED_ENGINE_FIELDS,
    _DIFFUSION_CONFIG_FIELDS,
    _VLLM_ENGINE_ARGS,
    _NEWER_VLLM_ENGINE_ARGS,
    _LEGACY_STAGE_METADATA,
    _STAGE_SECTIONS,
)

# A stage's `runtime:`; vllm-omni reads nothing else there (config/stage_config.py:642-645).
RUNTIME_KEYS = _names("devices num_replicas env")

# vLLM's SamplingParams fields (vllm/sampling_params.py, `class SamplingParams`, vLLM commit 00388f65).
SAMPLING_KEYS = _names(
    """
    n presence_penalty frequency_penalty repetition_penalty temperature top_p top_k min_p seed stop stop_token_ids
    ignore_eos max_tokens min_tokens logprobs prompt_logprobs prompt_logprob_token_ids prompt_logprob_start
    logprob_token_ids flat_logprobs detokenize skip_special_tokens spaces_between_special_tokens
    include_stop_str_in_output output_kind stream_interval skip_clone structured_outputs logit_bias
    allowed_token_ids extra_args bad_words skip_reading_prefix_cache thinking_token_budget repetition_detection
    routed_experts_prompt_start trace_decode_token_ids
"""
)
# OmniDiffusionSamplingParams (inputs/data.py:204-419): a diffusion stage's default_sampling_params.
DIFFUSION_SAMPLING_KEYS = _names(
    """
    max_sequence_length prompt_template do_classifier_free_guidance output_type quality num_outputs_per_prompt seed
    generator generator_device layers cfg_normalize use_en_prompt resolution is_prompt_processed latents
    audio_latents raw_latent_shape noise_pred image_latent height_latents width_latents num_frames
    num_frames_round_down height width fps frame_rate height_not_provided width_not_provided
    enable_frame_interpolation frame_interpolation_exp frame_interpolation_scale frame_interpolation_model_path
    timesteps timestep step_index boundary_ratio num_inference_steps guidance_scale guidance_scale_provided
    guidance_scale_2 guidance_scale_2_provided guidance_rescale strength decode_timestep decode_noise_scale eta
    sigmas true_cfg_scale n_tokens extra_step_kwargs past_key_values kv_metadata need_kv_receive
    cfg_text_past_key_values cfg_img_past_key_values cfg_text_kv_metadata cfg_img_kv_metadata cfg_kv_request_ids
    cfg_active_branch cfg_branch_roles cfg_branch_past_key_values cfg_branch_kv_metadata modules
    return_trajectory_latents return_trajectory_decoded trajectory_timesteps trajectory_latents extra_args
    save_output return_frames lora_request lora_scale STA_param is_cfg_negative mask_search_final_result_pos
    mask_search_final_result_neg VSA_sparsity profile num_profiled_timesteps debug output emit_request_lifecycle
"""
)

# DeployConfig's fields (config/stage_config.py:568-602) and base_config (config/stage_config.py:763-789):
# load_deploy_config reads no other top-level key (config/stage_config.py:792-834).
TOP_KEYS = _names(
    """
    async_chunk session_mode model_runner active_stream_window duplex_session connectors edges stages platforms
    pipeline trust_remote_code distributed_executor_backend dtype quantization enable_prefix_caching
    enable_chunked_prefill data_parallel_size pipeline_parallel_size custom_voice_dir
""",
    "base_config",
)

# A platform section: its model runner and its stage entries (config/stage_config.py:859-926).
PLATFORM_KEYS = _names("model_runner stages")
