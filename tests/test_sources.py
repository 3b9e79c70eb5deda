"""The source key that leave-one-source-out groups rows by (`specsim.calibration.sources`), on
hand-made citations written in the styles the shipped tables use; the expected keys are read off the
rule in the module's docstring."""
import pandas as pd
import pytest

from specsim.calibration.sources import source_groups, source_key


@pytest.mark.parametrize("text, key", [
    # a repository's files are one source, whatever commit or file
    ("Spec-Bench Leaderboard.md (hemingkx/Spec-Bench, Xia et al. 2024), A100-80GB", "hemingkx/spec-bench"),
    ("Spec-Bench Leaderboard.md (hemingkx/Spec-Bench, commit fd2c1cd, 'Leaderboard updated' 2025)", "hemingkx/spec-bench"),
    ("yuqiz7/llm-inference-bench, README.md at commit fb7e809 (section 'W1 M3', table 'sglang')",
     "yuqiz7/llm-inference-bench"),
    ("ROCm/rocm-blogs blogs/software-tools-optimization/speculative-decoding---deep-dive/README.md, commit 2ca42c4",
     "rocm/rocm-blogs"),
    # an issue or PR is its own source: named right after the repository, or in its URL anywhere
    ("Tencent/AngelSlim issue #163 'How to reproduce' (github.com/Tencent/AngelSlim/issues/163, Zzsf11)",
     "tencent/angelslim#163"),
    ("NVIDIA/TensorRT-LLM pull request #5146 '[feat] one engine'", "nvidia/tensorrt-llm#5146"),
    ("foo/bar PR #12: the table", "foo/bar#12"),
    ("vLLM issue #20780 (github.com/vllm-project/vllm/issues/20780, 2025-07-10)", "vllm-project/vllm#20780"),
    ("SGLang PR #4716 'Fix EAGLE3 for llama3.3 70b' (https://github.com/sgl-project/sglang/pull/4716)",
     "sgl-project/sglang#4716"),
    # not a repository: a rate, a ratio; then the first repository named
    ("3.5 tok/s at 4/4/16 on waynehacking8/trtllm-triton-serving, commit d430ba9", "waynehacking8/trtllm-triton-serving"),
    # an issue mentioned later of a file source does not split it
    ("foo/bar README.md table 2 (the setup of vllm-project/vllm issue #9 is not used)", "foo/bar"),
    # no repository: the text before the first comma or parenthesis
    ("MagicDec  Blog, table 1", "magicdec blog"),
    ("MagicDec blog (index.html), table 2", "magicdec blog"),
])
def test_source_key_follows_the_rule(text, key):
    assert source_key(text) == key


def test_an_empty_source_is_its_own_key_and_case_does_not_split():
    assert source_key("", fallback="row-7") == "row-7"
    assert source_key(None, fallback="row-8") == "row-8"
    assert source_key(float("nan"), fallback="row-9") == "row-9"
    assert source_key("Foo/Bar issue #3") == source_key("github.com/foo/bar/issues/3 (a comment)") == "foo/bar#3"


def test_the_shipped_replay_set_joins_the_leaderboard_years_and_keeps_issues_apart():
    """Spec-Bench's 2024, October 2024 and 2025 tables share identical rows (twins): one source. The
    shipped file's hand-written x_source_key split them in three; every other x_source_key maps to one key."""
    from specsim.specs.data import data_path

    t = pd.read_csv(data_path("published/speculative_decoding.csv"))
    keys = pd.Series([source_key(s, fallback=i) for s, i in zip(t["source"], t["id"])], index=t.index)
    spec = t["x_source_key"].astype(str).str.startswith("specbench")
    assert set(keys[spec]) == {"hemingkx/spec-bench"}
    assert not (keys[~spec] == "hemingkx/spec-bench").any()
    # a twin: the RTX 3090 Medusa row is the same number in the 2024 and 2025 tables
    twins = t.set_index("id").loc[["specbench-rtx-3090-v7b-medusa", "specbench2025-rtx-3090-v7b-medusa"],
                                  ["tau", "measured_speedup"]]
    assert twins.iloc[0].tolist() == twins.iloc[1].tolist()
    others = t.loc[~spec].assign(key=keys[~spec]).groupby("x_source_key")["key"].nunique()
    assert (others == 1).all()
    assert keys[~spec].nunique() == t.loc[~spec, "x_source_key"].nunique()


def test_the_shipped_load_sweeps_group_siblings():
    from specsim.specs.data import data_path

    t = pd.read_csv(data_path("published/load_sweeps.csv"))
    per_sweep = t.groupby("sweep")["source"].apply(lambda s: {source_key(x) for x in s})
    assert all(len(v) == 1 for v in per_sweep)  # a sweep's rows cite one source
    key = per_sweep.map(lambda v: next(iter(v)))
    assert key[key.index.str.startswith("specforge339")].nunique() == 1
    assert key[key.index.str.startswith("yuqiz7")].nunique() == 1
    assert key.nunique() == 6  # 10 sweeps: the two SpecForge #339 ones share a source, the four yuqiz7 ones another


def test_source_groups_join_items_that_share_any_key():
    assert source_groups(["a", "b", "a", "c"]) == [0, 1, 0, 2]
    # transitively: x shares 'p' with y, y shares 'q' with z
    assert source_groups([{"p"}, {"p", "q"}, {"q"}, {"r"}]) == [0, 0, 0, 1]
    assert source_groups([{"r"}, {"q"}, {"p", "q"}, {"p", "r"}]) == [0, 0, 0, 0]
    assert source_groups([]) == []
