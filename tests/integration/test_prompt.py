"""Prompt rows built from the chat / <user_inst> template."""

import torch

from moss_cli.model.prompt import left_pad


def _text(talker, rows):
    return talker.prompts.tokenizer.decode(rows[:, 0].tolist(), skip_special_tokens=False)


def test_prompt_follows_the_user_inst_template_with_none_for_empty_fields(talker32):
    rows = talker32.prompt("Hello there.", language="en", tokens=50, instruction="  ")
    expected = (
        "<|im_start|>user\n<user_inst>\n- Reference(s):\nNone\n- Instruction:\nNone\n- Tokens:\n50\n"
        "- Quality:\nNone\n- Sound Event:\nNone\n- Ambient Sound:\nNone\n- Language:\nen\n- Text:\n"
        "Hello there.\n</user_inst><|im_end|>\n<|im_start|>assistant\n<|audio_start|>"
    )
    assert _text(talker32, rows) == expected
    cfg = talker32.config
    assert rows.shape[1] == cfg.n_vq + 1
    assert torch.all(rows[:, 1:] == cfg.audio_pad_code)
    assert rows[-1, 0] == cfg.audio_start_token_id and rows[0, 0] == cfg.im_start_token_id


def test_template_pieces_are_tokenised_separately(talker32):
    builder = talker32.prompts
    rows = talker32.prompt("Hi")
    ids = rows[:, 0].tolist()
    cfg = talker32.config
    head = [cfg.im_start_token_id] + builder.encode("user\n") + builder.encode("<user_inst>\n- Reference(s):\n")
    assert ids[: len(head)] == head
    assert ids[len(head) : len(head) + len(builder.encode("None"))] == builder.encode("None")


def test_reference_codes_become_user_slot_rows_between_audio_start_and_end(talker32):
    cfg = talker32.config
    ref = torch.arange(3 * cfg.n_vq).reshape(3, cfg.n_vq) % cfg.audio_vocab_size
    rows = talker32.prompt("Clone this voice.", references=[ref])
    head = 1 + len(talker32.prompts.encode("user\n")) + len(talker32.prompts.encode("<user_inst>\n- Reference(s):\n"))
    assert rows[head, 0] == cfg.audio_start_token_id and torch.all(rows[head, 1:] == cfg.audio_pad_code)
    assert torch.all(rows[head + 1 : head + 4, 0] == cfg.audio_user_slot_token_id)
    assert torch.equal(rows[head + 1 : head + 4, 1:], ref)
    assert rows[head + 4, 0] == cfg.audio_end_token_id
    after = _text(talker32, rows[head + 5 :])
    assert after.startswith("\n- Instruction:\nNone") and after.endswith("<|audio_start|>")
    assert "None\n- Instruction" not in _text(talker32, rows)  # no "None" placeholder with a reference


def test_left_pad_puts_pad_token_and_pad_codes_before_shorter_prompts(talker32):
    cfg = talker32.config
    a, b = talker32.prompt("short"), talker32.prompt("a somewhat longer prompt")
    ids, mask = left_pad([a, b], cfg)
    gap = b.shape[0] - a.shape[0]
    assert ids.shape == (2, b.shape[0], cfg.n_vq + 1)
    assert torch.all(ids[0, :gap, 0] == cfg.pad_token_id) and torch.all(ids[0, :gap, 1:] == cfg.audio_pad_code)
    assert torch.equal(ids[0, gap:], a) and torch.equal(ids[1], b)
    assert mask[0].tolist() == [False] * gap + [True] * a.shape[0] and mask[1].all()


def test_template_lengths_are_remembered_for_a_bounded_number_of_field_values(talker32, monkeypatch):
    from moss_cli.model import prompt

    monkeypatch.setattr(prompt, "TEMPLATE_LENGTHS_KEPT", 3)
    builder = prompt.PromptBuilder(talker32.prompts.tokenizer, talker32.config)
    for i in range(5):  # a server meets a new instruction with every request
        fields = {"instruction": f"voice number {i}"}
        assert builder.length("Hello.", **fields) == builder.build("Hello.", **fields).shape[0]
    assert len(builder._template_lengths) == 3
