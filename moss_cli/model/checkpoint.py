"""Loading checkpoints in the Hugging Face layout: config.json + safetensors (+ tokenizer.json).

Only JSON and safetensors are read; nothing is unpickled and no code from the checkpoint runs.
Tensors are checked against the model built from config.json: a missing, unexpected or
mis-shaped tensor is a `CheckpointError` naming it. Tied tensors may be absent on disk.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
from safetensors import SafetensorError, safe_open

from ..errors import CheckpointError
from .config import CodecConfig, TalkerConfig
from .layers import StackedLinear

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise CheckpointError(f"no {path.name} ({what}) in this directory", file=path.parent)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CheckpointError(f"invalid JSON: {e.msg} (column {e.colno})", file=path, line=e.lineno) from None
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"cannot read: {e}", file=path) from None
    if not isinstance(data, dict):
        raise CheckpointError("expected a JSON object at the top level", file=path)
    return data


def checkpoint_dir(path: str | Path) -> Path:
    directory = Path(path).expanduser()
    if directory.is_file():
        raise CheckpointError("is a file, expected a checkpoint directory (config.json, weights)", file=directory)
    if not directory.is_dir():
        raise CheckpointError("checkpoint directory does not exist", file=directory)
    return directory


def read_talker_config(path: str | Path) -> TalkerConfig:
    """A talker checkpoint's config.json, checked, without loading any weights."""
    file = checkpoint_dir(path) / "config.json"
    return TalkerConfig.from_dict(read_json(file, "model config"), str(file))


def read_codec_config(path: str | Path) -> CodecConfig:
    """An audio tokenizer checkpoint's config.json, checked, without loading any weights."""
    file = checkpoint_dir(path) / "config.json"
    return CodecConfig.from_dict(read_json(file, "model config"), str(file))


def tensor_files(directory: Path) -> dict[str, Path]:
    """Map every stored tensor name to its safetensors file (single file or sharded index)."""
    index = directory / INDEX_FILE
    if index.is_file():
        weight_map = read_json(index, "shard index").get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError("missing or empty 'weight_map'", file=index, field="weight_map")
        files = {}
        for name, shard in weight_map.items():
            shard_path = directory / str(shard)
            if Path(str(shard)).name != str(shard) or not shard_path.is_file():
                raise CheckpointError(f"shard {shard!r} listed for tensor {name!r} does not exist", file=index)
            files[name] = shard_path
        return files
    single = directory / SINGLE_FILE
    if single.is_file():
        return {name: single for name in _keys_of(single)}
    pickled = sorted(p.name for p in directory.glob("*.bin")) + sorted(p.name for p in directory.glob("*.pt"))
    hint = (
        f" (found {', '.join(pickled)}: pickled weights are never loaded; convert them to safetensors)"
        if pickled
        else ""
    )
    raise CheckpointError(f"no {SINGLE_FILE} or {INDEX_FILE}{hint}", file=directory)


def _keys_of(path: Path) -> list[str]:
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            return list(f.keys())
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"not a readable safetensors file ({e})", file=path) from None


def stored_layout(model: nn.Module) -> dict[str, tuple[str, int, tuple[int, ...]]]:
    """How a checkpoint stores `model`'s tensors, in the model's order: each stored name -> (the
    model's tensor it fills, its first row there, its shape). A `StackedLinear` is stored as its
    parts, apart (as the reference releases store them); every other tensor as itself."""
    parts: dict[str, list[tuple[str, int]]] = {}  # a stacked tensor's name -> its parts' (name, rows)
    for prefix, module in model.named_modules():
        if isinstance(module, StackedLinear):
            parent = prefix.rpartition(".")[0]
            for kind in ("weight", "bias"):
                parts[f"{prefix}.{kind}"] = [
                    (f"{parent}.{part}.{kind}".lstrip("."), rows) for part, rows in module.parts
                ]
    layout = {}
    for name, tensor in model.state_dict().items():
        if name not in parts:
            layout[name] = (name, 0, tuple(tensor.shape))
            continue
        row = 0
        for part, rows in parts[name]:
            layout[part] = (name, row, (rows, *tensor.shape[1:]))
            row += rows
    return layout


def load_weights(
    model: nn.Module,
    directory: Path,
    *,
    device: torch.device,
    dtype: torch.dtype,
    tied: dict[str, str] | None = None,
    rename: Callable[[str], str] = lambda k: k,
    float32_params: Callable[[str], bool] = lambda k: False,
    copy: bool = False,
) -> None:
    """Fill `model` (built on the meta device) with the checkpoint's tensors, checked by name and shape.

    By default the tensors map the files (no copy). `copy` reads each into memory of its own
    instead, for a caller that replaces them soon (packed weights): a mapped file's pages, once
    read, count in this process's resident memory for as long as the mapping lives."""
    tied = tied or {}
    layout = stored_layout(model)
    expected = {name: shape for name, (_, _, shape) in layout.items()}
    stored = tensor_files(directory)
    by_name: dict[str, tuple[str, Path]] = {}
    unexpected = []
    for original, path in stored.items():
        name = rename(original)
        if name in expected:
            by_name[name] = (original, path)
        elif name not in tied:
            unexpected.append(original)
    if unexpected:
        raise CheckpointError(
            f"unexpected tensor(s) not used by this model config: {_some(unexpected)}",
            file=directory,
            field=unexpected[0],
        )
    missing = [name for name in expected if name not in by_name]
    if missing:
        raise CheckpointError(f"missing tensor(s): {_some(missing)}", file=directory, field=missing[0])

    state: dict[str, torch.Tensor] = {}
    wholes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    by_file: dict[Path, list[str]] = {}
    for name, (_, path) in by_name.items():
        by_file.setdefault(path, []).append(name)
    for path, names in by_file.items():
        try:
            with safe_open(str(path), framework="pt", device="cpu") as f, open(path, "rb") as raw:
                header = _header(raw) if copy else {}
                for name in names:
                    original = by_name[name][0]
                    shape = tuple(f.get_slice(original).get_shape())
                    if shape != expected[name]:
                        raise CheckpointError(
                            f"tensor {original!r} has shape {list(shape)}, but config.json implies "
                            f"{list(expected[name])}",
                            file=path,
                            field=original,
                        )
                    tensor = _read_copy(raw, header, original) if copy else f.get_tensor(original)
                    whole, row, _ = layout[name]
                    target = torch.float32 if float32_params(whole) else dtype
                    tensor = tensor.to(device=device, dtype=target if tensor.is_floating_point() else tensor.dtype)
                    if whole == name:
                        state[name] = tensor
                        continue
                    if whole not in state:  # a stacked tensor, filled part by part
                        state[whole] = torch.empty(wholes[whole], device=device, dtype=tensor.dtype)
                    state[whole][row : row + tensor.shape[0]] = tensor
        except (SafetensorError, OSError) as e:
            raise CheckpointError(f"cannot read tensors (truncated or corrupt file?): {e}", file=path) from None
    model.load_state_dict(state, strict=True, assign=True)


_DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "I32": torch.int32,
    "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
}  # fmt: skip


def _header(raw) -> dict:
    """A safetensors file's header (8-byte length, then JSON), with where its data starts."""
    size = int.from_bytes(raw.read(8), "little")
    header = json.loads(raw.read(size))
    header["__data_start__"] = 8 + size
    return header


def _read_copy(raw, header: dict, name: str) -> torch.Tensor:
    entry = header[name]
    begin, end = entry["data_offsets"]
    dtype = _DTYPES.get(entry["dtype"])
    if dtype is None:
        raise SafetensorError(f"unsupported dtype {entry['dtype']} of {name!r}")
    if end == begin:
        return torch.empty(entry["shape"], dtype=dtype)
    raw.seek(header["__data_start__"] + begin)
    buffer = bytearray(end - begin)
    if raw.readinto(buffer) != len(buffer):
        raise SafetensorError(f"{name!r} is cut short")
    return torch.frombuffer(buffer, dtype=dtype).reshape(entry["shape"])


def _some(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def load_tokenizer(directory: Path, special_ids: dict[str, int]):
    """The checkpoint's tokenizer.json (Qwen BPE); the config's special token ids must exist in it."""
    from tokenizers import Tokenizer

    path = directory / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError("no tokenizer.json: needed to build prompts from text", file=directory)
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as e:  # the tokenizers library raises a plain Exception on parse errors
        raise CheckpointError(f"cannot load tokenizer: {e}", file=path) from None
    for name, token_id in special_ids.items():
        if tokenizer.id_to_token(token_id) is None:
            raise CheckpointError(
                f"config.json names token id {token_id} for {name}, but the tokenizer has no such token",
                file=path,
                field=name,
            )
    return tokenizer
