"""Operator-profile calibration (specsim.calibration.profiles): reading Vidur's files, the shipped
A100/H100 curves against models their fit never saw (the issue's ≤ 8 % median, checked twice: through
the fitting module and through roofline.step_cost with catalog models and the CSV read here), the
fitter recovering a known curve, the all-reduce fit, and the Splitwise breakdown's arithmetic."""
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from specsim.calibration import profiles as P
from specsim.cost import kernels as K
from specsim.cost.roofline import step_cost
from specsim.specs.data import data_dir
from specsim.specs.hardware import AllReduceProfile, load_hardware
from specsim.specs.models import load_model

VIDUR = data_dir() / "perf" / "vidur"
needs_vidur = pytest.mark.skipif(not (VIDUR / "compute").is_dir(), reason=f"Vidur profiles not found at {VIDUR}")
OPS = ["emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
       "mlp_up_proj", "mlp_act", "mlp_down_proj", "add"]


@pytest.fixture(scope="module")
def profiles():
    return P.load_operator_profiles()


@needs_vidur
def test_profiles_are_read_in_seconds_with_one_row_per_configuration(profiles):
    raw = pd.read_csv(VIDUR / "compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv")
    one = raw[(raw["num_tokens"] == 1) & (raw["num_tensor_parallel_workers"] == 1)]
    row = profiles[(profiles["gpu"] == "h100") & (profiles["model"] == "Llama-2-7b-hf") & (profiles["tp"] == 1)
                   & (profiles["n_tokens"] == 1)]
    assert len(row) == 1
    assert float(row["attn_pre_proj_s"].iloc[0]) == pytest.approx(one["time_stats.attn_pre_proj.median"].median() * 1e-3)
    assert not profiles.duplicated(["gpu", "model", "tp", "n_tokens"]).any()
    assert set(profiles["hardware"]) == {"a100-sxm-80gb", "h100-sxm"}


@needs_vidur
@pytest.mark.parametrize("hw_id", ["h100-sxm", "a100-sxm-80gb"])
def test_shipped_curve_within_8_percent_on_models_the_fit_never_saw(profiles, hw_id):
    fit = P.evaluate_operator_profiles(profiles, load_hardware(hw_id))
    held = fit.errors[fit.errors["split"] == "held-out"]
    assert len(held) >= 2
    assert (held["median_after"] <= 0.08).all(), held
    # and the curve must be an improvement on the pure roofline for every model
    assert (fit.errors["median_after"] < fit.errors["median_before"] / 2).all(), fit.errors


# held-out Vidur models that have a catalog entry of the same shape
CATALOG_TWINS = [("h100", "codellama/CodeLlama-34b-Instruct-hf", "codellama-34b", "h100-sxm"),
                 ("a100", "codellama/CodeLlama-34b-Instruct-hf", "codellama-34b", "a100-sxm-80gb"),
                 ("a100", "meta-llama/Meta-Llama-3-8B", "llama-3.1-8b", "a100-sxm-80gb"),
                 ("a100", "meta-llama/Meta-Llama-3-70B", "llama-3.1-70b", "a100-sxm-80gb")]


@needs_vidur
@pytest.mark.parametrize("gpu,path,model_id,hw_id", CATALOG_TWINS, ids=[c[2] + "-" + c[0] for c in CATALOG_TWINS])
def test_step_cost_reproduces_a_held_out_layer_sum(gpu, path, model_id, hw_id):
    # Second path: the CSV read here, the catalog model, roofline.step_cost. A Vidur row is one layer's
    # ten operators, the embedding among them; a step runs n_layers of the nine others and one embedding.
    raw = pd.read_csv(VIDUR / "compute" / gpu / path / "mlp.csv")
    model, hw = load_model(model_id), load_hardware(hw_id)
    assert (raw["n_embd"].iloc[0], raw["n_expanded_embd"].iloc[0]) == (model.hidden_size, model.ffn_size)
    cols = [f"time_stats.{op}.median" for op in OPS]
    g = raw.groupby(["num_tensor_parallel_workers", "num_tokens"])[cols].median()
    errors = []
    for tp in (1, 2, 4, 8):
        m = g.loc[tp]
        layer = m[[c for c in cols if ".emb." not in c]].sum(axis=1).to_numpy() * 1e-3
        emb = m["time_stats.emb.median"].to_numpy() * 1e-3
        c = step_cost(model, hw, batch_size=m.index.to_numpy(), tp=tp)
        predicted = (c.weights.time_s + c.activations.time_s - _embedding_s(model, hw, m.index.to_numpy(), tp)) / model.n_layers
        errors.append(np.abs((predicted + _embedding_s(model, hw, m.index.to_numpy(), tp)) / (layer + emb) - 1))
    assert float(np.median(np.concatenate(errors))) <= 0.08


def _embedding_s(model, hw, tokens, tp):
    (emb,) = [o for o in K.step_operators(model, tp) if o.name == "emb"]
    return K.operator_time_s(emb, model, hw, hw.efficiency, tokens)


@needs_vidur
def test_fitter_recovers_a_known_curve(profiles):
    # "Measurements" made by the per-operator path (kernels.operator_time_s on a one-layer model) with a
    # known table; the fitter (its own vectorised path) must find that table again.
    truth_hw = load_hardware("a100-sxm-80gb")
    truth = replace(truth_hw.kernels, gemm_bandwidth_frac=0.8, gemm_compute_frac=0.65, gemm_overlap_exponent=2.5,
                    gemm_tile=(128, 64), gemm_floor_s=5e-6, elementwise_floor_s=2e-6, elementwise_rows_per_sm=4,
                    elementwise_bandwidth_frac={"norm": 0.8, "rope": 0.7, "act": 0.9, "add": 0.9, "embed": 0.2},
                    elementwise_row_s_per_elem={"norm": 0.9e-9, "rope": 1.0e-9, "act": 1.2e-9})
    hw = replace(truth_hw, kernels=truth)
    rows = profiles[(profiles["hardware"] == hw.id) & profiles["tp"].isin([1, 4])
                    & profiles["model"].isin(["Llama-2-7b-hf", "Llama-2-70b-hf", "Qwen-72B"])
                    & ((profiles["n_tokens"] <= 512) | (profiles["n_tokens"] % 256 == 0))].copy()
    for (model, tp), g in rows.groupby(["model", "tp"]):
        spec = P.profile_model(g.iloc[0], model)
        ops = {o.name: o for o in K.step_operators(spec, int(tp))}
        for op in OPS:
            rows.loc[g.index, f"{op}_s"] = K.operator_time_s(ops[op], spec, hw, hw.efficiency, g["n_tokens"].to_numpy())
    # three candidate tiles, not the six of a real fit, to keep the test quick; the choice is still tested
    fit = P.fit_operator_profiles(rows, truth_hw, train_models=("Llama-2-7b-hf", "Llama-2-70b-hf"),
                                  tiles=((64, 64), (128, 64), (128, 128)))
    k = fit.kernels
    assert k.gemm_tile == (128, 64) and k.elementwise_rows_per_sm == 4
    for name in ("gemm_bandwidth_frac", "gemm_compute_frac", "gemm_overlap_exponent", "gemm_floor_s", "elementwise_floor_s"):
        assert getattr(k, name) == pytest.approx(getattr(truth, name), rel=1e-3), name
    for kind, v in truth.elementwise_bandwidth_frac.items():
        assert k.elementwise_bandwidth_frac[kind] == pytest.approx(v, rel=1e-3), kind
    for kind, v in truth.elementwise_row_s_per_elem.items():
        assert k.elementwise_row_s_per_elem[kind] == pytest.approx(v, rel=1e-3), kind
    assert fit.errors["worst_after"].max() < 1e-6  # Qwen-72B, held out, exact too


def test_fit_refuses_an_unknown_training_model(profiles):
    with pytest.raises(Exception, match="train_models"):
        P.fit_operator_profiles(profiles, load_hardware("h100-sxm"), train_models=("Llama-9-1b",))
    with pytest.raises(Exception, match="no operator profiles measured on 'l4'"):
        P.fit_operator_profiles(profiles, load_hardware("l4"))


# ---- all-reduce -------------------------------------------------------------------------------------

def test_all_reduce_fit_recovers_a_known_line():
    sizes = np.geomspace(2048, 64 << 20, 60).round()
    rows = pd.DataFrame({"group_size": np.repeat([2, 8], 60), "message_bytes": np.tile(sizes, 2)})
    lat = {2: 20e-6, 8: 35e-6}
    bus = {2: 300e9, 8: 250e9}
    n = rows["group_size"].to_numpy()
    rows["measured_s"] = [lat[g] + 2 * (g - 1) / g * b / bus[g] for g, b in zip(n, rows["message_bytes"])]
    t = P.fit_all_reduce(rows).table.set_index("group_size")
    for g in (2, 8):
        assert t.loc[g, "latency_s"] == pytest.approx(lat[g], rel=1e-4)
        assert t.loc[g, "bus_bandwidth_bytes_per_s"] == pytest.approx(bus[g], rel=1e-4)


@needs_vidur
@pytest.mark.parametrize("hw_id,network", [("h100-sxm", "h100_dgx"), ("a100-sxm-80gb", "a100_dgx")])
def test_shipped_all_reduce_figures_are_the_fit_of_the_shipped_data(hw_id, network):
    fit = P.fit_all_reduce(P.load_all_reduce(network), network).table.set_index("group_size")
    ar: AllReduceProfile = load_hardware(hw_id).all_reduce
    for i, g in enumerate(ar.group_sizes):
        assert ar.latency_s[i] == pytest.approx(fit.loc[g, "latency_s"], rel=0.01)
        assert ar.bus_bandwidth_bytes_per_s[i] == pytest.approx(fit.loc[g, "bus_bandwidth_bytes_per_s"], rel=0.01)
    # against the file itself, read here: the 8-GPU rows (2 KB to 64 MiB; `size` is in bytes) are within
    # 10 % in the median (the small messages scatter between NCCL protocols, 20-60 µs)
    raw = pd.read_csv(VIDUR / "network" / network / "all_reduce.csv")
    rows = raw[(raw["num_workers"] == 8) & (raw["devices_per_node"] == 8)]
    lat, bus = load_hardware(hw_id).all_reduce_cost(8)
    predicted = lat + 2 * 7 / 8 * rows["size"].to_numpy() / bus
    assert np.median(np.abs(predicted / (rows["time_stats.all_reduce.median"].to_numpy() * 1e-3) - 1)) <= 0.10


# ---- Splitwise ----------------------------------------------------------------------------------------
SPLITWISE = data_dir() / "perf" / "splitwise_sim" / "perf_model.csv"


@pytest.mark.skipif(not SPLITWISE.is_file(), reason="Splitwise profile not found")
def test_splitwise_breakdown_adds_up_and_reads_the_file():
    hw, model = load_hardware("h100-sxm"), load_model("llama-2-70b")
    b = P.splitwise_decode_breakdown(SPLITWISE, hw, model)
    parts = b["gemm_s"] + b["elementwise_s"] + b["attention_s"] + b["all_reduce_s"]
    assert np.allclose(parts, b["device_s"], rtol=1e-12)
    raw = pd.read_csv(SPLITWISE)
    sel = raw[(raw["model"] == "llama2-70b") & (raw["hardware"] == "h100-80gb") & (raw["tensor_parallel"] == 8)
              & (raw["batch_size"] == 1) & (raw["prompt_size"] == 512) & (raw["token_size"] == 128)]
    row = b[(b["tp"] == 8) & (b["batch_size"] == 1)]
    assert float(row["measured_s"].iloc[0]) == pytest.approx(sel["token_time"].median() * 1e-3)
    # Splitwise's tp-8 step (29.8 ms, as the issue says) is far above the device-time model: fixed costs
    assert float(row["measured_s"].iloc[0]) == pytest.approx(29.8e-3, abs=0.5e-3)
    assert float(row["explained_frac"].iloc[0]) < 0.6
