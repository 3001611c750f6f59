"""max_token_bytes: the most text bytes one token can stand for, a free lower bound on token counts."""

import math

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from moss_cli.assets import TINY_TALKER
from moss_cli.model.prompt import max_token_bytes


def _byte_level_bpe(merges: list[tuple[str, str]]) -> Tokenizer:
    """A byte-level BPE over the 256 byte characters plus the given merges."""
    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def test_byte_level_tokens_count_the_bytes_they_stand_for_not_their_spelling():
    # "你" is three bytes, spelled with three byte characters; "ĠĠ" is two spaces, spelled with two
    # characters that are two UTF-8 bytes each.
    tokenizer = _byte_level_bpe([("ä", "½"), ("ä½", "ł"), ("Ġ", "Ġ")])
    assert tokenizer.encode("你").tokens == ["ä½ł"] and tokenizer.encode("  ").tokens == ["ĠĠ"]
    assert max_token_bytes(tokenizer) == 3


def test_added_tokens_count_as_they_match_anywhere_in_a_text():
    tokenizer = _byte_level_bpe([("Ġ", "Ġ")])
    tokenizer.add_special_tokens(["<|a_rather_long_special|>"])
    assert tokenizer.encode("x<|a_rather_long_special|>").tokens[-1] == "<|a_rather_long_special|>"
    assert max_token_bytes(tokenizer) == len("<|a_rather_long_special|>")


def test_a_vocabulary_that_is_not_byte_level_counts_utf8_bytes():
    tokenizer = Tokenizer(models.WordLevel({"héllo": 0, "ab": 1, "[UNK]": 2}, unk_token="[UNK]"))
    assert max_token_bytes(tokenizer) == len("héllo".encode())  # 6


@pytest.mark.parametrize(
    "text",
    [
        "Hello there, this is a test.",
        "你好，世界！" * 5,
        "  spaced   out  ",
        "<|im_start|>user\nmixed <|audio_start|> specials",
        "ünïcödé ✓ 🎉" * 3,
    ],
)
def test_the_tiny_tokenizer_never_needs_fewer_tokens_than_the_bound(text):
    tokenizer = Tokenizer.from_file(str(TINY_TALKER / "tokenizer.json"))
    bound = max_token_bytes(tokenizer)
    encoding = tokenizer.encode(text, add_special_tokens=False)
    normalized = tokenizer.normalizer.normalize_str(text)
    assert len(encoding.ids) >= math.ceil(len(normalized.encode()) / bound)
