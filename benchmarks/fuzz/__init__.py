"""The fuzz campaign's groups, one module each (`add_cases(g, ...)` adds the group's cases to a
`cases.Gen`), and the machinery they share: `cases` (the case, the TOML writer, the valid scenarios
and field specs every group mutates), `install` (an installation under test, and the files a case
needs), `running` (run one case and classify it) and `checks` (what an exit 0 must satisfy).
`benchmarks/fuzz_campaign.py` is the runner."""
