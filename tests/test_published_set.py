"""The shipped replay set of published speculative-decoding measurements (data/published/): its shape.

Nothing here is about prediction errors; these are properties of the data file itself.
"""
import pandas as pd
import pytest

from specsim.calibration.replay import OPTIONAL_COLUMNS, REQUIRED_COLUMNS
from specsim.specs.data import data_path
from specsim.specs.hardware import load_hardware
from specsim.specs.models import load_model
from specsim.specs.stacks import load_stack
from specsim.speculation.families import METHODS

EXAMPLES = "tests/data/published_examples.csv"


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return pd.read_csv(data_path("published/speculative_decoding.csv"), dtype={"id": str})


def test_size_and_batched_rows(table):
    assert len(table) >= 60
    assert (table["batch_size"] > 1).sum() >= 15


def test_ids_unique_and_columns_known(table):
    assert table["id"].is_unique
    assert set(REQUIRED_COLUMNS) <= set(table.columns)
    known = set(REQUIRED_COLUMNS) | set(OPTIONAL_COLUMNS)
    assert all(c in known or c.startswith("x_") for c in table.columns)


def test_every_row_cites_its_page(table):
    src = table["source"].fillna("")
    assert (src.str.len() > 80).all(), table.loc[src.str.len() <= 80, "id"].tolist()


def test_holds_a_measured_slowdown(table):
    assert (table["measured_speedup"] < 1).any()
    assert (table["measured_speedup"] > 0).all()


def test_existing_examples_are_carried_unchanged(table):
    ex = pd.read_csv(EXAMPLES, dtype={"id": str})
    merged = ex.merge(table, on="id", suffixes=("", "_set"))
    assert len(merged) == len(ex)
    for col in ("source", "measured_speedup", "tau", "k", "batch_size", "hardware", "target"):
        a, b = merged[col], merged[f"{col}_set"]
        assert ((a == b) | (a.isna() & b.isna())).all(), col


def test_catalog_ids_and_methods_resolve(table):
    assert table["method"].isin(METHODS).all()
    for hw in table["hardware"].unique():
        load_hardware(hw)
    for name in pd.concat([table["target"], table["drafter"]]).dropna().unique():
        load_model(name)
    for stack in table["stack"].dropna().unique():
        load_stack(stack)


def test_acceptance_figures_are_possible(table):
    # tau counts the bonus token: 1 <= tau <= k + 1 for a chain or a tree of depth k
    t = table.dropna(subset=["tau"])
    assert (t["tau"] >= 1).all()
    with_k = t.dropna(subset=["k"])
    assert (with_k["tau"] <= with_k["k"] + 1).all()
    a = table["alpha"].dropna()
    assert ((a > 0) & (a < 1)).all()
