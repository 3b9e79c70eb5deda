"""A decoder run's options as the command line spells them, shared by the run's config (`run`) and
the drafter registry (`registry`), which both refuse a bad option naming its flag: the flag of a
config field, the error that names it, the parser of a tree given as Medusa choices, and the tree
drafter's default topology."""
from __future__ import annotations

from ..errors import SpecError
from ..speculation.trees import from_choices

_FLAG = {"k": "-k", "m_values": "--m"}
# the tree drafter's topology unless --tree says otherwise: 6 nodes, two ranks at depth 1, depth 3 on rank 0
DEFAULT_TREE = "0;1;0,0;1,0;0,0,0"


def flag(name: str) -> str:
    """The command-line flag of a config field: tokens -> --tokens, n_prompts -> --n-prompts, k -> -k."""
    return _FLAG.get(name, "--" + name.replace("_", "-"))


def show(value) -> str:
    """An option's value as a reader typed it: a list comma-separated, a string quoted."""
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value) or "''"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def bad_option(name: str, value, expected: str) -> SpecError:
    """The one-line refusal of config field `name` holding `value`, naming its flag."""
    return SpecError(f"{flag(name)} {show(value)}: expected {expected}")


def parse_tree(text: str) -> tuple[tuple[int, ...], ...]:
    """'0;1;0,0' -> ((0,), (1,), (0, 0)): a Medusa choice list, ';'-separated paths of comma-separated
    sibling ranks; every prefix of a path must be a path too."""
    expected = ("a non-empty list of ';'-separated paths of comma-separated ranks >= 0, each path's prefix "
                "itself a path, e.g. 0;1;0,0")
    if not isinstance(text, str) or not text.strip():
        raise bad_option("tree", text, expected)
    try:
        paths = tuple(tuple(int(r) for r in part.split(",")) for part in text.split(";"))
    except ValueError:
        raise bad_option("tree", text, expected) from None
    try:
        from_choices(paths)
    except SpecError as exc:
        raise bad_option("tree", text, f"{expected} ({exc})") from None
    if len(set(paths)) != len(paths):
        raise bad_option("tree", text, f"{expected}, each path once")
    return paths
