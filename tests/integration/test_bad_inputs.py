"""A corpus of bad inputs (tests/bad_inputs/): each one exits 2 with a message that names the
problem and where it is, prints no traceback, and leaves the output directory untouched."""

import json
import shutil
from pathlib import Path

import pytest
from cli_runs import write_rows  # tests/ is on sys.path
from typer.testing import CliRunner

from moss_cli.assets import TINY_CODEC, TINY_TALKER
from moss_cli.cli.app import app

CORPUS = Path(__file__).resolve().parents[1] / "bad_inputs"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GOOD = EXAMPLES / "lines.txt"

# (request file, expected fragments of the message; "!fragment": must not be in it)
REQUEST_CASES = [
    ("malformed.jsonl", ["malformed.jsonl:2", "invalid JSON"]),
    # The error is at the line's end: its column there, not "column 1" of the next line.
    ("cut-short.jsonl", ["cut-short.jsonl:2: invalid JSON: Expecting ',' delimiter (column 71)"]),
    ("not-an-object.jsonl", ["not-an-object.jsonl:1", "expected a JSON object"]),
    ("missing-text.jsonl", ["missing-text.jsonl:2 [text]", "missing 'text'"]),
    ("empty-text.jsonl", ["empty-text.jsonl:1 [text]", "empty"]),
    ("text-not-string.jsonl", ["text-not-string.jsonl:1 [text]", "must be a string"]),
    ("seed-bool.jsonl", ["seed-bool.jsonl:1 [seed]", "signed 64-bit"]),
    ("seed-overflow.jsonl", ["seed-overflow.jsonl:1 [seed]", "signed 64-bit"]),
    ("seed-string.jsonl", ["seed-string.jsonl:1 [seed]", "integer"]),
    ("frames-negative.jsonl", ["frames-negative.jsonl:1 [max_new_frames]", "[1, 1000000]"]),
    ("frames-absurd.jsonl", ["frames-absurd.jsonl:1 [max_new_frames]", "[1, 1000000]"]),
    ("frames-zero.jsonl", ["frames-zero.jsonl:1 [max_new_frames]", "[1, 1000000]"]),
    ("temperature-negative.jsonl", ["temperature-negative.jsonl:1 [audio_temperature]", ">= 0"]),
    ("top-p-range.jsonl", ["top-p-range.jsonl:1 [audio_top_p]", "(0, 1]"]),
    ("top-k-negative.jsonl", ["top-k-negative.jsonl:1 [audio_top_k]", ">= 0"]),
    (
        "dropped-temperature.jsonl",
        ["dropped-temperature.jsonl:1 [temperature]", "vllm-omni drops it", "'audio_temperature' overrides"],
    ),
    ("unknown-field.jsonl", ["unknown-field.jsonl:1 [langauge]", "did you mean 'language'"]),
    ("duplicate-id.jsonl", ["duplicate-id.jsonl:2 [id]", "duplicate id 'same'", "line 1"]),
    ("id-case-collision.jsonl", ["id-case-collision.jsonl:2 [id]", "'alpha'", "'Alpha'", "line 1", "case-insensitive"]),
    ("id-traversal.jsonl", ["id-traversal.jsonl:1 [id]", "not a safe file name", "no leading '.'"]),
    ("id-leading-dash.jsonl", ["id-leading-dash.jsonl:1 [id]", "ASCII letters, digits", "no leading '.', '_' or '-'"]),
    ("id-separator.jsonl", ["id-separator.jsonl:1 [id]", "not a safe file name"]),
    ("id-control.jsonl", ["id-control.jsonl:1 [id]", "not a safe file name"]),
    ("id-reserved.jsonl", ["id-reserved.jsonl:1 [id]", "reserved name"]),
    ("id-too-long.jsonl", ["id-too-long.jsonl:1 [id]", "at most 128"]),
    ("text-too-long.jsonl", ["text-too-long.jsonl:1 [text]", "max_model_len is 1024"]),
    ("wrong-columns.csv", ["wrong-columns.csv:3", "expected 3 columns, got 4"]),
    ("csv-unknown-column.csv", ["csv-unknown-column.csv:2 [txt]", "did you mean 'text'"]),
    ("empty.jsonl", ["empty.jsonl", "no requests"]),
    ("not-utf8.txt", ["not-utf8.txt", "not UTF-8"]),
    ("wrong-type.xml", ["wrong-type.xml", "unsupported request file type"]),
    ("ref-audio-missing.jsonl", ["ref-audio-missing.jsonl:1 [ref_audio]"]),
    ("ref-audio-url.jsonl", ["ref-audio-url.jsonl:1 [ref_audio]", "does not fetch URLs", "!does not exist"]),
    ("ref-audio-file-host.jsonl", ["ref-audio-file-host.jsonl:1 [ref_audio]", "on another machine"]),
    (
        "ref-audio-directory.jsonl",
        ["ref-audio-directory.jsonl:1 [ref_audio]", "is a directory, expected an audio file"],
    ),
    ("is-a-directory.jsonl", ["is-a-directory.jsonl", "is a directory, expected a request file", "!does not exist"]),
    ("language-unknown.jsonl", ["language-unknown.jsonl:1 [language]", "did you mean 'French'"]),
    # A byte-order mark and CRLF line ends are fine; the one problem is on the line it is on.
    ("bom-crlf.csv", ["bom-crlf.csv:4 [seed]", "!unknown field", "!bom-crlf.csv:2", "!bom-crlf.csv:3"]),
    ("bom-crlf.jsonl", ["bom-crlf.jsonl:3 [seed]", "!invalid JSON", "!bom-crlf.jsonl:1", "!bom-crlf.jsonl:2"]),
]

DEPLOY_CASES = [
    ("invalid-yaml.yaml", ["invalid-yaml.yaml:", "invalid YAML"]),
    ("no-stage-0.yaml", ["no-stage-0.yaml", "stage_id 0"]),
    ("missing-base.yaml", ["missing-base.yaml:1: base_config 'does-not-exist.yaml'"]),
    ("stage-id-typo.yaml", ["stage-id-typo.yaml:3 [stages[0].stage_id]", "it has 'stageid': did you mean 'stage_id'?"]),
    ("loop-a.yaml", ["loop-b.yaml: base_config forms a cycle", "loop-a.yaml"]),
    ("top-p-range.yaml", ["top-p-range.yaml:5", "top_p"]),
    ("removed-schema.yaml", ["removed-schema.yaml:1 [stage_args]", "removed"]),
    ("not-a-mapping.yaml", ["not-a-mapping.yaml", "must be a YAML mapping"]),
    ("bad-max-num-seqs.yaml", ["bad-max-num-seqs.yaml:3", "max_num_seqs must be a positive integer"]),
    ("seed-float.yaml", ["seed-float.yaml:3", "seed"]),
    ("base-is-directory.yaml", ["base-is-directory.yaml:1: base_config '.' is a directory, expected a YAML file"]),
    (
        "foreign-subtalker.yaml",
        [
            "foreign-subtalker.yaml:4 [stages.0.subtalker_sampling_params]",
            "not a MOSS-TTS-Local deploy file",
            "--allow-foreign-deploy",
        ],
    ),
    ("foreign-three-stages.yaml", ["foreign-three-stages.yaml:4 [stages.2.stage_id]", "0 (talker) and 1 (codec)"]),
    ("model-runner-v3.yaml", ["model-runner-v3.yaml:1: model_runner must be 'v1' or 'v2'"]),
    (
        "seed-typo.yaml",
        ["seed-typo.yaml:5 [stages.0.default_sampling_params.sed]", "unknown key 'sed'", "did you mean 'seed'"],
    ),
    (
        "engine-arg-typo.yaml",
        [
            "engine-arg-typo.yaml:3 [stages.0.max_num_sqs]",
            "did you mean 'max_num_seqs'",
            "engine-arg-typo.yaml:6 [stages.1.engine_args.max_model_lenn]",
            "did you mean 'max_model_len'",
        ],
    ),
    (
        "four-problems.yaml",
        [
            "four-problems.yaml:3 [stages.0.max_num_sqs]",
            "four-problems.yaml:4 [stages.0.max_model_len]",
            "four-problems.yaml:6 [stages.0.default_sampling_params.sed]",
            "four-problems.yaml:7 [stages.0.default_sampling_params.top_p]",
        ],
    ),
]

CHECKPOINT_CASES = [
    ("no-config.json", ["talker", "no config.json"]),
    ("truncated-safetensors.json", ["model.safetensors", "safetensors"]),
    ("corrupt-header.json", ["codec", "model.safetensors", "not a readable safetensors file"]),
    ("size-mismatch.json", ["transformer.layers.0.mlp.down_proj.weight", "[64, 128]", "[64, 96]"]),
    ("codec-too-few-quantizers.json", ["codec", "4 quantizers", "6 codebooks"]),
    ("tokenizer-missing-special.json", ["tokenizer.json [audio_end_token_id]", "270"]),
    ("pickled-only.json", ["pickled weights are never loaded"]),
    ("no-tokenizer.json", ["talker", "no tokenizer.json"]),
    ("codec-rate-mismatch.json", ["codec", "[sampling_rate]", "48000 Hz", "24000 Hz"]),
]


def _merge(base: dict, patch: dict) -> dict:
    out = dict(base)
    for key, value in patch.items():
        out[key] = _merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def _broken_checkpoints(case: dict, tmp_path: Path) -> tuple[Path, Path]:
    talker = Path(shutil.copytree(TINY_TALKER, tmp_path / "talker"))
    codec = Path(shutil.copytree(TINY_CODEC, tmp_path / "codec"))
    target = talker if case["component"] == "talker" else codec
    for name in case.get("remove", []):
        (target / name).unlink()
    for name, size in case.get("truncate", {}).items():
        (target / name).write_bytes((target / name).read_bytes()[:size])
    for name, text in case.get("overwrite", {}).items():
        (target / name).write_text(text)
    if "config_patch" in case:
        config = json.loads((target / "config.json").read_text())
        (target / "config.json").write_text(json.dumps(_merge(config, case["config_patch"])))
    return talker, codec


def _run_and_check(args: list, out: Path, expected: list[str]) -> None:
    out.mkdir()
    (out / "keep.txt").write_text("untouched")
    result = CliRunner().invoke(app, ["synth", *map(str, args), "--out", str(out)])
    message = result.output.replace("\n", " ")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    for fragment in expected:
        if fragment.startswith("!"):
            assert fragment[1:] not in message, f"{fragment[1:]!r} in {result.output!r}"
        else:
            assert fragment in message, f"{fragment!r} not in {result.output!r}"
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]  # nothing written, nothing removed


def test_the_corpus_has_at_least_25_bad_inputs():
    assert len(REQUEST_CASES) + len(DEPLOY_CASES) + len(CHECKPOINT_CASES) >= 25
    listed = {name for name, _ in REQUEST_CASES}
    assert listed == {p.name for p in (CORPUS / "requests").iterdir()}


@pytest.mark.parametrize("name, expected", REQUEST_CASES, ids=[c[0] for c in REQUEST_CASES])
def test_bad_request_file(name, expected, tmp_path):
    _run_and_check([CORPUS / "requests" / name], tmp_path / "out", expected)


@pytest.mark.parametrize("name, expected", DEPLOY_CASES, ids=[c[0] for c in DEPLOY_CASES])
def test_bad_deploy_config(name, expected, tmp_path):
    _run_and_check([GOOD, "--deploy", CORPUS / "deploy" / name], tmp_path / "out", expected)


@pytest.mark.parametrize("name, expected", CHECKPOINT_CASES, ids=[c[0] for c in CHECKPOINT_CASES])
def test_bad_checkpoint(name, expected, tmp_path):
    talker, codec = _broken_checkpoints(json.loads((CORPUS / "checkpoints" / name).read_text()), tmp_path)
    _run_and_check(
        [
            GOOD,
            "--model",
            talker,
            "--codec",
            codec,
            "--deploy",
            EXAMPLES.parent / "recipes" / "moss_tts_local_tiny.yaml",
        ],
        tmp_path / "out",
        expected,
    )


def test_missing_model_directory_and_lone_model_option(tmp_path):
    _run_and_check(
        [GOOD, "--model", tmp_path / "nowhere", "--codec", TINY_CODEC], tmp_path / "a", ["nowhere", "does not exist"]
    )
    _run_and_check([GOOD, "--model", TINY_TALKER], tmp_path / "b", ["--model and --codec go together"])
    _run_and_check(
        [GOOD, "--model", TINY_TALKER / "config.json", "--codec", TINY_CODEC],
        tmp_path / "c",
        ["config.json", "is a file, expected a checkpoint directory", "!does not exist"],
    )


def test_a_line_too_long_for_any_request_is_rejected_without_being_parsed(tmp_path):
    path = tmp_path / "huge.jsonl"
    with path.open("w") as handle:  # one 9 MB line, past the default bound, then a good line
        handle.write('{"id": "huge", "text": "' + "word " * 1_800_000 + '"}\n{"id": "fine", "text": "x"}\n')
    _run_and_check(
        [path], tmp_path / "out", ["huge.jsonl:1", "line is 9000026 bytes", "max_line_bytes", "!huge.jsonl:2"]
    )


def test_every_layer_of_problems_is_reported_at_once(tmp_path):
    # A field error on one line does not hide the reference-audio and prompt-length errors of the
    # others (they were reported only once the field error was fixed); lines in file order.
    path = tmp_path / "layers.jsonl"
    lines = [
        {"id": "bad-seed", "text": "x", "seed": "one"},
        {"id": "no-voice", "text": "x", "ref_audio": "missing.wav"},
        {"id": "fine", "text": "x"},
        {"id": "long", "text": "word " * 3000},
        {"id": "no-voice-2", "text": "x", "ref_audio": "missing-too.wav"},
    ]
    write_rows(path, lines)
    _run_and_check(
        [path],
        tmp_path / "out",
        ["layers.jsonl:1 [seed]", "layers.jsonl:2 [ref_audio]", "layers.jsonl:4 [text]", "layers.jsonl:5 [ref_audio]"],
    )
    result = CliRunner().invoke(app, ["synth", str(path), "--out", str(tmp_path / "again"), "--dry-run"])
    reported = [
        line.split(" [")[0].rsplit(":", 1)[-1] for line in result.output.splitlines() if "layers.jsonl:" in line
    ]
    assert reported == ["1", "2", "4", "5"], result.output
