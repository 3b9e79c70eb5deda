"""`specsim data path|list`: where the shipped data lives (traces, corpora, published profiles,
example inputs), so a command run from any folder can name a shipped file."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser(
        "data", help="where the shipped data is: `specsim data path REL`, `specsim data list`",
        description="The data folder ($SPECSIM_DATA, else the copy shipped in the package): traces, corpora, "
        "published profiles and example inputs, each with its licence and README. `path REL` prints the "
        "absolute path of a file in it (for another command's argument: specsim replay \"$(specsim data path "
        "published/speculative_decoding.csv)\"); `list` prints the folder and its files.")
    sub2 = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = sub2.add_parser("path", help="the absolute path of a file in the data folder")
    q.add_argument("relative", help="a path inside the data folder, e.g. traces/azure_llm_inference_2023/"
                   "AzureLLMInferenceTrace_conv.csv")
    q.set_defaults(func=_path)
    q = sub2.add_parser("list", help="the data folder and the files in it")
    q.set_defaults(func=_list)


def _path(args) -> int:
    from ..specs.data import data_path

    print(data_path(args.relative))
    return 0


def _list(args) -> int:
    from ..specs.data import data_dir

    root = data_dir()
    print(root)
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        print(f"  {f.relative_to(root)}  ({f.stat().st_size / 1e6:.2f} MB)")
    return 0
