"""Draft/target step-cost ratios of published pairs against the model's (issue 26).

    python benchmarks/draft_target_ratios.py [data/published/draft_target_ratios.csv]

Each pair's two models were measured alone on one deployment (each at batch 1, its own published
tokens/s); the published ratio c = t_draft / t_target = v_target / v_draft. The model's is one plain
step of each on the same deployment, the stack's per-pass cost included
(`specsim.calibration.replay.draft_target_ratios`). Rows marked recalled are quoted from memory and
left out of the median.
"""
import sys

from specsim.calibration.replay import draft_target_ratios


def main(argv: list[str]) -> int:
    r = draft_target_ratios(argv[0] if argv else "published/draft_target_ratios.csv")
    t = r.table
    print(f"{'pair':<36} {'hw x n':<18} {'stack':<9} {'published c':>11} {'model c':>8} {'error':>7}   "
          f"{'draft tok/s pub/model':>22} {'target tok/s pub/model':>23}")
    for row in t.to_dict(orient="records"):
        mark = " (recalled)" if row["recalled"] else ""
        print(f"{row['pair']:<36} {row['hardware'] + ' x' + str(row['n_devices']):<18} {row['stack']:<9} "
              f"{row['published_ratio']:>11.3f} {row['model_ratio']:>8.3f} {row['relative_error']:>+7.0%}   "
              f"{row['drafter_tokens_per_s']:>10.1f} / {row['model_drafter_tokens_per_s']:<9.1f} "
              f"{row['target_tokens_per_s']:>10.1f} / {row['model_target_tokens_per_s']:<9.1f}{mark}")
    read = t[~t["recalled"]]
    print(f"\n{len(read)} pairs read first-hand: median |error| of the ratio {read['relative_error'].abs().median():.1%}, "
          f"worst {read['relative_error'].abs().max():.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
