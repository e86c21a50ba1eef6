"""A visible, repairable store (issue 19 item 6): the recovery scan of a damaged TinyDB file,
``admin.doctor`` and ``admin.repair``, and ``tools/lessons.py doctor|repair`` (subprocess), on
stores made by hand in tmp dirs with the real ``MemoryStore``."""

import json
import os
import subprocess

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import admin
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.errors import MemoryStoreError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.store import (
    MemoryStore, aside_files, recover_tinydb)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))))
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
CLI = os.path.join(ROOT, "tools", "lessons.py")
LESSONS = ({"id": "LA", "n": 1}, {"id": "LB", "n": 2}, {"id": "LC", "n": 3})
# what the store writes for LESSONS: {"lessons":{"1":{"id":"LA","n":1},"2":{...},"3":{...}}}, 79 bytes
WHOLE = b'{"lessons":{"1":{"id":"LA","n":1},"2":{"id":"LB","n":2},"3":{"id":"LC","n":3}}}'
TRUNCATED = WHOLE[:68]  # cut inside document 3, which starts at byte 56: ...,"3":{"id":"L
CUT = "cut off or invalid JSON: Unterminated string starting at: line 1 column 67 (char 66)"


def make_store(path, lessons=LESSONS):
    store = MemoryStore(str(path))
    with store.transaction() as tx:
        tx.lessons.insert_multiple([dict(d) for d in lessons])
        tx.attempts("R1").insert({"attempt": 1})
    assert (path / "lessons.json").read_bytes() == WHOLE if lessons is LESSONS else True
    return store


def live(path, table="lessons"):
    return json.loads((path / (table + ".json")).read_text())[table.split("/")[0]]


def cli(*args):
    return subprocess.run([PYTHON, CLI] + list(args), capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)


# ----------------------------------------------------------------------------- the recovery scan
def test_recovery_of_a_truncated_file_keeps_every_whole_document_and_names_the_cut_one():
    got = recover_tinydb(TRUNCATED)
    assert got.tables == {"lessons": {"1": {"id": "LA", "n": 1}, "2": {"id": "LB", "n": 2}}}
    assert got.dropped == [{"table": "lessons", "id": "3", "start": 56, "end": 68, "why": CUT}]


def test_recovery_drops_a_wrong_shaped_document_and_goes_on_and_names_trailing_data():
    got = recover_tinydb(b'{"lessons":{"1":{"id":"LA"},"x":{"id":"LB"},"3":[1],"4":{"id":"LD"}}} junk')
    assert got.tables == {"lessons": {"1": {"id": "LA"}, "4": {"id": "LD"}}}
    assert got.dropped == [
        {"table": "lessons", "id": "x", "start": 28, "end": 43, "why": 'not {"<int id>": {...}}'},
        {"table": "lessons", "id": "3", "start": 44, "end": 51, "why": 'not {"<int id>": {...}}'},
        {"table": None, "id": None, "start": 70, "end": 74, "why": "data after the end of the file's object"}]


def test_recovery_of_nothing_says_why():
    assert recover_tinydb(b"") == ({}, [{"table": None, "id": None, "start": 0, "end": 0,
                                        "why": "expected '{', found the end of the file"}])
    assert recover_tinydb(b'{"les').tables == {}
    assert recover_tinydb(WHOLE) == ({"lessons": {str(i + 1): d for i, d in enumerate(LESSONS)}}, [])


# ----------------------------------------------------------------------------- doctor
def test_doctor_finds_nothing_in_a_healthy_store_and_names_each_problem(tmp_path):
    path = tmp_path / "m"
    make_store(path)
    assert admin.doctor(str(path)) == {"path": str(path), "problems": [],
                                       "checked": ["meta.json", "lessons.json", "attempts/R1.json"]}
    (path / "lessons.json").write_bytes(TRUNCATED)
    (path / "attempts" / "R1.json").write_text("{}x")
    (path / "usage.json.corrupt-20261201T000000.000000Z").write_text("{")
    (path / "runs.json.corrupt-20261130T000000.000000Z.repaired").write_text("{")  # recovered already: fine
    assert admin.doctor(str(path))["problems"] == [
        {"file": "lessons.json", "problem": "is corrupt (invalid JSON: Unterminated string starting at: line 1 column 67 (char 66))"},
        {"file": "attempts/R1.json", "problem": "is corrupt (invalid JSON: Extra data: line 1 column 3 (char 2))"},
        {"file": "usage.json.corrupt-20261201T000000.000000Z",
         "problem": "a corrupt copy moved aside; its whole documents are not recovered yet (tools/lessons.py repair)"}]
    assert sorted(os.listdir(path)) == [".lock", "attempts", "lessons.json", "meta.json",
                                        "runs.json.corrupt-20261130T000000.000000Z.repaired",
                                        "usage.json.corrupt-20261201T000000.000000Z"]  # doctor moved nothing
    nope = str(tmp_path / "nope")
    assert admin.doctor(nope)["problems"] == [{"file": nope, "problem": "no memory store here"}]


# ----------------------------------------------------------------------------- repair
def test_repair_rebuilds_a_truncated_table_in_place_and_lists_what_it_dropped(tmp_path):
    path = tmp_path / "m"
    make_store(path)
    (path / "lessons.json").write_bytes(TRUNCATED)
    result = admin.repair(str(path))
    (copy,) = [n for n in os.listdir(path) if n.startswith("lessons.json.corrupt-")]
    assert copy.endswith(".repaired") and (path / copy).read_bytes() == TRUNCATED  # bytes kept
    assert result == {"path": str(path), "problems": [], "repaired": [{
        "file": "lessons.json", "from": copy[:-len(".repaired")], "moved_to": str(path / copy[:-len(".repaired")]),
        "recovered": ["1", "2"], "already_there": [],
        "dropped": [{"table": "lessons", "id": "3", "start": 56, "end": 68, "why": CUT}]}]}
    assert live(path) == {"1": {"id": "LA", "n": 1}, "2": {"id": "LB", "n": 2}}  # doc ids kept
    assert admin.doctor(str(path))["problems"] == []
    assert admin.repair(str(path)) == {"path": str(path), "repaired": [], "problems": []}  # once only


def test_repair_merges_a_copy_a_run_moved_aside_into_the_fresh_table_it_started(tmp_path):
    """The usual case: the run moved the table aside and kept working in a fresh one; repair
    brings back the whole documents the fresh table does not hold already."""
    path = tmp_path / "m"
    store = make_store(path)
    (path / "lessons.json").write_bytes(TRUNCATED)
    (table, moved, _why), = store.move_corrupt_aside()
    assert table == "lessons" and aside_files(str(path)) == [os.path.basename(moved)]
    with store.transaction() as tx:
        tx.lessons.insert_multiple([{"id": "LN", "n": 9}, {"id": "LA", "n": 1, "support": 2}])
    result = admin.repair(str(path))
    (done,) = result["repaired"]
    assert (done["recovered"], done["already_there"], done["moved_to"], result["problems"]) == (["2"], ["1"], None, [])
    assert live(path) == {"1": {"id": "LN", "n": 9}, "2": {"id": "LA", "n": 1, "support": 2}, "3": {"id": "LB", "n": 2}}
    assert os.path.exists(moved + ".repaired") and not os.path.exists(moved)


def test_repair_of_an_attempts_file_and_a_copy_where_nothing_parses(tmp_path):
    path = tmp_path / "m"
    make_store(path)
    (path / "attempts" / "R1.json").write_bytes(b'{"attempts":{"1":{"attempt":1},"2":{"att')
    (path / "evidence.json.corrupt-20261201T000000.000000Z").write_text("garbage")
    result = admin.repair(str(path))
    assert [(d["file"], d["recovered"]) for d in result["repaired"]] == [("attempts/R1.json", ["1"])]
    assert live(path, "attempts/R1") == {"1": {"attempt": 1}}
    assert result["problems"] == ["evidence.json.corrupt-20261201T000000.000000Z: no document of table 'evidence' "
                                  "parses (expected '{', found 'garbage'); left as it is"]
    assert os.path.exists(path / "evidence.json.corrupt-20261201T000000.000000Z")  # not marked repaired


def test_repair_rebuilds_meta_from_the_schema_it_still_names_or_says_what_to_do(tmp_path):
    path = tmp_path / "m"
    make_store(path)
    (path / "meta.json").write_text('{"schema": 1, "created": "2026')
    result = admin.repair(str(path))
    assert [(d["file"], d["recovered"]) for d in result["repaired"]] == [("meta.json", ["schema 1"])]
    assert json.loads((path / "meta.json").read_text())["schema"] == 1
    assert admin.doctor(str(path))["problems"] == []
    (path / "meta.json").write_text('{"sch')
    with pytest.raises(MemoryStoreError, match=r'no copy of it names a schema number .*write \{"schema": 1\} into'):
        admin.repair(str(path))


# ----------------------------------------------------------------------------- the CLI
def test_cli_doctor_and_repair_exit_codes_and_lines(tmp_path):
    path = tmp_path / "m"
    make_store(path)
    healthy = cli("doctor", "--path", str(path))
    assert (healthy.returncode, healthy.stdout) == (0, "%s: 3 file(s) checked, healthy\n" % path)
    (path / "lessons.json").write_bytes(TRUNCATED)
    sick = cli("doctor", "--path", str(path))
    assert sick.returncode == 1
    assert sick.stdout.splitlines() == [
        "lessons.json: is corrupt (invalid JSON: Unterminated string starting at: line 1 column 67 (char 66))",
        "%s: 3 file(s) checked, 1 problem(s)" % path]
    fixed = cli("repair", "--path", str(path))
    assert fixed.returncode == 0, fixed.stderr
    lines = fixed.stdout.splitlines()
    assert lines[0].startswith("lessons.json: rebuilt from lessons.json.corrupt-")
    assert lines[0].endswith(" (just moved aside): 2 document(s) recovered (1, 2), 0 already there, 1 piece(s) dropped")
    assert lines[1:] == ["  dropped document 3 of table lessons (bytes 56-68): " + CUT, "%s: 1 table(s) repaired" % path]
    assert cli("doctor", "--path", str(path)).returncode == 0
    again = cli("repair", "--path", str(path))
    assert (again.returncode, again.stdout) == (0, "%s: nothing to repair\n" % path)
    (path / "usage.json.corrupt-20261201T000000.000000Z").write_text("garbage")
    failed = cli("repair", "--path", str(path))
    assert failed.returncode == 1 and "not repaired: usage.json.corrupt-20261201T000000.000000Z" in failed.stderr
    missing = cli("repair", "--path", str(tmp_path / "nope"))
    assert (missing.returncode, missing.stderr) == (1, "error: no memory store at %s\n" % (tmp_path / "nope"))
