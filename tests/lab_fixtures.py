"""Shared fixtures of the integration tests and the fault suite: the lab (real Debian 12 hosts over SSH).

- ``lab``: the :class:`scapforge_lab.Lab` under ``$SCAPFORGE_LAB_HOME`` (session).
- ``lab_host``: one running :class:`scapforge_lab.LabHost` (session). ``SCAPFORGE_LAB_HOST``
  names it (``lab2``: started when not running, so several sessions can test side by side);
  under pytest-xdist each worker gets its own host (gw0 -> lab1, gw1 -> lab2: ``make test``
  runs two); otherwise the first running host is reused, or lab1 is booted. A host that was
  already running is reset to the lab baseline first. A host this fixture booted
  is stopped at the end of the session, unless ``SCAPFORGE_KEEP_LAB=1``.
- ``lab_inventory``: Path of a generated inventory of this session's host alone (group
  ``lab``, SSH as scapforge with become (sudo)); inventory/lab.yml is still written for people.

The lab needs root and the Debian packages of ``make deps``; without them these fixtures
fail with the reason rather than skip.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "lab"))

from scapforge_lab import Lab  # noqa: E402

LAB_INVENTORY = REPO_ROOT / "inventory" / "lab.yml"
#: the lab's controller copy of the Debian 12 datastream (lab/lab.py build writes it).
DATASTREAM = Path(os.environ.get("SCAPFORGE_LAB_HOME", "/var/lib/scapforge-lab"), "content", "ssg-debian12-ds.xml")
XCCDF = "http://checklists.nist.gov/xccdf/1.2"


@pytest.fixture(scope="session")
def lab():
    """The Lab object (builds nothing by itself)."""
    if os.geteuid() != 0:
        pytest.fail("the lab needs root (mount, systemd-nspawn, ip)")
    for tool in ("systemd-nspawn", "debootstrap", "tinyproxy"):
        if not shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
            pytest.fail("%s missing: run `make deps`" % tool)
    return Lab(log=lambda line: print("lab: " + line, file=sys.stderr))


def _worker_host():
    """``lab<N+1>`` for pytest-xdist worker ``gw<N>``, None outside xdist: two workers never
    share a host (every test resets its host)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return "lab%d" % (int(worker[2:]) + 1) if worker.startswith("gw") and worker[2:].isdigit() else None


@pytest.fixture(scope="session")
def lab_host(lab):
    """One running lab host (LabHost: name, address, user, key_path, root, pid, ssh())."""
    wanted = os.environ.get("SCAPFORGE_LAB_HOST") or _worker_host()
    running = {h.name: h for h in lab.hosts()}
    if wanted:
        started = wanted not in running
        host = running.get(wanted) or lab.start([wanted])[0]
    else:
        started = not running
        host = list(running.values())[0] if running else lab.up(1)[0]
    if not started:  # e.g. the host `make demo` remediated: tests start from the lab baseline
        host = lab.reset([host.name])[0]
    lab.write_inventory(LAB_INVENTORY)
    yield host
    if started and os.environ.get("SCAPFORGE_KEEP_LAB") != "1":
        if len(lab.hosts()) > 1:
            lab.stop(host.name)
            lab.write_inventory(LAB_INVENTORY)
        else:
            lab.down()
            if LAB_INVENTORY.is_file():
                LAB_INVENTORY.unlink()


@pytest.fixture(scope="module", autouse=True)
def baseline_host(request):
    """Every test file that uses the lab starts on a freshly reset host: what an earlier file
    left (a package installed, a unit failed) never decides a later file's result, whichever
    order pytest-xdist hands the files out in."""
    if any(item.module is request.module and "lab_host" in item.fixturenames for item in request.session.items):
        lab, host = request.getfixturevalue("lab"), request.getfixturevalue("lab_host")
        lab.reset([host.name])
    yield


@pytest.fixture(scope="session")
def lab_inventory(lab, lab_host, tmp_path_factory):
    """Path of an inventory (YAML) of this session's own host only, under the session's temp
    directory. Never inventory/lab.yml: ``lab.py reset`` and the other xdist worker's teardown
    rewrite that file from the hosts running at that instant, and a host that is being reset
    is missing from it for a moment (CI of stop 13: every later test of gw1 found no lab2)."""
    return lab.write_inventory(tmp_path_factory.mktemp("lab-inventory") / "lab.yml", [lab_host])


def run_remediate(inventory, limit, runs_dir, extra=None, *flags):
    """Run the main job (playbooks/remediate.yml) for real; returns the CompletedProcess.

    ``limit`` is the -l pattern, ``runs_dir`` becomes scapforge_runs_dir, ``extra`` more
    extra vars (JSON), ``flags`` more ansible-playbook arguments such as --check. Unless
    ``extra`` names one, the lesson store is ``<runs_dir>/memory``: a test's runs learn only
    from each other, never from another test or from ~/.scapforge.
    """
    extra_vars = dict(extra or {}, scapforge_runs_dir=str(runs_dir))
    extra_vars.setdefault("scapforge_memory_path", str(Path(runs_dir) / "memory"))
    return subprocess.run(
        ["ansible-playbook", "playbooks/remediate.yml", "-i", str(inventory), "-l", limit,
         "-e", json.dumps(extra_vars), *flags],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=1200, check=False,
    )


@pytest.fixture(scope="session")
def remediate():
    """The :func:`run_remediate` function, for tests that run the main job."""
    return run_remediate


def render_fix(rule, values):
    """The rule's Ansible fix text from the lab's datastream, each ``<xccdf:sub>`` replaced by
    ``values[<Value id without its prefix>]``, quoted (tests that run a fix with chosen values)."""
    from lxml import etree
    assert DATASTREAM.is_file(), "%s not found: run `make lab-build`" % DATASTREAM
    tree = etree.parse(str(DATASTREAM))
    fix = tree.find(f".//{{{XCCDF}}}Rule[@id='xccdf_org.ssgproject.content_rule_{rule}']"
                    f"/{{{XCCDF}}}fix[@system='urn:xccdf:fix:script:ansible']")
    assert fix is not None, rule
    parts = [fix.text or ""]
    for sub in fix:
        parts.append(json.dumps(str(values[sub.get("idref").split("content_value_", 1)[1]])))
        parts.append(sub.tail or "")
    return "".join(parts)
