"""`specsim hardware list|show`, `specsim models list|show|import`: catalogs printed with sources."""
import json

import pytest

from specsim.cli import main
from specsim.specs.models import load_model


def test_hardware_list_has_every_profile(capsys):
    assert main(["hardware", "list", "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert {"h100-sxm", "ddr5-5600-2ch", "seed-hbm-2tbs"} <= set(rows)
    # the H100 SXM datasheet: 3.35 TB/s and 989.4 dense bf16 TFLOP/s → ops:byte 295
    assert rows["h100-sxm"]["mem_bandwidth_gb_s"] == pytest.approx(3350)
    assert rows["h100-sxm"]["ridge_flops_per_byte_bf16"] == pytest.approx(989.4 / 3.35, rel=1e-6)


def test_hardware_show_prints_sources(capsys):
    assert main(["hardware", "show", "h100-sxm"]) == 0
    out = capsys.readouterr().out
    assert "sources:" in out and "datasheet" in out.lower() and "ops:byte bf16" in out


def test_models_list_and_show(capsys):
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "llama-3.1-70b" in out and "llama-3.3-70b" in out  # an alias shown beside its shape
    assert main(["models", "show", "llama-2-7b-chat", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["id"] == "llama-2-7b"
    # 32 × (4·4096² + 3·4096·11008 + 2·4096) + 2·32000·4096 + 4096, by hand
    assert data["n_params"] == 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 2 * 32000 * 4096 + 4096
    assert "shape" in data["sources"]


def test_unknown_model_suggests_close_matches(capsys):
    assert main(["models", "show", "llama-3.1-8"]) == 2
    err = capsys.readouterr().err
    assert "unknown model id 'llama-3.1-8'" in err and "llama-3.1-8b" in err


def test_models_import_writes_a_loadable_toml(tmp_path, capsys):
    # Llama-3.2-1B's config.json fields (meta-llama/Llama-3.2-1B), written out by hand
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
              "intermediate_size": 8192, "num_attention_heads": 32, "num_hidden_layers": 16,
              "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256, "tie_word_embeddings": True,
              "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config))
    out = tmp_path / "my-1b.toml"
    assert main(["models", "import", str(cfg), "--id", "my-1b", "--tokenizer", "llama3", "--out", str(out)]) == 0
    imported = load_model(out)
    assert imported.n_params == load_model("llama-3.2-1b").n_params


def test_models_import_refuses_a_non_transformer_config(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"architectures": ["ResNet"], "model_type": "resnet"}))
    assert main(["models", "import", str(cfg), "--id", "x", "--tokenizer", "t"]) == 2
    assert "config.json" in capsys.readouterr().err
