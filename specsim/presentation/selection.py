"""Choosing rows of a tidy sweep DataFrame (`presentation.sweep.COLUMNS`): the figures' declarations
(`figures`) pick the rows a figure draws and the panels (`plots`) reduce them the same way, so the
choice is made by one function both read, and neither needs the other to make it."""
from __future__ import annotations

import numpy as np


def best_rows(df, by: list):
    """Rows with the highest speedup within each group of `by` (the best K / tree size there)."""
    idx = df.groupby(by, observed=True)["speedup"].idxmax()
    return df.loc[idx.values].sort_values(by)


def nearest(values, wanted):
    """The value among `values` closest to `wanted` (a grid's value for a reference point off the grid)."""
    values = np.asarray(sorted(set(values)))
    return values[np.argmin(np.abs(values - wanted))]
