"""The test tree itself: pytest imports test modules by their basename (there are no
packages under tests/), so two files with the same name in two folders break collection."""

import collections
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename():
    names = collections.Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
