"""Model catalog and parameter counting (specsim/models.py, models/*.toml).

Expected values come from three independent places, named at each assertion: arithmetic written
out by hand here, the counts the models' authors publish (cited in each TOML file), and the seed
article's figures. Parameter counts are exact integers, so hand-computed ones are compared exactly.
"""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.specs.catalog import catalog_dir, catalog_ids, read_toml
from specsim.errors import SpecError
from specsim.specs.models import ModelSpec, MoESpec, load_model, model_from_dict, model_from_hf_config

MODEL_IDS = catalog_ids("models")
SEED_IDS = [i for i in MODEL_IDS if i.startswith("seed-")]
CATALOG_IDS = [i for i in MODEL_IDS if not i.startswith("seed-")]
PUBLISHED_IDS = [i for i in CATALOG_IDS if read_toml(catalog_dir("models") / f"{i}.toml").get("published_params_b")]

REQUIRED = [
    "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-2-7b-chat", "llama-2-13b-chat", "llama-2-70b-chat",
    "llama-2-7b-32k", "codellama-7b", "codellama-13b", "codellama-34b", "vicuna-7b", "vicuna-13b", "vicuna-33b",
    "vicuna-68m", "llama-68m", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.2-1b", "llama-3.2-3b",
    "llama-3.3-70b", "tinyllama-1.1b", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b",
    "qwen2.5-72b", "qwen3-8b", "mistral-7b", "mixtral-8x7b", "deepseek-v3", "deepseek-r1", "smollm2-135m",
    "smollm2-360m", "smollm2-1.7b", "chinchilla-70b", "chinchilla-draft-4b", "t5-small", "t5-base", "t5-large",
    "t5-xxl", "seed-70b", "seed-1b", "seed-7b-q4", "seed-0.5b",
]

ALIASES = {  # alias -> the file whose shape it shares
    "llama-2-7b-chat": "llama-2-7b", "vicuna-7b": "llama-2-7b", "llama-2-13b-chat": "llama-2-13b",
    "vicuna-13b": "llama-2-13b", "llama-2-70b-chat": "llama-2-70b", "vicuna-68m": "llama-68m",
    "llama-3.3-70b": "llama-3.1-70b", "deepseek-r1": "deepseek-v3", "t5-11b": "t5-xxl",
}


def _raw(model_id: str) -> dict:
    return read_toml(catalog_dir("models") / f"{model_id}.toml")


# ---- the catalog ------------------------------------------------------------------------------------
@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_every_file_loads_and_its_stem_is_its_id(model_id):
    model = load_model(model_id)
    assert model.id == model_id
    assert model.sources["shape"]
    if model.published_params_b:
        assert model.sources["published_params_b"]


def test_aliases_are_unique_and_never_shadow_an_id():
    seen: dict[str, str] = {}
    for model_id in MODEL_IDS:
        for alias in _raw(model_id).get("aliases", []):
            assert alias not in MODEL_IDS, f"{model_id}: alias {alias!r} is also a file"
            assert alias not in seen, f"alias {alias!r} in both {seen[alias]} and {model_id}"
            seen[alias] = model_id


@pytest.mark.parametrize("name", REQUIRED)
def test_required_ids_and_aliases_resolve(name):
    assert load_model(name).n_params > 0


@pytest.mark.parametrize("alias,base", sorted(ALIASES.items()))
def test_alias_resolves_to_its_base_shape(alias, base):
    assert load_model(alias) == load_model(base)


def test_unknown_id_lists_close_matches():
    with pytest.raises(SpecError) as err:
        load_model("llama-2-7")
    assert "llama-2-7b" in str(err.value) and "Did you mean" in str(err.value)


def test_tokenizer_families_follow_shared_vocabularies():
    tok = {i: load_model(i).tokenizer for i in REQUIRED}
    # JackFram's drafters use the LLaMA tokenizer, which Llama 2, Vicuna and TinyLlama share.
    assert tok["llama-68m"] == tok["vicuna-68m"] == tok["llama-2-7b"] == tok["vicuna-33b"] == tok["tinyllama-1.1b"]
    assert tok["llama-3.2-1b"] == tok["llama-3.1-405b"] == "llama3" != tok["llama-2-7b"]  # the seed's 32,000 vs 128,256
    assert tok["qwen2.5-0.5b"] == tok["qwen2.5-72b"] == tok["qwen3-8b"]
    assert tok["mistral-7b"] == tok["mixtral-8x7b"]
    assert tok["t5-small"] == tok["t5-xxl"] and tok["chinchilla-draft-4b"] == tok["chinchilla-70b"]
    assert tok["smollm2-135m"] == tok["smollm2-1.7b"] != tok["llama-2-7b"]


def test_catalog_details_that_the_cost_model_reads():
    assert load_model("mistral-7b").sliding_window == 4096          # v0.1, config.json
    assert load_model("mixtral-8x7b").sliding_window == 0
    assert load_model("deepseek-v3").weight_bytes_per_param == 1.0  # published fp8 weights
    assert load_model("llama-68m").weight_bytes_per_param == 4.0    # the checkpoint is float32
    assert load_model("qwen2.5-0.5b").tied_embeddings and not load_model("qwen2.5-7b").tied_embeddings
    assert load_model("llama-2-7b-32k").max_context == 32768 and load_model("llama-2-7b").max_context == 4096
    assert load_model("codellama-7b").vocab_size == 32016 and load_model("codellama-34b").vocab_size == 32000


# ---- parameter counts against published figures ----------------------------------------------------
@pytest.mark.parametrize("model_id", PUBLISHED_IDS)
def test_derived_count_within_2_percent_of_published(model_id):
    """Published counts: each file's sources.published_params_b (paper or model card)."""
    model = load_model(model_id)
    published = model.published_params_b * 1e9
    assert model.n_params == pytest.approx(published, rel=0.02), model.sources["published_params_b"]


def test_llama_2_7b_by_hand():
    # 32 layers x (q,k,v,o 4·d² + gate/up/down 3·d·f + 2 RMSNorm scales) + untied embedding and head + final norm
    expected = 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 2 * 32000 * 4096 + 4096
    assert expected == 6_738_415_616
    assert load_model("llama-2-7b").n_params == expected


def test_llama_68m_by_hand():
    expected = 2 * (4 * 768**2 + 3 * 768 * 3072 + 2 * 768) + 2 * 32000 * 768 + 768
    assert expected == 68_030_208  # the '68M' of its name
    assert load_model("llama-68m").n_params == expected


def test_llama_3_2_1b_tied_embedding_counted_once():
    d, kv = 2048, 8 * 64
    expected = 16 * (2 * d * d + 2 * d * kv + 3 * d * 8192 + 2 * d) + 128256 * d + d
    assert expected == 1_235_814_400  # model card: 1.23B
    assert load_model("llama-3.2-1b").n_params == expected


def test_qwen2_5_0_5b_counts_qkv_biases():
    d, q, kv = 896, 14 * 64, 2 * 64
    attn = 2 * d * q + 2 * d * kv + (q + 2 * kv)  # q,o + k,v + biases on q, k, v
    expected = 24 * (attn + 3 * d * 4864 + 2 * d) + 151936 * d + d
    assert expected == 494_032_768  # model card: 0.49B
    assert load_model("qwen2.5-0.5b").n_params == expected


def test_qwen3_counts_query_and_key_norms():
    model = load_model("qwen3-8b")
    assert model.n_params - replace(model, qk_norm=False).n_params == 36 * 2 * 128


def test_t5_small_by_hand():
    """Raffel et al. 2020 T5-small: 6+6 layers, d 512, d_ff 2048, 8 heads x 64; ReLU FFN, tied embedding."""
    d, f, v = 512, 2048, 32128
    attn, ffn = 4 * d * d, 2 * d * f
    encoder = 6 * (attn + ffn + 2 * d) + d          # two norms a layer, final norm
    decoder = 6 * (2 * attn + ffn + 3 * d) + d      # self- and cross-attention, three norms, final norm
    bias_tables = 2 * 32 * 8                        # relative-position buckets x heads, encoder and decoder
    expected = v * d + encoder + decoder + bias_tables
    assert expected == 60_506_624  # Hugging Face google-t5/t5-small: 60.5M
    assert load_model("t5-small").n_params == expected


def test_t5_xxl_by_hand():
    d, f, h, dkv, v = 1024, 65536, 128, 128, 32128
    attn, ffn = 4 * d * h * dkv, 2 * d * f
    expected = v * d + 24 * (attn + ffn + 2 * d) + d + 24 * (2 * attn + ffn + 3 * d) + d + 2 * 32 * h
    assert expected == 11_307_321_344  # the original 'T5 11B'
    assert load_model("t5-xxl").n_params == expected


def test_mixtral_total_and_active_by_hand():
    d, kv, fe = 4096, 8 * 128, 14336
    attn, expert, router = 2 * d * d + 2 * d * kv, 3 * d * fe, 8 * d
    expected = 32 * (attn + 8 * expert + router + 2 * d) + 2 * 32000 * d + d
    assert expected == 46_702_792_704
    model = load_model("mixtral-8x7b")
    assert model.n_params == expected
    assert model.n_active_params == expected - 32 * 6 * expert
    assert model.n_active_params == pytest.approx(12.9e9, rel=0.02)  # Mistral AI: 12.9B active


def _deepseek_v3_layers():
    d, h = 7168, 128
    mla = (d * 1536 + 1536 + 1536 * h * (128 + 64)                 # q down, q norm, q up (nope + rope)
           + d * (512 + 64) + 512 + 512 * h * (128 + 128)          # kv down + rope key, kv norm, k/v up
           + h * 128 * d)                                          # output
    expert = 3 * d * 2048
    moe_layer = mla + 2 * d + 256 * d + (256 + 1) * expert         # norms, router, routed + shared experts
    dense_layer = mla + 2 * d + 3 * d * 18432
    return d, mla, expert, moe_layer, dense_layer


def test_deepseek_v3_main_active_and_mtp():
    """DeepSeek-V3 Technical Report: 671B total, 37B activated; README: 685B = 671B main + 14B MTP."""
    d, mla, expert, moe_layer, dense_layer = _deepseek_v3_layers()
    assert mla == 187_107_328
    embed = 129280 * d
    main = 3 * dense_layer + 58 * moe_layer + 2 * embed + d
    model = load_model("deepseek-v3")
    assert model.attn_params_per_layer == mla
    assert model.n_params == main
    assert main == pytest.approx(671e9, rel=0.002)
    assert model.n_active_params == main - 58 * (256 - 8) * expert
    assert model.n_active_params == pytest.approx(37e9, rel=0.02)
    # One MTP module: a MoE block, the 2d -> d projection, two input norms and its head's norm.
    mtp = moe_layer + 2 * d * d + 3 * d
    assert model.mtp_params == mtp
    # The checkpoint also stores a copy of the embedding and the head inside the MTP module; that is
    # the published '14B' (685 - 671, both rounded, so anything from 13 to 15 is consistent).
    assert model.mtp_checkpoint_params == mtp + 2 * embed
    assert 13e9 < model.mtp_checkpoint_params < 15e9
    assert model.n_params + model.mtp_checkpoint_params == pytest.approx(685e9, rel=0.005)


def test_chinchilla_by_hand():
    """Hoffmann et al. 2022 Table 4; Transformer-XL relative positions add W_R (d x d) and u, v per layer."""
    d = 8192
    expected = 80 * (4 * d * d + d * d + 2 * d + 2 * d * 4 * d + 2 * d) + 32000 * d + d
    assert load_model("chinchilla-70b").n_params == expected
    assert expected == pytest.approx(70e9, rel=0.01)


GOPHER_TABLE_1 = [  # Rae et al. 2021, Table 1: params, layers, heads, key/value size, d_model
    (44e6, 8, 16, 32, 512), (117e6, 12, 12, 64, 768), (417e6, 12, 12, 128, 1536),
    (1.4e9, 24, 16, 128, 2048), (7.1e9, 32, 32, 128, 4096), (280e9, 80, 128, 128, 16384),
]


@pytest.mark.parametrize("published,layers,heads,kv_size,d_model", GOPHER_TABLE_1)
def test_gopher_family_counts_check_the_xl_relative_modelling(published, layers, heads, kv_size, d_model):
    """Chinchilla's family: tied embeddings plus the per-layer W_R projection reproduce every size."""
    model = load_model("chinchilla-70b")
    gopher = replace(model, id="gopher", n_layers=layers, n_heads=heads, n_kv_heads=heads, head_dim=kv_size,
                     hidden_size=d_model, ffn_size=4 * d_model, published_params_b=0.0)
    assert gopher.n_params == pytest.approx(published, rel=0.02)


def test_chen_et_al_draft_is_about_4b():
    """Chen et al. 2023 §6 call it 'a 4 billion parameter draft model' (a rounded figure): 5 %."""
    assert load_model("chinchilla-draft-4b").n_params == pytest.approx(4e9, rel=0.05)


# ---- KV cache ------------------------------------------------------------------------------------
def test_kv_bytes_per_token_gqa_by_hand():
    # 80 layers x (K and V) x 8 KV heads x 128 x 2 bytes (bf16)
    assert load_model("llama-3.1-70b").kv_bytes_per_token == 80 * 2 * 8 * 128 * 2 == 327_680


def test_kv_bytes_per_token_mla_by_hand():
    # 61 layers x (512-wide latent + 64-wide rope key) x 2 bytes
    assert load_model("deepseek-v3").kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272


def test_kv_bytes_per_token_mha_by_hand():
    assert load_model("llama-2-7b").kv_bytes_per_token == 32 * 2 * 32 * 128 * 2 == 524_288


# ---- the seed article's figures -------------------------------------------------------------------
def test_seed_70b_is_140_gb():
    assert load_model("seed-70b").weight_bytes == pytest.approx(140e9, rel=0.005)  # '70B, fp16 = 140 GB'


def test_seed_1b_is_about_2_gb():
    assert load_model("seed-1b").weight_bytes == pytest.approx(2e9, rel=0.03)  # '1B drafter, fp16 = 2 GB'


def test_seed_7b_q4_is_about_4_gb():
    assert load_model("seed-7b-q4").weight_bytes == pytest.approx(4e9, rel=0.02)  # 'quantized to about 4 GB'


def test_seed_0_5b_is_about_350_mb():
    assert load_model("seed-0.5b").weight_bytes == pytest.approx(350e6, rel=0.03)  # 'a 0.5B drafter at ~350 MB'


# ---- bad input ------------------------------------------------------------------------------------
GOOD = """
id = "tiny"
name = "tiny"
tokenizer = "t"
n_layers = 2
hidden_size = 64
n_heads = 4
n_kv_heads = 2
ffn_size = 128
vocab_size = 100
weight_format = "bf16"
[sources]
shape = "made up for a test"
"""


def _load_text(tmp_path, text):
    path = tmp_path / "tiny.toml"
    path.write_text(text)
    return load_model(str(path))


def test_good_file_loads(tmp_path):
    model = _load_text(tmp_path, GOOD)
    assert model.head_dim == 16 and model.n_kv_heads == 2


def test_unknown_key_is_named(tmp_path):
    with pytest.raises(SpecError, match="unknown key 'n_layer'.*did you mean 'n_layers'"):
        _load_text(tmp_path, GOOD.replace("n_layers = 2", "n_layers = 2\nn_layer = 3"))


def test_heads_not_divisible_by_kv_heads(tmp_path):
    with pytest.raises(SpecError, match="n_kv_heads.*3.*divisor of n_heads = 4"):
        _load_text(tmp_path, GOOD.replace("n_kv_heads = 2", "n_kv_heads = 3"))


def test_missing_shape_source(tmp_path):
    with pytest.raises(SpecError, match="sources.shape"):
        _load_text(tmp_path, GOOD.replace('shape = "made up for a test"', 'note = "x"'))


def test_published_count_needs_a_citation(tmp_path):
    with pytest.raises(SpecError, match="sources.published_params_b"):
        _load_text(tmp_path, GOOD.replace('weight_format = "bf16"', 'weight_format = "bf16"\npublished_params_b = 1.0'))


def test_unknown_weight_format(tmp_path):
    with pytest.raises(SpecError, match="weight_format.*'bf17'"):
        _load_text(tmp_path, GOOD.replace('"bf16"', '"bf17"'))


def test_negative_layers(tmp_path):
    with pytest.raises(SpecError, match="n_layers.*-2.*positive integer"):
        _load_text(tmp_path, GOOD.replace("n_layers = 2", "n_layers = -2"))


def test_unknown_position_encoding(tmp_path):
    with pytest.raises(SpecError, match="position_encoding.*'alibi'"):
        _load_text(tmp_path, GOOD.replace("n_layers = 2", 'n_layers = 2\nposition_encoding = "alibi"'))


def test_moe_with_no_experts(tmp_path):
    moe = "\n[moe]\nn_experts = 0\nn_experts_per_token = 0\nexpert_ffn_size = 64\n"
    with pytest.raises(SpecError, match="moe.n_experts"):
        _load_text(tmp_path, GOOD.replace("[sources]", moe + "[sources]"))


def test_non_boolean_flag(tmp_path):
    with pytest.raises(SpecError, match="tied_embeddings.*'yes'.*true or false"):
        _load_text(tmp_path, GOOD.replace("n_layers = 2", 'n_layers = 2\ntied_embeddings = "yes"'))


# ---- Hugging Face import ----------------------------------------------------------------------------
LLAMA_3_1_8B_CONFIG = {  # meta-llama/Llama-3.1-8B config.json (the keys that matter)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    "tie_word_embeddings": False, "attention_bias": False, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
}
MIXTRAL_CONFIG = {  # mistralai/Mixtral-8x7B-v0.1 config.json
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000, "max_position_embeddings": 32768,
    "sliding_window": None, "tie_word_embeddings": False, "rope_theta": 1e6, "torch_dtype": "bfloat16",
}
T5_11B_CONFIG = {  # google-t5/t5-11b config.json (torch_dtype added: the original checkpoint is float32)
    "architectures": ["T5WithLMHeadModel"], "model_type": "t5", "d_model": 1024, "d_ff": 65536, "d_kv": 128,
    "num_heads": 128, "num_layers": 24, "vocab_size": 32128, "relative_attention_num_buckets": 32,
    "feed_forward_proj": "relu", "n_positions": 512, "torch_dtype": "float32",
}
DEEPSEEK_V3_CONFIG = {  # deepseek-ai/DeepSeek-V3 config.json
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_attention_heads": 128,
    "num_key_value_heads": 128, "num_hidden_layers": 61, "first_k_dense_replace": 3, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_experts_per_tok": 8, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
    "num_nextn_predict_layers": 1, "max_position_embeddings": 163840, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                                       "weight_block_size": [128, 128]},
}
QWEN2_5_0_5B_CONFIG = {  # Qwen/Qwen2.5-0.5B config.json
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "vocab_size": 151936,
    "max_position_embeddings": 32768, "sliding_window": 32768, "use_sliding_window": False,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize("config,catalog_id,tokenizer", [
    (LLAMA_3_1_8B_CONFIG, "llama-3.1-8b", "llama3"),
    (MIXTRAL_CONFIG, "mixtral-8x7b", "mistral"),
    (T5_11B_CONFIG, "t5-xxl", "t5"),
    (DEEPSEEK_V3_CONFIG, "deepseek-v3", "deepseek-v3"),
    (QWEN2_5_0_5B_CONFIG, "qwen2.5-0.5b", "qwen2"),
])
def test_hf_import_matches_catalog(config, catalog_id, tokenizer):
    table = model_from_hf_config(config, model_id="imported", tokenizer=tokenizer)
    imported = model_from_dict(table)
    entry = load_model(catalog_id)
    assert imported.n_params == entry.n_params
    assert imported.n_active_params == entry.n_active_params
    assert imported.mtp_params == entry.mtp_params
    assert imported.kv_elems_per_token_per_layer == entry.kv_elems_per_token_per_layer
    assert imported.sliding_window == entry.sliding_window
    assert imported.weight_format == entry.weight_format


def test_hf_import_reads_the_stored_precision():
    fp8 = {**DEEPSEEK_V3_CONFIG, "torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8"}}
    table = model_from_hf_config(fp8, model_id="v3", tokenizer="deepseek-v3")
    assert (table["weight_format"], table["kv_cache_dtype"]) == ("fp8", "bf16")
    table = model_from_hf_config({**LLAMA_3_1_8B_CONFIG, "torch_dtype": "float16"}, model_id="l", tokenizer="llama3")
    assert (table["weight_format"], table["kv_cache_dtype"]) == ("fp16", "fp16")


def test_hf_import_refuses_a_config_without_a_shape():
    with pytest.raises(SpecError, match="config.json"):
        model_from_hf_config({"architectures": ["Foo"]}, model_id="foo", tokenizer="x")


# ---- properties -----------------------------------------------------------------------------------
@st.composite
def shapes(draw):
    n_kv = draw(st.integers(1, 8))
    n_heads = n_kv * draw(st.integers(1, 8))
    moe = None
    if draw(st.booleans()):
        n_experts = draw(st.integers(1, 16))
        moe = MoESpec(n_experts=n_experts, n_experts_per_token=draw(st.integers(1, n_experts)),
                      n_shared_experts=draw(st.integers(0, 2)), expert_ffn_size=draw(st.integers(1, 4096)))
    encdec = draw(st.booleans())
    return ModelSpec(
        id="p", name="p", tokenizer="t", n_layers=draw(st.integers(1, 64)), hidden_size=draw(st.integers(1, 8192)),
        n_heads=n_heads, n_kv_heads=n_kv, head_dim=draw(st.integers(1, 256)), ffn_size=draw(st.integers(1, 32768)),
        ffn_kind=draw(st.sampled_from(["gated", "mlp"])), vocab_size=draw(st.integers(1, 200_000)),
        tied_embeddings=draw(st.booleans()), attention_bias=draw(st.booleans()), qk_norm=draw(st.booleans()),
        position_encoding="t5-relative" if encdec else draw(st.sampled_from(["rope", "xl-relative"])),
        architecture="encoder-decoder" if encdec else "decoder", n_encoder_layers=draw(st.integers(1, 24)) if encdec else 0,
        moe=moe, n_mtp_layers=draw(st.integers(0, 2)),
    )


@settings(max_examples=200, deadline=None)
@given(shapes(), st.integers(1, 16), st.integers(1, 4096))
def test_n_params_monotone_in_layers_and_width(model, more_layers, more_width):
    deeper = replace(model, n_layers=model.n_layers + more_layers)
    wider = replace(model, hidden_size=model.hidden_size + more_width)
    assert deeper.n_params > model.n_params
    assert wider.n_params > model.n_params
    assert model.n_active_params <= model.n_params
    assert model.weight_bytes == pytest.approx((model.n_params + model.mtp_params) * model.weight_bits / 8)
    assert math.isfinite(model.kv_bytes_per_token) and model.kv_bytes_per_token > 0


@pytest.mark.parametrize("key", ["hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size",
                                 "max_position_embeddings"])
def test_hf_import_refuses_counts_past_32_bits(key):
    # a framework stores these as int32: 2**31 is a typo, and 10**30 would pass into byte counts a
    # double cannot hold (the fuzz campaign's json-config cases imported such files with exit 0)
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
              "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
              "vocab_size": 128256, "max_position_embeddings": 131072}
    assert model_from_hf_config(config, model_id="ok", tokenizer="llama3")["hidden_size"] == 4096
    for bad in (2**31, 10**30):
        with pytest.raises(SpecError, match=f"'{key}' = {bad}: expected an integer in 1..2147483647"):
            model_from_hf_config({**config, key: bad}, model_id="big", tokenizer="llama3")
