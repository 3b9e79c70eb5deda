"""A serving stack's load regimes: what changes in a step's cost as the load grows, by version, sourced.

A stack's efficiency and host figures (`specs.stacks`) describe one regime. Real stacks change regime
with the load, and differently from one release to the next: a pass runs from a captured CUDA graph
only up to a batch size and eagerly past it; host work hides behind the device without speculation
and not with it; an MLA model's verification runs the decode kernel or the prefill path. A stack
file lists these as an array of `[[load_regime]]` tables, one property a table:

    [[load_regime]]
    property = "cuda_graph_max"     # one of PROPERTIES
    versions = ">=0.4.7"            # where it holds: "*", "0.4.0-0.4.6" (inclusive), ">=X", "<X", "<=X", ">X", "X"
    status = "code"                 # code | docs | measured | fitted | unmeasured
    source = "..."                  # the file, page or thread it was read from
    pass = "draft_extend"           # + the property's own fields (FIELDS)
    max_batch = 160

Statuses: `code` read in the stack's source, `docs` its documentation or a maintainer's PR text,
`measured` a published measurement (the arithmetic from it in the source), `fitted` a calibration's
figure, `unmeasured` a mechanism the stack's code or docs show whose size nobody has published: its
value (when it has one) is an assumption, said in the source, and `Regimes.open_questions` lists it
for `advise`'s "what would change the answer".

Properties (units in the key, converted once here):
- `cuda_graph_max`: the largest batch a pass kind (`pass`: target_decode, verify, draft,
  draft_extend, mixed) replays from a captured graph, as `max_batch` sequences or `max_tokens`
  tokens (vLLM V1 captures token counts, so a verify of B·(K + 1) tokens falls off earlier than a
  decode of B); 0: never captured. Past it the pass runs eagerly.
- `eager_layer_us`: what a pass that runs eagerly costs beyond its graph replay, per layer
  (`value`, microseconds): the kernel launches a graph would have replayed.
- `overlap`: whether the engine's host work hides behind the device's, `plain` and `speculative`
  (booleans): it replaces the stack's `[host] overlap` where it holds. An entry that names a drafter
  family (`method`) gives `speculative` alone, for that family's speculating iterations: vLLM's async
  scheduler runs with EAGLE and MTP but turns itself off for the n-gram proposer, which needs the
  sampled tokens on the host. `operating_point.resolve` folds the result into the deployment's host
  model, so every path reads one answer.
- `verify_attention`: which path a speculative verification of `attention` ("mla") takes with
  `backend` ("default": what the version picks): `path` = "decode" (the decode kernel over the
  cached latent) or "prefill" (the prefill path: every cached token's latent up-projected to keys
  and values, a cost in batch × context the decode view never sees).
- (a drafter pass's own fixed cost is the stack's `[drafting] head_pass_us`, `specs.stacks`.)
- `dynamic_k_tax`: the iteration's cost increase, as a fraction, when a per-batch-size K schedule is
  enabled even where it drafts nothing: `low_frac` at `low_batch` sequences and `high_frac` at
  `high_batch`, linear between and held outside.
- `per_token_share`: of the per-sequence seconds a plain load curve shows beyond the roofline (the
  `device_per_seq_us` a load calibration fits), the share the stack pays per token it emits rather
  than per sequence it runs (`value`, 0..1): the output work every stack does per new token —
  appending it, checking stop conditions, detokenizing and streaming it — which a speculating
  sequence pays τ times a cycle. `calibrate load` splits its fitted per-sequence term with it.
- `spec_seq_host_us`: host work a speculating sequence of one drafter family (`method`, a specsim
  method name) pays each cycle in this stack beyond `[host] spec_per_seq_us` (`value`, microseconds):
  per-request work that only one method's worker does (SGLang's NGRAM worker builds each request's
  tree mask in a Python loop). Priced on every path: the operating point's host figure includes it.
- `spec_max_running`: the most sequences the engine runs at once when the launch speculates with
  `method` and does not set the limit itself (`value`, sequences): SGLang lowers its
  max_running_requests to 48 for EAGLE, EAGLE3, STANDALONE and NGRAM unless the launch sets it. A
  scenario that gives `[engine] max_num_seqs` (a load sweep's `max_num_seqs` column) set the limit, and
  the cap does not apply; nor does it to a launch without speculation.
- `prefill_batches`: whether a prompt's prefill chunk shares an iteration with the running decodes
  (`mixed` = true: vLLM's chunked prefill fills each iteration's token budget with the decodes first,
  then prefill chunks) or runs first, in a prefill-only iteration, while the decodes wait (`mixed` =
  false: SGLang's scheduler runs a new prefill batch whenever it can form one, and mixes decodes into
  it only with --enable-mixed-chunk, off by default). It sets the serving engine's `[engine]
  mixed_prefill` where the scenario does not. The decodes a prefill-only iteration holds back cost
  more where the requests finish at different times, as speculating ones do (each accepts its own
  number of tokens a cycle), than in a plain closed loop whose requests of one length finish together.
- `calibration` (status "fitted", written by `specsim calibrate load --write-scenario`): which
  measured load sweep the stack's figures were fitted to — `sweep`, `file`, `load_kind` and the
  load range `load_min`..`load_max` its rows covered, `n_fit_rows`, the fit's median |error|
  `fit_error_frac` (and `check_error_frac` on the rows it never saw), the `command`; and the two
  device terms the plain curve fixes: `device_scale` (every iteration's device time times it) and
  `device_per_seq_us` (added per sequence in the iteration), and `device_per_token_us` (added per
  token the iteration emits: one a plain sequence, the expected τ a speculating one — the work a
  stack does per output token, whatever the mode). Every analysis of a scenario on such a
  stack says so, and warns when it reads the stack outside that range.

`resolve_regimes(entries, version=...)` picks, per property (and pass kind, attention kind and
backend), the entry whose version range holds the version, a specific range before "*". With no
version only "*" entries apply; the properties whose entries all name a range are listed as
depending on the version.

Rules checked on load (scenarios/README.md says them to users): a version is one release
(`parse_version`: numbers and dots, optional aN/bN/rcN, .postN, .devN, a leading v; never its
leading digits alone); 'A-B' runs forwards; two entries of one key with different values may not
both hold for a release on a deployment both filters admit (`check_contradictions`; a ranged entry
beside '*' is its exception, not a contradiction); a figure a regime adds to a step is finite, >= 0
and within a plausibility bound (MAX_TERM_US, MIN/MAX_DEVICE_SCALE, MAX_EAGER_LAYER_US, MAX_TAX_FRAC).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..errors import SpecError, field_error, reject_unknown_keys
from .serving_tables import MAX_NUM_SEQS

PROPERTIES = ("cuda_graph_max", "eager_layer_us", "overlap", "verify_attention", "dynamic_k_tax", "per_token_share",
              "spec_seq_host_us", "spec_max_running", "prefill_batches", "calibration")
PASS_KINDS = ("target_decode", "verify", "draft", "draft_extend", "mixed")
STATUSES = ("code", "docs", "measured", "fitted", "unmeasured")
VERIFY_PATHS = ("decode", "prefill")
ATTENTION_KINDS = ("mla", "mha")
# fields each property takes beyond property/versions/status/source (and the optional filters)
FIELDS = {"cuda_graph_max": {"pass", "max_batch", "max_tokens"}, "eager_layer_us": {"value"},
          "overlap": {"plain", "speculative", "method"}, "verify_attention": {"attention", "backend", "path"},
          "dynamic_k_tax": {"low_batch", "low_frac", "high_batch", "high_frac"}, "per_token_share": {"value"},
          "spec_seq_host_us": {"method", "value"}, "spec_max_running": {"method", "value"},
          "prefill_batches": {"mixed"},
          "calibration": {"sweep", "file", "load_kind", "load_min", "load_max", "n_fit_rows", "fit_error_frac",
                          "check_error_frac", "command", "device_scale", "device_per_seq_us",
                          "device_per_token_us", "priced_by"}}
LOAD_KINDS = ("concurrency", "rate", "batch")
PRICED_BY = ("roofline", "measured")  # a calibration's passes: cost.pricing's two source kinds
COMMON = {"property", "versions", "status", "source", "notes", "min_tp", "max_tp", "min_memory_gb", "max_memory_gb"}


# A release as stacks tag them and PEP 440 spells it: release numbers separated by dots, then an optional
# pre-release (aN, bN, rcN), .postN and .devN, in that order, an optional leading "v". ASCII digits only
# (\d would take other scripts' digits); at most 8 numbers of at most 9 digits each: no release has more,
# and a longer run of digits is a paste, not a version (int() refuses past 4,300 digits).
_VERSION_RE = re.compile(r"v?(?P<release>[0-9]{1,9}(?:\.[0-9]{1,9}){0,7})(?:(?:a|b|rc)[0-9]{1,9})?"
                         r"(?:\.post(?P<post>[0-9]{1,9}))?(?:\.dev[0-9]{1,9})?")
VERSION_FORM = ("a release such as '0.10.1', 'v0.4.6.post5' or '0.11.0rc2' (numbers separated by dots, then "
                "optionally aN/bN/rcN, .postN, .devN, as PEP 440 spells them; a leading 'v' allowed)")


def parse_version(text: str, *, where: str = "version") -> tuple[int, ...]:
    """'0.4.6.post5' -> (0, 4, 6, 5); 'v0.10.1rc2' -> (0, 10, 1); a version names release numbers.

    The whole string must be one release (`VERSION_FORM`): 'latest', '>=0.10' or '0.5-0.3' are refused
    with a SpecError, not read as their leading digits. A pre-release or dev release compares as its
    release (the regimes read in the code hold for the release it leads to); a .postN follows its release."""
    m = _VERSION_RE.fullmatch(text.strip().lower()) if isinstance(text, str) else None
    if m is None:
        raise SpecError(f"{where} {text!r}: expected {VERSION_FORM}")
    parts = tuple(int(p) for p in m.group("release").split("."))
    if m.group("post") is not None:
        parts = parts + (0,) * max(0, 3 - len(parts)) + (int(m.group("post")),)
    return parts


def check_version(where: str, name: str, value) -> str:
    """`value` if it is one release (`parse_version`), else a field_error naming `name`, the value and the form."""
    try:
        parse_version(value)
    except SpecError:
        raise field_error(where, name, value, VERSION_FORM) from None
    return value


def _cmp(a: tuple, b: tuple) -> int:
    n = max(len(a), len(b))
    a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
    return (a > b) - (a < b)


@dataclass(frozen=True, slots=True)
class VersionRange:
    """A range of releases: '*', 'A-B' (inclusive, A no later than B), '>=A', '>A', '<A', '<=A', or one
    release 'A' (with its series: '0.5' holds 0.5.5)."""

    text: str

    def __post_init__(self) -> None:
        b = self.bounds()  # validates
        if b is not None and b[0] == "-" and _cmp(b[1], b[2]) > 0:
            raise SpecError(f"versions {self.text!r}: the range runs backwards: expected the earlier release first "
                            f"('A-B' holds A to B inclusive)")

    def bounds(self):
        t = self.text.strip()
        if t == "*":
            return None
        for op in (">=", "<=", ">", "<"):
            if t.startswith(op):
                return (op, parse_version(t[len(op):], where=f"versions {self.text!r}:"))
        if "-" in t:
            lo, hi = t.split("-", 1)
            return ("-", parse_version(lo, where=f"versions {self.text!r}:"), parse_version(hi, where=f"versions {self.text!r}:"))
        return ("=", parse_version(t, where=f"versions {self.text!r}:"))

    @property
    def is_any(self) -> bool:
        return self.text.strip() == "*"

    def holds(self, version: tuple[int, ...] | None) -> bool:
        b = self.bounds()
        if b is None:
            return True
        if version is None:
            return False
        op = b[0]
        if op == "-":
            return _cmp(version, b[1]) >= 0 and _cmp(version, b[2]) <= 0
        c = _cmp(version, b[1])
        if op == "=":  # the release and its series; 0.5 is 0.5.0, so pad before taking the prefix
            n = len(b[1])
            return _cmp(tuple(version[:n]) + (0,) * max(0, n - len(version)), b[1]) == 0
        return {">=": c >= 0, ">": c > 0, "<": c < 0, "<=": c <= 0}[op]

    def interval(self) -> tuple:
        """(low, low_inclusive, high, high_inclusive) of the releases it holds (None: unbounded); a
        release 'A' holds A up to, not including, the next release of its last number (0.5: 0.5 to 0.6)."""
        b = self.bounds()
        if b is None:
            return (None, False, None, False)
        op = b[0]
        if op == "-":
            return (b[1], True, b[2], True)
        if op == "=":
            return (b[1], True, b[1][:-1] + (b[1][-1] + 1,), False)
        return {">=": (b[1], True, None, False), ">": (b[1], False, None, False),
                "<": (None, False, b[1], False), "<=": (None, False, b[1], True)}[op]


def _version_overlap(a: VersionRange, b: VersionRange) -> tuple | None:
    """The releases both ranges hold, as an interval (VersionRange.interval), or None when they share none.
    Between any two distinct releases lies another (0.4.6 < 0.4.6.0.1 < 0.4.6.1), so only equal open ends
    leave nothing."""
    lo1, li1, hi1, hi_i1 = a.interval()
    lo2, li2, hi2, hi_i2 = b.interval()
    if lo1 is None or (lo2 is not None and _cmp(lo2, lo1) > 0):
        lo, li = lo2, li2
    elif lo2 is not None and _cmp(lo2, lo1) == 0:
        lo, li = lo1, li1 and li2
    else:
        lo, li = lo1, li1
    if hi1 is None or (hi2 is not None and _cmp(hi2, hi1) < 0):
        hi, hi_i = hi2, hi_i2
    elif hi2 is not None and _cmp(hi2, hi1) == 0:
        hi, hi_i = hi1, hi_i1 and hi_i2
    else:
        hi, hi_i = hi1, hi_i1
    if lo is not None and hi is not None:
        c = _cmp(lo, hi)
        if c > 0 or (c == 0 and not (li and hi_i)):
            return None
    return (lo, li, hi, hi_i)


def _release_text(t: tuple) -> str:
    return ".".join(map(str, t))


def _interval_text(iv: tuple) -> str:
    lo, li, hi, hi_i = iv
    v = _release_text
    if lo is None and hi is None:
        return "every release"
    if lo is not None and hi is not None and li and hi_i:
        return v(lo) if _cmp(lo, hi) == 0 else f"{v(lo)} to {v(hi)}"
    parts = ([f"{'>=' if li else '>'}{v(lo)}"] if lo is not None else []) + \
        ([f"{'<=' if hi_i else '<'}{v(hi)}"] if hi is not None else [])
    return " and ".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegimeEntry:
    """One `[[load_regime]]` table, validated (see the module docstring)."""

    property: str
    versions: VersionRange
    status: str
    source: str
    fields: Mapping[str, object]
    notes: str = ""
    min_tp: int | None = None
    max_tp: int | None = None
    min_memory_gb: float | None = None
    max_memory_gb: float | None = None

    @property
    def key(self) -> tuple:
        """What the entry is about: property plus its pass kind, attention kind, backend and method."""
        f = self.fields
        return (self.property, f.get("pass"), f.get("attention"), f.get("backend"), f.get("method"))

    def applies_to(self, *, tp: int | None, memory_gb: float | None) -> bool:
        if tp is not None:
            if self.min_tp is not None and tp < self.min_tp:
                return False
            if self.max_tp is not None and tp > self.max_tp:
                return False
        if memory_gb is not None:
            if self.min_memory_gb is not None and memory_gb < self.min_memory_gb:
                return False
            if self.max_memory_gb is not None and memory_gb >= self.max_memory_gb:
                return False
        return True

    def describe(self) -> str:
        what = ", ".join(f"{k} = {v}" for k, v in self.fields.items())
        return f"{self.property} ({what}) for versions {self.versions.text} [{self.status}: {self.source}]"


# Plausibility bounds on the figures a regime adds to a step's cost. Past them the figure is a unit or
# paste mistake (microseconds written as nanoseconds, a percentage as a fraction), and an answer built
# on it would be nonsense that looks computed, so it is refused.
MAX_TERM_US = 1e6  # a calibration's per-sequence or per-token device term: one second an iteration (a whole
#                    decode iteration of a 70B model on one GPU is tens of ms; `calibrate load` fits at most this)
MIN_DEVICE_SCALE, MAX_DEVICE_SCALE = 0.01, 100.0  # a device a hundred times off its roofline at the stack's
#                    efficiencies has the wrong hardware or model, not a stack figure (`calibrate load` fits 0.1..20)
MAX_EAGER_LAYER_US = 1e4  # 10 ms a layer for kernel launches a graph would replay: a second a pass at 100 layers
#                    (SGLang's measured figure is 126 µs, stacks/sglang.toml)
MAX_TAX_FRAC = 1.0  # a schedule that drafts nothing doubling the iteration (the measured tax is 0.07..0.22:
#                    stacks/vllm.toml); past it, a percentage written where a fraction belongs


def _number(where: str, key: str, v, *, integer: bool = False, minimum: float = 0.0,
            maximum: float | None = None, why: str = "") -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < minimum \
            or (integer and v != int(v)):
        bound = f" and <= {maximum:g}" + (f" ({why})" if why else "") if maximum is not None else ""
        raise field_error(where, key, v, f"{'an integer' if integer else 'a finite number'} >= {minimum:g}{bound}")
    if maximum is not None and v > maximum:
        raise field_error(where, key, v, f"a number <= {maximum:g}" + (f" ({why})" if why else ""))
    return int(v) if integer else float(v)


def _check_method(where: str, f: dict) -> None:
    if not isinstance(f.get("method"), str) or not f["method"].strip():
        raise field_error(where, "method", f.get("method"), "a drafter family's method name (e.g. 'prompt_lookup', "
                                                            "'eagle'): what the figure holds for")


def entry_from_dict(raw: dict, *, where: str) -> RegimeEntry:
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: expected a [[load_regime]] table")
    prop = raw.get("property")
    if prop not in PROPERTIES:
        raise field_error(where, "property", prop, f"one of {', '.join(PROPERTIES)}")
    where = f"{where} ({prop})"
    reject_unknown_keys(where, raw, COMMON | FIELDS[prop])
    for key in ("versions", "status", "source"):
        if not str(raw.get(key, "")).strip():
            raise field_error(where, key, raw.get(key), "a value (required: every regime names its versions, "
                                                         "status and source)")
    status = raw["status"]
    if status not in STATUSES:
        raise field_error(where, "status", status, f"one of {', '.join(STATUSES)}")
    try:
        versions = VersionRange(str(raw["versions"]))
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None
    # in the file's order: FIELDS holds sets, whose order changes with the hash seed, and the fields are
    # printed in reports that must read the same from run to run
    f = {k: v for k, v in raw.items() if k in FIELDS[prop]}
    if prop == "cuda_graph_max":
        if f.get("pass") not in PASS_KINDS:
            raise field_error(where, "pass", f.get("pass"), f"one of {', '.join(PASS_KINDS)}")
        given = [k for k in ("max_batch", "max_tokens") if k in f]
        if len(given) != 1:
            raise field_error(where, "max_batch", f.get("max_batch"), "exactly one of max_batch or max_tokens")
        f[given[0]] = _number(where, given[0], f[given[0]], integer=True)
    elif prop == "eager_layer_us":
        if "value" in f:
            f["value"] = _number(where, "value", f["value"], maximum=MAX_EAGER_LAYER_US,
                                 why="microseconds a layer; more than 10 ms is a unit mistake")
        elif status != "unmeasured":
            raise field_error(where, "value", None, "a number of microseconds (only an unmeasured property may "
                                                    "leave it out)")
    elif prop == "overlap":
        if "method" in f:
            _check_method(where, f)
            if "plain" in f:
                raise field_error(where, "plain", f["plain"], "absent: an entry that names a method says how that "
                                  "method's speculating iterations run (speculative); a plain iteration drafts with none")
        for key in ("speculative",) if "method" in f else ("plain", "speculative"):
            if not isinstance(f.get(key), bool):
                raise field_error(where, key, f.get(key), "true or false")
    elif prop == "verify_attention":
        if f.get("attention") not in ATTENTION_KINDS:
            raise field_error(where, "attention", f.get("attention"), f"one of {', '.join(ATTENTION_KINDS)}")
        f.setdefault("backend", "default")
        if not isinstance(f["backend"], str) or not f["backend"].strip():
            raise field_error(where, "backend", f["backend"], "a backend name, or 'default'")
        if f.get("path") not in VERIFY_PATHS:
            raise field_error(where, "path", f.get("path"), f"one of {', '.join(VERIFY_PATHS)}")
    elif prop == "calibration":
        if status != "fitted":
            raise field_error(where, "status", status, "'fitted' (a calibration is a fit)")
        for key in ("sweep", "file", "command"):
            if not str(f.get(key, "")).strip():
                raise field_error(where, key, f.get(key), "a value")
        if f.get("priced_by", "roofline") not in PRICED_BY:
            raise field_error(where, "priced_by", f.get("priced_by"), f"one of {', '.join(PRICED_BY)}: the source "
                              "that priced the passes the terms were fitted through")
        if f.get("load_kind") not in LOAD_KINDS:
            raise field_error(where, "load_kind", f.get("load_kind"), f"one of {', '.join(LOAD_KINDS)}")
        for key in ("load_min", "load_max", "fit_error_frac"):
            f[key] = _number(where, key, f.get(key))
        if "check_error_frac" in f:
            f["check_error_frac"] = _number(where, "check_error_frac", f["check_error_frac"])
        f["n_fit_rows"] = _number(where, "n_fit_rows", f.get("n_fit_rows"), integer=True, minimum=0)
        f["device_scale"] = _number(where, "device_scale", f.get("device_scale", 1.0), minimum=MIN_DEVICE_SCALE,
                                    maximum=MAX_DEVICE_SCALE, why="a factor on the roofline's device time; further "
                                    "off, the hardware or the model is wrong, not the stack")
        for key in ("device_per_seq_us", "device_per_token_us"):
            f[key] = _number(where, key, f.get(key, 0.0), maximum=MAX_TERM_US,
                             why="microseconds an iteration; more than a second is a unit mistake")
        if f["load_max"] < f["load_min"]:
            raise field_error(where, "load_max", f["load_max"], f">= load_min = {f['load_min']:g}")
    elif prop == "per_token_share":
        f["value"] = _number(where, "value", f.get("value"))
        if f["value"] > 1.0:
            raise field_error(where, "value", f["value"], "a share in [0, 1]")
    elif prop == "prefill_batches":
        if not isinstance(f.get("mixed"), bool):
            raise field_error(where, "mixed", f.get("mixed"), "true (prefill chunks share iterations with the decodes) "
                              "or false (prefill-only iterations first, the decodes waiting)")
    elif prop in ("spec_seq_host_us", "spec_max_running"):
        _check_method(where, f)
        if prop == "spec_seq_host_us":
            f["value"] = _number(where, "value", f.get("value"), maximum=MAX_TERM_US,
                                 why="microseconds a sequence a cycle; more than a second is a unit mistake")
        else:
            f["value"] = _number(where, "value", f.get("value"), integer=True, minimum=1,
                                 maximum=MAX_NUM_SEQS, why="running sequences, [engine] max_num_seqs' own bound")
    elif prop == "dynamic_k_tax":
        for key in ("low_batch", "high_batch"):
            f[key] = _number(where, key, f.get(key), integer=True, minimum=1)
        for key in ("low_frac", "high_frac"):
            f[key] = _number(where, key, f.get(key), maximum=MAX_TAX_FRAC,
                             why="a fraction of the iteration: 0.2 is 20 %")
        if f["high_batch"] <= f["low_batch"]:
            raise field_error(where, "high_batch", f["high_batch"], f"> low_batch = {f['low_batch']}")
    filters = {}
    for key in ("min_tp", "max_tp"):
        if key in raw:
            filters[key] = _number(where, key, raw[key], integer=True, minimum=1)
    for key in ("min_memory_gb", "max_memory_gb"):
        if key in raw:
            filters[key] = _number(where, key, raw[key])
    return RegimeEntry(property=prop, versions=versions, status=status, source=str(raw["source"]).strip(),
                       fields=MappingProxyType(f), notes=str(raw.get("notes", "")), **filters)


def parse_entries(raw, *, where: str = "stack") -> tuple[RegimeEntry, ...]:
    """A stack file's `load_regime` array (absent: none)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise field_error(where, "load_regime", raw, "an array of [[load_regime]] tables")
    entries = tuple(entry_from_dict(r, where=f"{where} [[load_regime]] #{i + 1}") for i, r in enumerate(raw))
    check_contradictions(entries, where=where)
    return entries


def _filters_overlap(a: RegimeEntry, b: RegimeEntry) -> bool:
    """Whether some deployment meets both entries' tp and memory filters (tp inclusive, memory [min, max))."""
    inf = math.inf
    if max(a.min_tp or 1, b.min_tp or 1) > min(a.max_tp or inf, b.max_tp or inf):
        return False
    lo = max(a.min_memory_gb or 0.0, b.min_memory_gb or 0.0)
    hi = min(inf if a.max_memory_gb is None else a.max_memory_gb, inf if b.max_memory_gb is None else b.max_memory_gb)
    return lo < hi


def check_contradictions(entries, *, where: str = "stack") -> None:
    """Refuse two entries that say different things about one property (and pass kind, attention kind,
    backend) for a release both hold, on a deployment both filters admit: `resolve_regimes` would keep
    whichever came first and lose the other without a word. A '*' entry beside a ranged one is no
    contradiction: the ranged one is the exception, by design (the module docstring)."""
    for i, a in enumerate(entries):
        for j in range(i + 1, len(entries)):
            b = entries[j]
            if a.key != b.key or dict(a.fields) == dict(b.fields) or a.versions.is_any != b.versions.is_any:
                continue
            if not _filters_overlap(a, b):
                continue
            both = _version_overlap(a.versions, b.versions)
            if both is None:
                continue
            raise SpecError(f"{where}: [[load_regime]] #{i + 1} and #{j + 1} contradict: both set {a.property}"
                            f"{_key_text(a.key)} for {_interval_text(both)} (versions {a.versions.text!r} and "
                            f"{b.versions.text!r}) to different values ({_value_text(a)} vs {_value_text(b)}): "
                            f"expected one value per release: narrow a range so they do not overlap, or remove one")


@dataclass(frozen=True, slots=True, kw_only=True)
class Regimes:
    """A stack's regimes at one version (see the module docstring). SI units.

    graph_max_batch / graph_max_tokens: pass kind -> the largest captured batch (sequences / tokens);
    a kind absent from both has no cap known (always replayed). eager_layer_s: the per-layer cost of an
    eager pass (0: none known). overlap: (plain, speculative) or None (the stack's [host] overlap);
    spec_overlap: drafter family -> whether its speculating iterations overlap (beside `overlap`).
    verify_path: attention kind -> "decode" | "prefill" for the default backend. dynamic_k_tax:
    (low_batch, low_frac, high_batch, high_frac) or None. mixed_prefill: the prefill_batches entry's
    `mixed` (None: none applies; the engine's default, mixed). applied: the entries in force.
    open_questions: what would change the answer — unmeasured entries in force, and properties
    whose entries all depend on a version the scenario did not name."""

    version: str | None = None
    graph_max_batch: Mapping[str, int] = field(default_factory=dict)
    graph_max_tokens: Mapping[str, int] = field(default_factory=dict)
    eager_layer_s: float = 0.0
    overlap: tuple[bool, bool] | None = None
    spec_overlap: Mapping[str, bool] = field(default_factory=dict)
    verify_path: Mapping[str, str] = field(default_factory=dict)
    dynamic_k_tax: tuple | None = None
    per_token_share: float | None = None
    spec_seq_host_s: Mapping[str, float] = field(default_factory=dict)
    spec_max_running: Mapping[str, int] = field(default_factory=dict)
    mixed_prefill: bool | None = None
    calibration: Mapping | None = None
    applied: tuple = ()
    open_questions: tuple = ()

    @property
    def active(self) -> bool:
        return bool(self.applied)

    @property
    def device_scale(self) -> float:
        """A load calibration's factor on every iteration's device time (1 without one)."""
        return 1.0 if self.calibration is None else float(self.calibration["device_scale"])

    @property
    def device_per_seq_s(self) -> float:
        """A load calibration's device seconds per sequence an iteration (0 without one)."""
        return 0.0 if self.calibration is None else float(self.calibration["device_per_seq_us"]) * 1e-6

    @property
    def device_per_token_s(self) -> float:
        """A load calibration's seconds per token an iteration emits (0 without one)."""
        return 0.0 if self.calibration is None else float(self.calibration.get("device_per_token_us", 0.0)) * 1e-6

    def graph_captured(self, kind: str, *, n_seqs: int, n_tokens: int) -> bool:
        """Whether a pass of `kind` over n_seqs sequences and n_tokens tokens replays a graph."""
        b = self.graph_max_batch.get(kind)
        t = self.graph_max_tokens.get(kind)
        if b is not None and n_seqs > b:
            return False
        if t is not None and n_tokens > t:
            return False
        return True

    def dynamic_k_frac(self, n_seqs: float) -> float:
        """The dynamic-K tax at a batch of n_seqs (0 without one)."""
        if self.dynamic_k_tax is None:
            return 0.0
        lo_b, lo_f, hi_b, hi_f = self.dynamic_k_tax
        x = min(max(float(n_seqs), lo_b), hi_b)
        return lo_f + (hi_f - lo_f) * (x - lo_b) / (hi_b - lo_b)

    def lines(self) -> list[str]:
        """The regimes in force, one line each, for `describe` and reports."""
        return [e.describe() for e in self.applied]


def resolve_regimes(entries, *, version: str | None = None, tp: int | None = None,
                    memory_gb: float | None = None, attention: str | None = None, where: str = "stack") -> Regimes:
    """The regimes at `version` (a release number; None: only the '*' entries) on a deployment of
    `tp` devices with `memory_gb` each (entries can hold only for some), for a target whose attention
    is `attention` ("mla" or "mha"; None: every attention kind's entries)."""
    v = None if version is None else parse_version(version, where=f"{where}: stack_version")
    chosen: dict[tuple, RegimeEntry] = {}
    by_key: dict[tuple, list[RegimeEntry]] = {}
    for e in entries:
        if not e.applies_to(tp=tp, memory_gb=memory_gb):
            continue
        if attention is not None and e.property == "verify_attention" and e.fields["attention"] != attention:
            continue
        by_key.setdefault(e.key, []).append(e)
        if not e.versions.holds(v):
            continue
        prev = chosen.get(e.key)
        if prev is None or (prev.versions.is_any and not e.versions.is_any):
            chosen[e.key] = e
    open_q = []
    for key, es in by_key.items():
        if key not in chosen and v is None:
            ranges = "; ".join(f"{e.versions.text}: {_value_text(e)}" for e in es)
            open_q.append(f"{key[0]}{_key_text(key)} depends on the stack's version, which the scenario does not "
                          f"name (stack_version): {ranges}")
    graph_b, graph_t, verify, seq_host, max_running, spec_overlap = {}, {}, {}, {}, {}, {}
    eager, overlap, tax, cal, share, mixed = 0.0, None, None, None, None, None
    applied = []
    for key, e in chosen.items():
        f = e.fields
        if e.status == "unmeasured":
            open_q.append(f"{e.property}{_key_text(key)} (versions {e.versions.text}): unmeasured — "
                          + (f"assumed {_value_text(e)}; " if _has_value(e) else "not charged; ") + e.source)
        if not _has_value(e):
            continue
        applied.append(e)
        if e.property == "cuda_graph_max":
            if "max_batch" in f:
                graph_b[f["pass"]] = int(f["max_batch"])
            else:
                graph_t[f["pass"]] = int(f["max_tokens"])
        elif e.property == "eager_layer_us":
            eager = float(f["value"]) * 1e-6
        elif e.property == "overlap" and "method" in f:
            spec_overlap[f["method"]] = bool(f["speculative"])
        elif e.property == "overlap":
            overlap = (bool(f["plain"]), bool(f["speculative"]))
        elif e.property == "verify_attention":
            if f.get("backend", "default") == "default":
                verify[f["attention"]] = f["path"]
        elif e.property == "dynamic_k_tax":
            tax = (int(f["low_batch"]), float(f["low_frac"]), int(f["high_batch"]), float(f["high_frac"]))
        elif e.property == "per_token_share":
            share = float(f["value"])
        elif e.property == "spec_seq_host_us":
            seq_host[f["method"]] = float(f["value"]) * 1e-6
        elif e.property == "spec_max_running":
            max_running[f["method"]] = int(f["value"])
        elif e.property == "prefill_batches":
            mixed = bool(f["mixed"])
        elif e.property == "calibration":
            cal = MappingProxyType(dict(f, source=e.source))
    return Regimes(version=version, graph_max_batch=MappingProxyType(graph_b), graph_max_tokens=MappingProxyType(graph_t),
                   eager_layer_s=eager, overlap=overlap, spec_overlap=MappingProxyType(spec_overlap), verify_path=MappingProxyType(verify),
                   dynamic_k_tax=tax, per_token_share=share, spec_seq_host_s=MappingProxyType(seq_host),
                   spec_max_running=MappingProxyType(max_running), mixed_prefill=mixed, calibration=cal,
                   applied=tuple(applied),
                   open_questions=tuple(open_q))


def _has_value(e: RegimeEntry) -> bool:
    return e.property != "eager_layer_us" or "value" in e.fields


def _key_text(key: tuple) -> str:
    extra = [str(x) for x in key[1:] if x is not None]
    return f" [{', '.join(extra)}]" if extra else ""


def _value_text(e: RegimeEntry) -> str:
    f = dict(e.fields)
    for k in ("pass", "attention", "backend", "method"):
        f.pop(k, None)
    if e.property == "eager_layer_us" and "value" in f:
        return f"{f['value']:g} µs"
    return ", ".join(f"{k} = {v}" for k, v in f.items()) or "no value"


NO_REGIMES = Regimes()


def calibration_notes(regimes: Regimes, *, batch: float | None = None, rate_per_s: float | None = None) -> list[str]:
    """What a stack fitted to a load sweep says about itself: the sweep, the fit's error and the load
    range it covered, and a warning when the load an analysis reads (a running batch, or an arrival
    rate for a rate sweep) lies outside that range. Empty for a stack nobody calibrated."""
    c = regimes.calibration
    if c is None:
        return []
    unit = {"concurrency": "concurrent requests", "rate": "requests/s", "batch": "sequences a batch"}[c["load_kind"]]
    lo, hi = c["load_min"], c["load_max"]
    check = (f", {c['check_error_frac']:.1%} on the rows it never saw" if "check_error_frac" in c else "")
    out = [f"calibrated from load sweep {c['sweep']!r} of {c['file']} ({c['n_fit_rows']} fit rows, median |error| "
           f"{c['fit_error_frac']:.1%}{check}; loads {lo:g}–{hi:g} {unit}; {c['command']})"]
    load = rate_per_s if c["load_kind"] == "rate" else batch
    if load is not None and (load < lo * (1 - 1e-9) or load > hi * (1 + 1e-9)):
        out.append(f"WARNING: this answer reads the calibrated stack at {load:g} {unit}, outside the {lo:g}–{hi:g} "
                   f"its sweep covered: the fitted figures are extrapolated there")
    return out


__all__ = ["PROPERTIES", "PASS_KINDS", "STATUSES", "LOAD_KINDS", "RegimeEntry", "Regimes", "VersionRange", "NO_REGIMES",
           "VERSION_FORM", "calibration_notes", "check_contradictions", "check_version",
           "entry_from_dict", "parse_entries", "parse_version", "resolve_regimes"]
