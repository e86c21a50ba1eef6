"""The run's reports from a real short run on a lab host (issue 10 items 3 and 4).

One run of the main job on a handful of rules: one the vendor fix remediates
(accounts_umask_etc_login_defs), one no running host can pass (kernel_config_bug, escalated),
one under an active waiver (accounts_umask_etc_profile, skipped/waived) and one whose waiver
expired (sshd_disable_root_login, worked as usual), with a throwaway evidence key. Then
report.html is opened in Debian's chromium (headless, through selenium and chromium-driver):
no console error, a screenshot that shows the chart (tests/output/report.png), bars that
match the counts; the first screen at 1,400 x 900 (tests/output/report-first-screen.png)
holds the summary, whose counts are the host report's; junit.xml is read back with
junitparser; the ARF files are real ARF; the play ends naming report.html with three lines
for the host; the signed evidence bundle verifies and fails after one changed byte; a
--check run prints the plan at default verbosity; trestle loads the OSCAL assessment results.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from junitparser import Failure, JUnitXml, Skipped
from lxml import etree

RULES = ["accounts_umask_etc_login_defs", "kernel_config_bug", "accounts_umask_etc_profile", "sshd_disable_root_login"]
WAIVERS = [
    {"rule": "accounts_umask_etc_profile", "reason": "<i>shared</i> build hosts need umask 022", "expires": "2099-12-31"},
    {"rule": "sshd_disable_root_login", "reason": "break-glass root login", "expires": "2020-01-01"},
]
SCREENSHOT = Path(__file__).resolve().parents[1] / "output" / "report.png"
#: report.html's first screen at 1,400 x 900, as Debian's chromium draws it (issue 20 item 1).
FIRST_SCREEN = Path(__file__).resolve().parents[1] / "output" / "report-first-screen.png"
ROOT = Path(__file__).resolve().parents[2]
ARF_NS = "http://scap.nist.gov/schema/asset-reporting-format/1.1"
#: shadow-utils' backups, which the health check's probe account (useradd, userdel) rewrites
BACKUPS_DIGEST = "sudo stat -c '%n %a %U %Y' /etc/passwd- /etc/shadow- /etc/group- /etc/gshadow- 2>&1; " \
                 "sudo sha256sum /etc/passwd- /etc/shadow- /etc/group- /etc/gshadow- 2>&1"


@pytest.fixture(scope="module")
def run(lab, lab_host, lab_inventory, tmp_path_factory, remediate):
    runs = tmp_path_factory.mktemp("runs")
    key = tmp_path_factory.mktemp("evidence-key") / "evidence"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "throwaway", "-f", str(key)], check=True)
    backups_before = lab_host.ssh(BACKUPS_DIGEST).stdout
    proc = remediate(lab_inventory, lab_host.name, runs, {"scapforge_rules": RULES, "scapforge_waivers": WAIVERS,
                                                          "scapforge_evidence_key": str(key)})
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    run_dir = (runs / "latest").resolve()
    report = json.loads((run_dir / "hosts" / ("%s.json" % lab_host.name)).read_text())
    return {"dir": run_dir, "host": lab_host.name, "report": report, "stdout": proc.stdout, "key": key,
            "backups": (backups_before, lab_host.ssh(BACKUPS_DIGEST).stdout)}


def test_check_mode_prints_the_plan_at_default_verbosity(lab_host, lab_inventory, tmp_path, remediate):
    """First in the file: on the freshly reset host, before the run below remediates the rule."""
    proc = remediate(lab_inventory, lab_host.name, tmp_path, {"scapforge_rules": ["accounts_umask_etc_login_defs"]},
                     "--check")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    plan = [line for line in proc.stdout.splitlines() if "accounts_umask_etc_login_defs: skipped [check_mode]: " in line]
    assert plan and "vendor fix would run" in plan[0], proc.stdout[-4000:]
    assert "%s: pass " % lab_host.name in proc.stdout and "check mode: nothing changed" in proc.stdout


def test_host_report_carries_titles_ids_waivers_and_diffs(run):
    rules = run["report"]["rules"]
    umask = rules["accounts_umask_etc_login_defs"]
    assert (umask["outcome"], umask["reason"]) == ("remediated", "verified")
    assert umask["title"] and umask["severity"] in ("low", "medium", "high")
    # SSG's Debian 12 content carries SRG and CCI references, no CCE and no DISA STIG ids
    ids = umask["identifiers"]
    assert ids["srg"][0].startswith("SRG-OS-") and ids["cci"][0].startswith("CCI-")
    assert (ids["cce"], ids["stig_id"], ids["stig_rule"]) == ([], [], [])
    entry = umask["attempt_log"][0]
    assert "lineinfile" in entry["tasks"]
    diff = "".join(d["diff"] for d in entry["diffs"])
    assert "/etc/login.defs" in diff and "+UMASK" in diff and "077" in diff
    assert rules["kernel_config_bug"]["outcome"] == "escalated"
    waived = rules["accounts_umask_etc_profile"]
    assert (waived["outcome"], waived["reason"], waived["attempts"]) == ("skipped", "waived", 0)
    assert waived["waiver"] == dict(WAIVERS[0])
    assert "2099-12-31" in waived["detail"]
    assert run["report"]["expired_waivers"] == [WAIVERS[1]]
    assert rules["sshd_disable_root_login"]["outcome"] == "remediated"  # the expired waiver does not hold
    rows = run["report"]["scan_results"]
    assert rows["accounts_umask_etc_login_defs"]["before"] == "fail"
    assert rows["accounts_umask_etc_login_defs"]["after"] == "pass"


def test_the_health_checks_probe_account_leaves_the_account_backups_as_they_were(run):
    before, after = run["backups"]
    assert "/etc/shadow-" in before and before == after
    assert any(row.get("event") == "health" for row in map(json.loads, (run["dir"] / "events.jsonl").read_text().splitlines()))


def test_arf_before_and_after_are_fetched(run):
    for name in ("before", "after"):
        path = run["dir"] / "arf" / ("%s-%s.xml" % (run["host"], name))
        assert run["report"]["arf"][name] == "arf/%s-%s.xml" % (run["host"], name)
        root = etree.parse(str(path)).getroot()
        assert root.tag == "{%s}asset-report-collection" % ARF_NS
        assert path.stat().st_size > 100_000
    after = (run["dir"] / "arf" / ("%s-after.xml" % run["host"])).read_bytes()
    assert b"content_rule_accounts_umask_etc_login_defs" in after


def test_junit_has_a_case_per_rule_with_results(run):
    suites = list(JUnitXml.fromfile(str(run["dir"] / "junit.xml")))
    assert [s.name for s in suites] == [run["host"]]
    cases = {c.name: c for c in suites[0]}
    assert set(run["report"]["scan_results"]) <= set(cases)
    assert cases["accounts_umask_etc_login_defs"].is_passed
    assert isinstance(cases["kernel_config_bug"].result[0], Failure)
    assert cases["kernel_config_bug"].result[0].message.startswith("environment:")
    skipped = cases["accounts_umask_etc_profile"].result[0]
    assert isinstance(skipped, Skipped) and skipped.message == "waived: %s (until 2099-12-31)" % WAIVERS[0]["reason"]


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit non-interlaced PNG (what chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        line = raw[y * (stride + 1):(y + 1) * (stride + 1)]
        kind, cur = line[0], bytearray(line[1:])
        for i in range(stride):
            a = cur[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if kind == 1:
                cur[i] = (cur[i] + a) & 255
            elif kind == 2:
                cur[i] = (cur[i] + b) & 255
            elif kind == 3:
                cur[i] = (cur[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(cur))
        prev = cur
    return width, height, [bytes(r[i:i + 3]) for r in rows for i in range(0, stride, channels)]


def test_report_html_loads_in_chromium_without_errors_and_shows_the_chart(run):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    binary = shutil.which("chromium") or "/usr/bin/chromium"
    driver_path = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    assert os.path.exists(binary) and os.path.exists(driver_path), "make deps installs chromium and chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1200"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        driver.get((run["dir"] / "report.html").as_uri())
        assert driver.title == "scapforge run %s" % run["report"]["run_id"]
        chart = driver.find_element(By.CSS_SELECTOR, "svg.chart")
        driver.execute_script("arguments[0].scrollIntoView()", chart)
        scale = float(chart.get_attribute("data-scale"))
        bars = chart.find_elements(By.CSS_SELECTOR, "rect.bar")
        drawn = [b for b in bars if int(b.get_attribute("data-count"))]
        assert drawn, "no bar with a count"
        for rect in drawn:  # what the browser laid out, not only what the file says
            assert rect.size["width"] == pytest.approx(int(rect.get_attribute("data-count")) * scale, abs=1.5)
            assert rect.size["height"] == pytest.approx(12, abs=1)
        counts = {}
        for rect in bars:
            key = (rect.get_attribute("data-scan"), rect.get_attribute("data-result"))
            counts[key] = counts.get(key, 0) + int(rect.get_attribute("data-count"))
        before = run["report"]["before"]
        assert counts[("before", "pass")] == before.get("pass", 0)
        assert counts[("before", "fail")] == before.get("fail", 0)
        waived_row = driver.find_element(By.CSS_SELECTOR, "tr[data-rule='accounts_umask_etc_profile']")
        assert "Waived until 2099-12-31: <i>shared</i> build hosts" in waived_row.text  # shown as text
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        assert chart.screenshot(str(SCREENSHOT))
        errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        assert errors == []
    finally:
        driver.quit()
    print("\nreport.html screenshot (chart): %s" % SCREENSHOT)
    width, height, pixels = _png_pixels(SCREENSHOT.read_bytes())
    assert width > 200 and height > 20
    green, red = bytes((0x2e, 0x9e, 0x55)), bytes((0xd0, 0x45, 0x3b))
    assert pixels.count(green) > 50 and pixels.count(red) > 20  # the pass and fail bars are painted
    assert len(set(pixels)) > 10  # not a blank image


def _chromium_args(*extra):
    binary = shutil.which("chromium") or "/usr/bin/chromium"
    assert os.path.exists(binary), "make deps installs chromium"
    return [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,900", *extra]


def test_the_first_screen_holds_the_summary_with_the_host_reports_counts(run, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    page = (run["dir"] / "report.html").as_uri()
    FIRST_SCREEN.parent.mkdir(parents=True, exist_ok=True)
    if FIRST_SCREEN.exists():
        FIRST_SCREEN.unlink()
    shot = subprocess.run(_chromium_args("--user-data-dir=%s" % (tmp_path / "profile"),
                                         "--screenshot=%s" % FIRST_SCREEN, page),
                          capture_output=True, text=True, timeout=120, check=False)
    assert shot.returncode == 0 and FIRST_SCREEN.is_file(), shot.stderr[-2000:]
    width, height, pixels = _png_pixels(FIRST_SCREEN.read_bytes())
    assert (width, height) == (1400, 900) and len(set(pixels)) > 10
    print("\nreport.html first screen: %s" % FIRST_SCREEN)
    # the layout chromium computes at that size: where #summary's box is, what its counts say
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver"),
                              options=options)
    try:
        driver.get(page)
        probe = driver.execute_script("""
            const box = document.getElementById('summary').getBoundingClientRect();
            const first = document.querySelector('body > section');
            return {top: box.top, bottom: box.bottom, right: box.right, first: first.id,
                    viewport: [window.innerWidth, window.innerHeight],
                    scrollWidth: document.documentElement.scrollWidth,
                    outcomes: Array.from(document.querySelectorAll('#summary [data-outcome]')).map(
                        e => [e.dataset.outcome, Number(e.dataset.count), e.getBoundingClientRect().bottom]),
                    buckets: Array.from(document.querySelectorAll('#summary [data-bucket]')).map(
                        e => [e.dataset.bucket, Number(e.dataset.count)]),
                    finalFail: Number(document.querySelector('#summary [data-final-fail]').dataset.finalFail)};
        """)
    finally:
        driver.quit()
    assert probe["first"] == "summary"
    assert probe["top"] >= 0 and probe["bottom"] <= 900, probe
    assert probe["scrollWidth"] <= 1400, "the page fits 1,400 px"
    report = run["report"]
    assert {k: n for k, n, _b in probe["outcomes"]} == report["outcomes"]
    assert all(bottom <= 900 for _k, _n, bottom in probe["outcomes"])
    assert probe["finalFail"] == report["after"]["fail"] == sum(n for _b, n in probe["buckets"])
    assert dict(probe["buckets"]).get("waived") == 1  # accounts_umask_etc_profile still fails, waived


def test_the_play_ends_with_the_report_path_and_three_lines_per_host(run):
    out, host, report = run["stdout"], run["host"], run["report"]
    assert "scapforge run %s: report %s" % (report["run_id"], run["dir"] / "report.html") in out
    assert "%s: pass %d -> %d, fail %d -> %d, regressions: none" % (
        host, report["before"].get("pass", 0), report["after"].get("pass", 0), report["before"].get("fail", 0),
        report["after"].get("fail", 0)) in out
    assert "%s:   %d remediated, " % (host, sum(n for k, n in report["outcomes"].items() if k.startswith("remediated/"))) in out
    assert "%s:   left for a human: " % host in out
    assert "evidence %s (signed: " % (run["dir"] / ("evidence-%s.tar.gz" % report["run_id"])) in out


def test_no_checklist_and_no_refusal_for_debian_content(run):
    assert not (run["dir"] / "checklists").exists()
    assert "no STIG checklist for" not in run["stdout"]


def test_the_signed_evidence_bundle_verifies_and_one_changed_byte_fails(run, tmp_path):
    bundle = run["dir"] / ("evidence-%s.tar.gz" % run["report"]["run_id"])
    pub = str(run["key"]) + ".pub"
    verify = [sys.executable, str(ROOT / "tools" / "verify_evidence.py"), str(bundle), "--public-key", pub]
    proc = subprocess.run(verify, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    import tarfile
    with tarfile.open(bundle) as tar:
        names = set(tar.getnames())
    root = "evidence-%s/" % run["report"]["run_id"]
    for member in ("manifest.json", "manifest.json.sig", "hosts/%s.json" % run["host"], "arf/%s-before.xml" % run["host"],
                   "arf/%s-after.xml" % run["host"], "ledger.json", "events.jsonl", "summary.json", "report.html",
                   "junit.xml", "oscal/assessment-results.json"):
        assert root + member in names, member
    copy = tmp_path / bundle.name
    data = bytearray(bundle.read_bytes())
    data[len(data) // 3] ^= 0x20
    copy.write_bytes(bytes(data))
    (tmp_path / (bundle.name + ".sig")).write_bytes((run["dir"] / (bundle.name + ".sig")).read_bytes())
    proc = subprocess.run(verify[:2] + [str(copy), "--public-key", pub], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 1 and "FAILED: the bundle's signature" in proc.stderr


def test_trestle_loads_the_oscal_assessment_results(run):
    from trestle.oscal.assessment_results import AssessmentResults

    loaded = AssessmentResults.oscal_read(run["dir"] / "oscal" / "assessment-results.json")
    result = loaded.results[0]
    rows, rules = run["report"]["scan_results"], run["report"]["rules"]
    assert result.title.startswith(run["host"] + ":")
    results = {o.title: {p.name: p.value for p in o.props} for o in result.observations}
    assert {k: v["result"] for k, v in results.items()} == {k: r["after"] or r["before"] for k, r in rows.items()}
    assert results["accounts_umask_etc_login_defs"]["outcome"] == "remediated"
    assert sorted(f.target.target_id for f in result.findings) == sorted(
        k for k, r in rows.items() if r["after"] == "fail")
    titles = [t.title for t in result.local_definitions.tasks]
    assert any(t.startswith("accounts_umask_etc_login_defs: attempt 1 (vendor)") for t in titles)
    umask = next(o for o in result.observations if o.title == "accounts_umask_etc_login_defs")
    assert umask.origins[0].related_tasks and rules["accounts_umask_etc_login_defs"]["changed_tasks"]
