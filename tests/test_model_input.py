"""`--model` takes a preset name, a YAML spec path or a Hugging Face config.json path; bad files are one line."""

import json

import pytest

from zeroplan.cli.app import app

GEMMA2_9B = 9_241_705_984
# google/gemma-2-9b config.json, keys as the hub has them (plus some it carries that zeroplan ignores)
GEMMA2_HF = {
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
    "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
    "vocab_size": 256000, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "sliding_window": 4096,
    "torch_dtype": "float32", "transformers_version": "4.42.0.dev0", "bos_token_id": 2,
}  # fmt: skip


def num_params(runner, ref):
    res = runner.invoke(app, ["estimate", "--model", str(ref), "-f", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["model"]["num_params"]


def test_preset_name(runner):
    assert num_params(runner, "gemma2-9b") == GEMMA2_9B


def test_hf_config_json(runner, tmp_path):
    path = tmp_path / "gemma-2-9b" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(GEMMA2_HF))
    assert num_params(runner, path) == GEMMA2_9B


def test_yaml_spec(runner, tmp_path):
    path = tmp_path / "mine.yaml"
    keys = {k: v for k, v in GEMMA2_HF.items() if k not in ("architectures", "torch_dtype", "transformers_version", "bos_token_id")}
    path.write_text(json.dumps({"name": "mine", "source": "hand-written", "config": keys}))  # JSON is YAML
    assert num_params(runner, path) == GEMMA2_9B


@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda p: p.write_bytes(b"name: x\nsource: \xff\xfe\n"), "not UTF-8 text"),
        (lambda p: p.write_text("name: [x\n"), "invalid YAML"),
        (lambda p: p.write_text(""), "expected a mapping"),
        (lambda p: p.write_text("name: x\nsource: s\nconfig:\n  model_type: llama\n  hiden_size: 64\n"), "config.hiden_size"),
        (lambda p: p.write_text("name: x\nsource: s\nconfig: {model_type: rwkv}\n"), "rwkv"),
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: None, "no such file"),
    ],
    ids=["non-utf8", "malformed", "empty", "unknown-key", "unsupported-family", "directory", "missing"],
)
def test_bad_model_files(runner, tmp_path, make, needle):
    path = tmp_path / "model.yaml"
    make(path)
    res = runner.invoke(app, ["estimate", "--model", str(path)])
    assert res.exit_code == 1
    assert needle in res.stderr and "Traceback" not in res.output
    assert len(res.stderr.strip().splitlines()) == 1


def test_malformed_hf_json(runner, tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",')
    res = runner.invoke(app, ["estimate", "--model", str(path)])
    assert res.exit_code == 1 and "invalid JSON" in res.stderr


def test_unknown_preset_names_close_matches(runner):
    res = runner.invoke(app, ["estimate", "--model", "gemma2-9"])
    assert res.exit_code == 1
    assert "unknown model preset 'gemma2-9'; did you mean gemma2-9b" in res.stderr
