"""The run's reports from a real short run on a lab host (issue 10 items 3 and 4).

One run of the main job on a handful of rules: one the vendor fix remediates
(accounts_umask_etc_login_defs), one no running host can pass (kernel_config_bug, escalated),
one under an active waiver (accounts_umask_etc_profile, skipped/waived) and one whose waiver
expired (sshd_disable_root_login, worked as usual). Then report.html is opened in Debian's
chromium (headless, through selenium and chromium-driver): no console error, a screenshot
that shows the chart (tests/output/report.png), bars that match the counts; junit.xml is read
back with junitparser; the ARF files are real ARF.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
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
ARF_NS = "http://scap.nist.gov/schema/asset-reporting-format/1.1"


@pytest.fixture(scope="module")
def run(lab, lab_host, lab_inventory, tmp_path_factory, remediate):
    runs = tmp_path_factory.mktemp("runs")
    proc = remediate(lab_inventory, lab_host.name, runs, {"scapforge_rules": RULES, "scapforge_waivers": WAIVERS})
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    run_dir = (runs / "latest").resolve()
    report = json.loads((run_dir / "hosts" / ("%s.json" % lab_host.name)).read_text())
    return {"dir": run_dir, "host": lab_host.name, "report": report}


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
