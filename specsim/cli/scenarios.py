"""`specsim scenarios list|show`: the shipped scenarios, and one resolved with its sources."""
from __future__ import annotations

from .common import add_cost_source_flag, print_json


def register(sub) -> None:
    sc = sub.add_parser("scenarios", help="list the shipped scenarios or show one resolved, with sources",
                        description="Browse the scenario catalog. `show` resolves a scenario into its operating "
                        "point (hardware, target, stack, drafter, acceptance, memory) and says where each value "
                        "came from. The file format is documented field by field in scenarios/README.md.")
    scs = sc.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = scs.add_parser("list", help="one line per shipped scenario")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_list)
    p = scs.add_parser("show", help="the resolved configuration of one scenario and its sources")
    p.add_argument("scenario", help="scenario name or TOML path")
    add_cost_source_flag(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_show)


def _list(args) -> int:
    from ..specs.scenario import list_scenarios

    rows = [{"name": s.name, "hardware": s.hardware, "target": s.target, "method": s.method,
             "tables": sorted(s.sections), "description": s.description} for s in list_scenarios()]
    if args.json:
        print_json(rows)
        return 0
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        print(f"{r['name']:<{width}}  {r['description']}")
    return 0


def _show(args) -> int:
    from ..speculation.operating_point import resolve_id

    op = resolve_id(args.scenario, cost_source=getattr(args, "cost_source", None))
    if args.json:
        out = op.to_dict()
        out["tables"] = {k: dict(v) for k, v in op.sections.items()}
        print_json(out)
        return 0
    print(op.describe())
    if op.sections:
        print(f"  analysis tables: {', '.join(f'[{k}]' for k in op.sections)}")
    return 0
