"""The lab fixtures (tests/lab_fixtures.py): real Debian 12 hosts over SSH."""

from lab_fixtures import baseline_host, lab, lab_host, lab_inventory, remediate, run_remediate  # noqa: F401 (pytest fixtures)  # pylint: disable=unused-import
