"""ComplianceAsCode's own rule test scenarios, a fixed seeded sample, our loop beside the SSG fix
(issue 21 item 4; bench/scenarios.py runs any number of them, README "Speed").

Each scenario runs twice on this worker's lab host, reset before each run: once remediated by
our main job (no model, one rule, a fresh memory store), once by the content's own Ansible fix
for the rule. Both are judged by an independent one-rule oscap scan. Our fail -> pass count
must be at least the SSG fix's on the same sample, and every ``.pass.sh`` host must be left
as it was by our loop: /etc (path, mode, owner, sha256) and the package list.

The scenarios are read from ``../shared/scenarios/debian12`` (never copied into the
repository; ``SCAPFORGE_SCENARIOS`` names another directory in the same layout).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: the sample: drawn by bench/scenarios.py's ``sample`` over the runnable scenarios (no VM hint,
#: a fix expected), spread over families; the seed fixes which ones.
SAMPLE, SEED = 12, 1


def _bench():
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("bench_scenarios", ROOT / "bench" / "scenarios.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scenario_dir() -> Path:
    wanted = os.environ.get("SCAPFORGE_SCENARIOS")
    candidates = [ROOT.parent / "shared" / "scenarios" / "debian12", Path("/work/shared/scenarios/debian12")]
    for candidate in ([Path(wanted)] if wanted else []) + candidates:
        if (candidate / "index.json").is_file():
            return candidate
    pytest.fail("no scenario directory: ../shared/scenarios/debian12 (or SCAPFORGE_SCENARIOS) holds index.json")
    raise AssertionError  # for the type checker: pytest.fail raises


def the_sample(bench, index):
    runnable = [sc for sc in bench.select_scenarios(index) if not bench.skip_reason(sc) and not bench.expects_no_fix(sc)]
    return bench.sample(runnable, SAMPLE, SEED)


@pytest.fixture(scope="module")
def records(lab, lab_host, tmp_path_factory):
    bench = _bench()
    directory = scenario_dir()
    index = bench.load_index(str(directory))
    from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import Catalog

    catalog = Catalog.from_path(str(lab.datastream))
    args = argparse.Namespace(ours_strategy="mitogen_linear", ssg_strategy="linear")
    runner = bench.HostRunner(lab_host.name, str(directory), index["profile"], catalog,
                              str(tmp_path_factory.mktemp("scenarios")), args)
    out = []
    for scenario in the_sample(bench, index):
        for remediator in bench.REMEDIATORS:
            out.append(runner.run(scenario, remediator))
    lab.reset([lab_host.name])  # the next module starts from the baseline
    return bench, out


def test_the_sample_spreads_over_families():
    bench = _bench()
    picked = the_sample(bench, bench.load_index(str(scenario_dir())))
    assert len(picked) == SAMPLE
    assert len({sc["family"] for sc in picked}) >= 6


def test_every_scenario_ran_and_set_up_as_its_kind(records):
    bench, recs = records
    errors = [(r["rule"], r["scenario"], r["remediator"], r["error"][:300]) for r in recs if r.get("error")]
    assert not errors
    counted = [r for r in recs if bench.counted(r)]
    print("\n" + bench.table(bench.summarize(recs)))
    assert len(counted) >= 2 * (SAMPLE - 3), [(r["rule"], r["scenario"], r["initial"]) for r in recs if not bench.counted(r)]


def test_our_fail_to_pass_is_at_least_the_ssg_fixes(records):
    bench, recs = records
    total = bench.summarize(recs)
    ours, theirs = total["product"]["total"], total["ssg"]["total"]
    diffs = bench.differences(recs)
    assert ours["fail"] == theirs["fail"] and ours["fail"] >= 4
    assert ours["fail_to_pass"] >= theirs["fail_to_pass"], diffs


def test_our_loop_leaves_every_pass_scenario_host_as_it_was(records):
    _bench_module, recs = records
    ours = [r for r in recs if r["remediator"] == "product" and r["kind"] == "pass" and r.get("initial_ok")]
    assert ours, "the sample holds pass scenarios"
    assert [(r["rule"], r["scenario"], r.get("changed")) for r in ours if not (r["final"] == "pass" and r["host_unchanged"])] == []
