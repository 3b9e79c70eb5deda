"""`specsim hardware list|show` and `specsim models list|show|import`."""
from __future__ import annotations

import argparse

from ..errors import SpecError
from ..specs.hardware import list_hardware, load_hardware
from ..specs.models import list_models, load_hf_config, load_model, model_from_hf_config, params_summary
from .common import print_json, table


def register(sub) -> None:
    hw = sub.add_parser("hardware", help="list or show hardware profiles (with sources)",
                        description="Browse the hardware catalog.")
    hws = hw.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = hws.add_parser("list", help="one line per profile")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_hardware_list)
    p = hws.add_parser("show", help="every figure of one profile with its source")
    p.add_argument("id", help="hardware id or TOML path")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_hardware_show)

    mo = sub.add_parser("models", help="list, show or import model shapes",
                        description="Browse the model catalog or import a Hugging Face config.json.")
    mos = mo.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = mos.add_parser("list", help="one line per model")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_models_list)
    p = mos.add_parser("show", help="shape, derived parameter counts and sources of one model")
    p.add_argument("id", help="model id, alias or TOML path")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_models_show)
    p = mos.add_parser("import", help="make a catalog TOML from a Hugging Face config.json",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("config", help="path to config.json")
    p.add_argument("--id", required=True, help="id for the new model")
    p.add_argument("--tokenizer", required=True, help="tokenizer family (drafter compatibility check)")
    p.add_argument("--name", help="display name")
    p.add_argument("--out", help="write the TOML here (default: print it)")
    p.set_defaults(func=_models_import)


def _hardware_row(h) -> dict:
    return {"id": h.id, "name": h.name, "kind": h.kind, "memory_gb": h.memory_bytes / 1e9,
            "mem_bandwidth_gb_s": h.mem_bandwidth_bytes_per_s / 1e9,
            "bf16_tflops": h.peak_flops_per_s.get(h.compute_dtype_for("bf16"), 0) / 1e12,
            "ridge_flops_per_byte_bf16": h.ridge_flops_per_byte("bf16")}


def _hardware_list(args) -> int:
    rows = [_hardware_row(h) for h in list_hardware()]
    if args.json:
        print_json(rows)
        return 0
    print(f"{'id':<18} {'memory GB':>9} {'BW GB/s':>8} {'bf16 TF/s':>9} {'ops:byte':>8}  name")
    for r in rows:
        print(f"{r['id']:<18} {r['memory_gb']:>9.1f} {r['mem_bandwidth_gb_s']:>8.0f} {r['bf16_tflops']:>9.1f} "
              f"{r['ridge_flops_per_byte_bf16']:>8.1f}  {r['name']}")
    return 0


def _hardware_show(args) -> int:
    h = load_hardware(args.id)
    data = {**_hardware_row(h), "peak_tflops": {k: v / 1e12 for k, v in h.peak_flops_per_s.items()},
            "ridge_flops_per_byte": h.ridge_points,
            "efficiency": {"bandwidth_frac": h.efficiency.bandwidth_frac, "compute_frac": h.efficiency.compute_frac,
                           "step_overhead_us": h.efficiency.step_overhead_s * 1e6,
                           "per_layer_overhead_us": h.efficiency.per_layer_overhead_s * 1e6},
            "interconnect_gb_s": h.interconnect_bandwidth_bytes_per_s / 1e9,
            "interconnect_latency_us": h.interconnect_latency_s * 1e6, "llc_mb": h.llc_bytes / 1e6,
            "notes": h.notes, "sources": dict(h.sources)}
    if args.json:
        print_json(data)
        return 0
    rows = [(k, f"{v:.4g}" if isinstance(v, float) else str(v)) for k, v in data.items()
            if k not in ("sources", "peak_tflops", "ridge_flops_per_byte", "efficiency")]
    rows += [(f"peak {k} TFLOP/s", f"{v:g}") for k, v in data["peak_tflops"].items()]
    rows += [(f"ops:byte {k}", f"{v:.1f}") for k, v in data["ridge_flops_per_byte"].items()]
    rows += [(f"efficiency {k}", f"{v:g}") for k, v in data["efficiency"].items()]
    print(table(rows, title=f"hardware {h.id}"))
    print("\nsources:")
    for k, v in data["sources"].items():
        print(f"  {k}: {v}")
    return 0


def _models_list(args) -> int:
    models = list_models()
    rows = [{"id": m.id, "name": m.name, "params_b": m.n_params / 1e9, "weight_format": m.weight_format,
             "weight_gb": m.weight_bytes / 1e9, "tokenizer": m.tokenizer, "aliases": list(m.aliases)} for m in models]
    if args.json:
        print_json(rows)
        return 0
    print(f"{'id':<20} {'params B':>9} {'format':<12} {'weights GB':>10}  {'tokenizer':<12} aliases")
    for r in rows:
        print(f"{r['id']:<20} {r['params_b']:>9.3f} {r['weight_format']:<12} {r['weight_gb']:>10.2f}  "
              f"{r['tokenizer']:<12} {', '.join(r['aliases'])}")
    return 0


def _models_show(args) -> int:
    m = load_model(args.id)
    shape = {k: getattr(m, k) for k in ("name", "architecture", "n_layers", "n_encoder_layers", "hidden_size", "n_heads",
                                          "n_kv_heads", "head_dim", "ffn_size", "ffn_kind", "vocab_size", "tied_embeddings",
                                          "tokenizer", "weight_format", "weight_bits", "kv_cache_dtype", "max_context",
                                          "sliding_window", "n_mtp_layers")}
    data = {"id": m.id, **shape, "moe": None if m.moe is None else vars_of(m.moe),
            "mla": None if m.mla is None else vars_of(m.mla), "aliases": list(m.aliases),
            **params_summary(m), "sources": dict(m.sources)}
    if args.json:
        print_json(data)
        return 0
    rows = [(k, str(v)) for k, v in data.items() if k != "sources"]
    print(table(rows, title=f"model {m.id}"))
    print("\nsources:")
    for k, v in data["sources"].items():
        print(f"  {k}: {v}")
    return 0


def vars_of(obj) -> dict:
    return {f: getattr(obj, f) for f in obj.__dataclass_fields__}


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise SpecError(f"cannot write {v!r} to TOML")


def dump_toml(table_: dict) -> str:
    scalars = [f"{k} = {_toml_value(v)}" for k, v in table_.items() if not isinstance(v, dict)]
    blocks = []
    for k, v in table_.items():
        if isinstance(v, dict):
            blocks.append(f"\n[{k}]\n" + "\n".join(f"{kk} = {_toml_value(vv)}" for kk, vv in v.items()))
    return "\n".join(scalars) + "\n" + "".join(blocks) + "\n"


def _models_import(args) -> int:
    table_ = model_from_hf_config(load_hf_config(args.config), model_id=args.id, tokenizer=args.tokenizer, name=args.name)
    text = dump_toml(table_)
    if args.out is not None:
        from ..presentation.output import write_file_atomically

        write_file_atomically(args.out, text, flag="--out")
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return 0
