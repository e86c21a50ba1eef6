"""Issue 17 item 1: the change ledger, on a real lab host.

aide_periodic_cron_checking's vendor fix installs aide (19 packages with its dependencies on
the lab's Debian 12) and adds a line to root's crontab (the cron module without cron_file,
through crontab(1)); OpenSCAP still reports fail after it (its check wants another form), so
the attempt is judged ineffective and must be undone: no crontab line left, the packages it
installed purged, and the host report's ``ledger`` saying so, entry by entry. cron is
installed before the run, so the crontab line goes only if root's crontab file is restored
(purging cron would hide a crontab left behind).
"""

from __future__ import annotations

import json

import pytest

RULE = "aide_periodic_cron_checking"


@pytest.fixture(scope="module")
def aide_run(lab, lab_host, lab_inventory, tmp_path_factory, remediate):
    host = lab.reset([lab_host.name])[0]
    host.ssh("sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends cron "
             ">/tmp/apt.log 2>&1 || (tail -20 /tmp/apt.log; false)", timeout=600)
    assert host.ssh("sudo test -e /var/spool/cron/crontabs/root && echo yes || echo no").stdout.strip() == "no"
    had_aide = host.ssh("dpkg-query -W -f '${Status}' aide 2>/dev/null || true").stdout
    runs = tmp_path_factory.mktemp("runs")
    proc = remediate(lab_inventory, host.name, runs, {"scapforge_rules": [RULE]})
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    summary = json.loads((runs / "latest" / "summary.json").read_text())
    report = summary["hosts"][host.name]
    crontab = host.ssh("sudo cat /var/spool/cron/crontabs/root 2>&1; sudo crontab -l -u root 2>&1; "
                       "command -v crontab || echo no-crontab-command").stdout
    timer = host.ssh("systemctl is-enabled dailyaidecheck.timer 2>&1 || true").stdout.strip()
    aide = host.ssh("dpkg-query -W -f '${Status}' aide 2>/dev/null || true").stdout
    html = (runs / "latest" / "report.html").read_text()
    return {"host": host, "report": report, "crontab": crontab, "aide": aide, "had_aide": had_aide,
            "timer": timer, "html": html, "runs": runs}


def _vendor(report):
    return report["rules"][RULE]["attempt_log"][0]


def test_the_ineffective_fix_leaves_no_crontab_line(aide_run):
    log = _vendor(aide_run["report"])
    assert log["verdict"] == "ineffective", log
    assert "aide --check" not in aide_run["crontab"], aide_run["crontab"]
    assert "no crontab for root" in aide_run["crontab"] and "no-crontab-command" not in aide_run["crontab"]
    assert log["rolled_back"] is True, log


def test_the_package_it_installed_is_purged(aide_run):
    assert "install ok installed" not in aide_run["had_aide"]
    assert "install ok installed" not in aide_run["aide"], aide_run["aide"]
    timer = aide_run["timer"]  # aide-common's timer went with it: no unit file left
    assert timer == "not-found" or "No such file or directory" in timer, timer


def test_the_ledger_names_each_change_undone_and_verified(aide_run):
    ledger = [e for e in aide_run["report"]["ledger"] if e["rule"] == RULE]
    by_kind = {(e["kind"], e["target"]): e for e in ledger}
    cron = by_kind[("cron", "root: run AIDE check")]
    assert (cron["attempt"], cron["state"], cron["verified"]) == (1, "undone", True), cron
    assert "aide --check" in cron["change"]
    aide = by_kind[("package", "aide")]
    assert (aide["attempt"], aide["change"], aide["state"], aide["verified"]) == (1, "installed", "undone", True), aide
    assert [e for e in ledger if e["state"] != "undone" or not e["verified"]] == []
    assert ("package", "cron") not in by_kind  # installed before the run: not the attempt's to purge
    assert ("package", "aide-common") in by_kind
    assert {e["kind"] for e in ledger} == {"cron", "package"}


def test_the_report_never_claims_an_undo_that_did_not_happen(aide_run):
    html = aide_run["html"]
    assert "Change ledger" in html
    assert "run AIDE check" in html
    left = [e for e in aide_run["report"]["ledger"] if e["state"] == "left"]
    if not left:
        assert "data-ledger-left" not in html
