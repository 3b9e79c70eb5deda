"""The verify-cost chart's measured curve: Vidur's per-layer operator times for the scenario's part,
layer shape and tensor-parallel degree, read back here with the csv module as a second reading."""
import csv
import statistics
from collections import defaultdict

import pytest

from specsim.specs.data import data_path
from specsim.specs.scenario import load_scenario
from specsim.speculation.operating_point import resolve
from specsim.presentation.sweep import measured_verify_points

OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
       "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")


def _csv_layer_sums(path, tp):
    """Median over repeats of each operator, summed over the layer, per token count, in seconds."""
    times = defaultdict(lambda: defaultdict(list))
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if int(float(row["num_tensor_parallel_workers"])) != tp:
                continue
            t = int(float(row["num_tokens"]))
            for op in OPS:
                times[t][op].append(float(row[f"time_stats.{op}.median"]))
    return {t: sum(statistics.median(v) for v in ops.values()) * 1e-3 for t, ops in times.items()}


def test_llama_70b_on_h100_reads_the_llama_2_70b_layer_at_its_tp():
    # Llama-3.1-70B's layer has Llama-2-70B's shape (8192 wide, 64 heads, 8 KV heads, FFN 28672);
    # only the vocabulary differs, and it does not enter a layer
    op = resolve(load_scenario("llama-70b-h100-chat"))
    pts = measured_verify_points(op)
    assert set(pts["series"]) == {"measured", "specsim"}
    meas = pts[pts["series"] == "measured"].set_index("tokens_in_flight")
    assert set(meas["vidur_model"]) == {"Llama-2-70b-hf"} and set(meas["tp"]) == {op.deployment.tp} == {4}
    ref = _csv_layer_sums(data_path("perf/vidur/compute/h100/meta-llama/Llama-2-70b-hf/mlp.csv"), tp=4)
    for t in (1, 64, 512, 4096):
        assert meas.loc[t, "time_s"] == pytest.approx(ref[t], rel=1e-9)
        assert meas.loc[t, "time_vs_one_token"] == pytest.approx(ref[t] / ref[1], rel=1e-9)
    # the layer is flat where the verify pass lives (well under 2x at 64 tokens) and not at 4096
    assert meas.loc[64, "time_vs_one_token"] < 1.5 < 4 < meas.loc[4096, "time_vs_one_token"]
    model = pts[pts["series"] == "specsim"].set_index("tokens_in_flight")
    # the fitted kernel curve follows the measurement on this held-out tp (a median within 10 %)
    err = (model["time_s"] / meas["time_s"] - 1).abs()
    assert err.median() < 0.10


def test_no_profile_no_measured_curve():
    # the seed's idealised part was never profiled, and Llama-3.1-8B was profiled on an A100 only
    assert measured_verify_points(resolve(load_scenario("seed-70b-hbm"))).empty
    assert measured_verify_points(resolve(load_scenario("llama-8b-h100-code-pld"))).empty
    a100 = resolve(load_scenario("llama-8b-h100-code-pld"), hardware="a100-sxm-80gb")
    assert set(measured_verify_points(a100)["vidur_model"]) == {"Meta-Llama-3-8B"}


def test_the_sweep_chart_draws_it(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    from specsim.presentation.figures import BY_NAME, FigureInputs
    from specsim.presentation.sweep import verify_roofline_points

    op = resolve(load_scenario("llama-70b-h100-chat"))
    roof = verify_roofline_points(op, batch_sizes=(1, 64))
    inputs = FigureInputs(point=op, roofline=roof, measured_verify=measured_verify_points(op))
    data, title = BY_NAME["verify_cost"].rows(inputs)
    assert {"model", "measured", "specsim"} == set(data["series"])
    fig = BY_NAME["verify_cost"].draw(data, title, inputs)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(lab.startswith("measured: one layer") and "Llama-2-70b-hf, tp 4" in lab for lab in labels)
    assert "B = 1" in labels and "B = 64" in labels
