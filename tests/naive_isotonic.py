"""A plain twin of specsim.cost.measured.nondecreasing: the least-squares non-decreasing fit of a
sequence by pooling adjacent violators, written to be read (each block is [sum, count]; a block below
the one before it merges into it until the sequence of block means rises)."""
from __future__ import annotations


def pool_adjacent_violators(values) -> list[float]:
    blocks: list[list[float]] = []
    for v in values:
        blocks.append([float(v), 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    out: list[float] = []
    for total, count in blocks:
        out += [total / count] * int(count)
    return out


def rows_by_m(frame, dtype: str, shapes):
    """{(n, k): {m: ms}} of one GEMM dtype's commonest kernel at the given (n, k) shapes, each column fitted
    non-decreasing in m as the measured source reads it. A shape the collector did not measure at every m
    fails here (the source fills those from its neighbours first, which this twin does not write out)."""
    g = frame[frame.gemm_dtype == dtype]
    g = g[g.kernel_source == g["kernel_source"].mode().iloc[0]]
    all_m = sorted(set(g.m))
    out = {}
    for n, k in shapes:
        series = g[(g.n == n) & (g.k == k)].set_index("m")["latency"].sort_index()
        assert list(series.index) == all_m, f"({n}, {k}) is not measured at every m"
        out[(n, k)] = dict(zip(all_m, pool_adjacent_violators(series.to_numpy())))
    return out
