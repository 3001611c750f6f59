"""Loading checkpoint directories in the release layout, and the errors for broken ones."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

import moss_cli
from moss_cli.errors import CheckpointError, ConfigError


def _tensors(directory):
    return load_file(str(directory / "model.safetensors"))


def _save(directory, tensors):
    save_file(tensors, str(directory / "model.safetensors"))


def test_release_layout_with_nested_configs_and_absent_tied_tensors_loads(talker_dir):
    stored = _tensors(talker_dir)
    assert "text_lm_head.weight" not in stored and "audio_lm_heads.0.weight" not in stored
    config = json.loads((talker_dir / "config.json").read_text())
    assert {"qwen3_config", "language_config", "gpt2_config", "architectures", "transformers_version"} <= set(config)
    talker = moss_cli.load_talker(talker_dir, device="cpu", dtype="float32")
    assert talker.config.n_vq == 6 and talker.config.backbone.num_layers == 2
    torch.testing.assert_close(
        talker.model.audio_logits(0, torch.eye(64)[:1]), stored["audio_embeddings.0.weight"][:, 0][None]
    )


def test_tied_tensors_present_on_disk_are_accepted(talker_dir):
    tensors = _tensors(talker_dir)
    tensors["text_lm_head.weight"] = tensors["transformer.embed_tokens.weight"].clone()
    tensors["audio_lm_heads.0.weight"] = tensors["audio_embeddings.0.weight"].clone()
    _save(talker_dir, tensors)
    moss_cli.load_talker(talker_dir, device="cpu")


def test_missing_tensor_is_named(talker_dir):
    tensors = _tensors(talker_dir)
    del tensors["transformer.layers.1.mlp.up_proj.weight"]
    _save(talker_dir, tensors)
    with pytest.raises(CheckpointError, match=r"missing tensor.*transformer\.layers\.1\.mlp\.up_proj\.weight"):
        moss_cli.load_talker(talker_dir, device="cpu")


def test_unexpected_tensor_is_named(talker_dir):
    tensors = _tensors(talker_dir)
    tensors["transformer.layers.7.extra.weight"] = torch.zeros(2)
    _save(talker_dir, tensors)
    with pytest.raises(CheckpointError, match=r"unexpected tensor.*transformer\.layers\.7\.extra\.weight"):
        moss_cli.load_talker(talker_dir, device="cpu")


def test_shape_mismatch_names_the_tensor_and_both_shapes(talker_dir):
    tensors = _tensors(talker_dir)
    tensors["transformer.norm.weight"] = torch.ones(32)
    _save(talker_dir, tensors)
    with pytest.raises(CheckpointError, match=r"transformer\.norm\.weight.*\[32\].*\[64\]"):
        moss_cli.load_talker(talker_dir, device="cpu")


def test_sharded_checkpoint_with_index_loads_the_same_weights(talker_dir):
    whole = moss_cli.load_talker(talker_dir, device="cpu", dtype="float32", pack=False)
    tensors = _tensors(talker_dir)
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[: len(names) // 2],
        "model-00002-of-00002.safetensors": names[len(names) // 2 :],
    }
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(talker_dir / shard))
    (talker_dir / "model.safetensors").unlink()
    index = {"metadata": {"total_size": 0}, "weight_map": {k: s for s, keys in shards.items() for k in keys}}
    (talker_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    sharded = moss_cli.load_talker(talker_dir, device="cpu", dtype="float32", pack=False)
    for name, tensor in whole.model.state_dict().items():
        assert torch.equal(sharded.model.state_dict()[name], tensor), name


def test_index_naming_a_missing_shard_is_an_error(talker_dir):
    (talker_dir / "model.safetensors").unlink()
    (talker_dir / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "nope.safetensors"}}))
    with pytest.raises(CheckpointError, match="nope.safetensors"):
        moss_cli.load_talker(talker_dir, device="cpu")


def test_directory_without_config_json_is_an_error(talker_dir):
    (talker_dir / "config.json").unlink()
    with pytest.raises(CheckpointError, match="no config.json"):
        moss_cli.load_talker(talker_dir, device="cpu")


def test_invalid_json_reports_the_line(talker_dir):
    (talker_dir / "config.json").write_text('{\n  "n_vq": 6,\n  oops\n}')
    with pytest.raises(CheckpointError) as err:
        moss_cli.load_talker(talker_dir, device="cpu")
    assert err.value.line == 3


def test_pickled_weights_are_never_loaded(talker_dir):
    (talker_dir / "model.safetensors").unlink()
    (talker_dir / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    with pytest.raises(CheckpointError, match="pickled weights are never loaded"):
        moss_cli.load_talker(talker_dir, device="cpu")


def test_truncated_safetensors_is_a_clear_error(talker_dir):
    path = talker_dir / "model.safetensors"
    path.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(CheckpointError, match="model.safetensors"):
        moss_cli.load_talker(talker_dir, device="cpu")


def test_keys_written_by_other_tools_are_ignored(talker_dir):
    config = json.loads((talker_dir / "config.json").read_text())
    config.update(
        {
            "auto_map": {"AutoModel": "modeling_moss_tts.MossTTSLocalModel"},
            "torch_dtype": "bfloat16",
            "use_cache": True,
            "_name_or_path": "somewhere",
        }
    )
    (talker_dir / "config.json").write_text(json.dumps(config))
    moss_cli.load_talker(talker_dir, device="cpu")


def test_wrong_model_type_is_a_config_error(talker_dir):
    config = json.loads((talker_dir / "config.json").read_text())
    config["model_type"] = "moss_tts_delay"
    (talker_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="model_type"):
        moss_cli.load_talker(talker_dir, device="cpu")


def test_raw_id_generation_needs_no_tokenizer_but_prompts_do(talker_dir, talker32):
    (talker_dir / "tokenizer.json").unlink()
    talker = moss_cli.load_talker(talker_dir, device="cpu", dtype="float32")
    rows = talker32.prompt("built with the shipped tokenizer")
    out = talker.generate(*talker.batch([rows]), max_new_frames=2, do_sample=False)
    assert out[0].shape == (2, 6)
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        talker.prompt("needs a tokenizer")


def test_tokenizer_without_the_configured_special_tokens_is_an_error(talker_dir):
    config = json.loads((talker_dir / "config.json").read_text())
    config["audio_end_token_id"] = 270  # inside the model vocab, but not a tokenizer token
    (talker_dir / "config.json").write_text(json.dumps(config))
    talker = moss_cli.load_talker(talker_dir, device="cpu")
    with pytest.raises(CheckpointError, match="audio_end_token_id"):
        talker.prompt("x")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_every_supported_dtype_loads(dtype):
    from moss_cli.assets import TINY_CODEC, TINY_TALKER

    talker = moss_cli.load_talker(TINY_TALKER, device="cpu", dtype=dtype)
    assert talker.model.transformer.norm.weight.dtype == dtype
    codec = moss_cli.load_codec(TINY_CODEC, device="cpu", dtype=dtype)
    assert codec.quantizer.quantizers[0].codebook.weight.dtype == torch.float32  # quantizer math stays fp32
    assert codec.decode(torch.zeros(6, 1, 2, dtype=torch.long)).dtype == torch.float32


def test_auto_device_picks_cpu_without_accelerators():
    from moss_cli.device import resolve_device, resolve_dtype

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert resolve_device("auto").type == "cpu"
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    with pytest.raises(moss_cli.MossError, match="cuda"):
        resolve_device("cuda")


def test_weights_read_into_memory_equal_the_mapped_ones(talker_dir):
    """Weights about to be packed are read as copies (a mapped file's pages would stay resident)."""
    from moss_cli.model.checkpoint import load_weights, read_talker_config
    from moss_cli.model.talker import MossTTSLocal

    cfg = read_talker_config(talker_dir)
    models = {}
    for copy in (False, True):
        with torch.device("meta"):
            models[copy] = MossTTSLocal(cfg)
        load_weights(
            models[copy], talker_dir, device=torch.device("cpu"), dtype=torch.float32,
            tied=MossTTSLocal.tied_keys(cfg), copy=copy,
        )  # fmt: skip
    mapped, copied = models[False].state_dict(), models[True].state_dict()
    assert mapped.keys() == copied.keys()
    assert all(torch.equal(mapped[k], copied[k]) for k in mapped)


def test_a_truncated_file_read_as_copies_is_a_checkpoint_error(talker_dir):
    path = talker_dir / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-1000])
    with pytest.raises(CheckpointError, match="model.safetensors"):
        moss_cli.load_talker(talker_dir, device="cpu", dtype="float32", pack=True)


def test_projections_stored_apart_load_stacked_in_their_order(talker_dir):
    """The checkpoint keeps q/k/v and gate/up apart, as the reference does; the model computes each
    group as one product (`StackedLinear`), its weight their rows in order, and the layout the
    loader reads names exactly the checkpoint's tensors."""
    from moss_cli.model.checkpoint import stored_layout

    stored = _tensors(talker_dir)
    model = moss_cli.load_talker(talker_dir, device="cpu", dtype="float32", pack=False).model
    assert set(stored_layout(model)) == set(stored)
    layer = "transformer.layers.1"
    parts = [stored[f"{layer}.self_attn.{p}_proj.weight"] for p in "qkv"]
    assert torch.equal(model.transformer.layers[1].self_attn.qkv_proj.weight, torch.cat(parts))
    parts = [stored[f"{layer}.mlp.{p}_proj.weight"] for p in ("gate", "up")]
    assert torch.equal(model.transformer.layers[1].mlp.gate_up_proj.weight, torch.cat(parts))


def test_a_stored_part_of_the_wrong_shape_is_named(talker_dir):
    tensors = _tensors(talker_dir)
    name = "transformer.layers.0.self_attn.k_proj.weight"
    tensors[name] = tensors[name][:-1].clone()
    _save(talker_dir, tensors)
    with pytest.raises(CheckpointError, match=r"k_proj\.weight.*has shape"):
        moss_cli.load_talker(talker_dir, device="cpu")
