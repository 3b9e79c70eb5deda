"""decoder.registry: the decoder's drafters declared once, keyed by the analytical drafter families, and
every consumer (the command line, RunConfig, the acceptance calibration, validate) reading it."""
from __future__ import annotations

import argparse
import tomllib
from dataclasses import fields

import pytest

from specsim.decoder.registry import DRAFTERS, OPTIONS, REGISTRY, TREE_BASES, calibrated, family_of, validated
from specsim.decoder.run import RunConfig, option_conflicts
from specsim.errors import SpecError
from specsim.speculation.families import FAMILIES


def test_registry_is_keyed_by_the_analytical_families():
    assert set(REGISTRY) <= set(FAMILIES)
    for family, entries in REGISTRY.items():
        assert entries and all(d.family == family for d in entries)
    names = [d.name for ds in REGISTRY.values() for d in ds]
    assert len(names) == len(set(names)) == len(DRAFTERS)


def test_an_entry_with_an_unknown_family_is_refused():
    from specsim.decoder.registry import DecoderDrafter

    with pytest.raises(ValueError, match=r"family 'prompt-lookup' is not in speculation.families"):
        DecoderDrafter(name="x", family="prompt-lookup", help="", options=(), gives_q=False, build=None)


def test_every_option_is_a_run_config_field_and_refused_where_not_read():
    names = {f.name for f in fields(RunConfig)}
    assert set(OPTIONS) <= names
    for name, d in DRAFTERS.items():
        for base in (TREE_BASES if d.base_options else (None,)):
            read = set(d.reads(base))
            assert set(option_conflicts(name, set(OPTIONS), tree_base=base or "layer-skip")) == set(OPTIONS) - read


def test_rejection_needs_a_drafter_that_reports_q():
    for name, d in DRAFTERS.items():
        cfg = dict(drafter=name, verify="rejection", temperature=1.0)
        if d.gives_q:
            RunConfig(**cfg)
        else:
            with pytest.raises(SpecError, match=rf"--verify rejection --drafter {name}: rejection sampling needs"):
                RunConfig(**cfg)


def test_the_command_line_offers_the_registry():
    from specsim.cli.decoder import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    run = parser._subparsers._group_actions[0].choices["decoder"]._subparsers._group_actions[0].choices["run"]
    by_dest = {a.dest: a for a in run._actions}
    assert tuple(by_dest["drafter"].choices) == tuple(DRAFTERS)
    assert tuple(by_dest["tree_base"].choices) == TREE_BASES


def test_calibration_and_validate_read_the_registry():
    from specsim.calibration.acceptance_runs import AcceptanceRunConfig
    from specsim.calibration.validate import ValidateConfig

    assert calibrated() == tuple(n for n, d in DRAFTERS.items() if d.fixed_k is not None)
    AcceptanceRunConfig(drafters=calibrated())
    with pytest.raises(SpecError, match=r"--drafters 'prompt-lookup-earliest': expected among prompt-lookup, layer-skip"):
        AcceptanceRunConfig(drafters=("prompt-lookup-earliest",))
    assert ValidateConfig().drafters == validated() == ("prompt-lookup", "layer-skip")
    with pytest.raises(SpecError, match=r"--drafters 'eagle': validate predicts the chain drafters prompt-lookup and"):
        ValidateConfig(drafters=("eagle",))


def test_the_shipped_calibrations_name_the_family_of_their_drafter():
    """Each shipped calibration (written by `calibrate acceptance`) names its decoder drafter and the family
    the cost model prices it as: they agree with the registry's."""
    from specsim.specs.calibrations import calibrations_dir

    files = sorted(calibrations_dir().glob("*.toml"))
    assert files
    for path in files:
        table = tomllib.loads(path.read_text())
        assert table["method"] == family_of(table["drafter"]), path.name
