"""Make ``ansible_collections.scapforge.remediation`` (and tools/) importable from the checkout."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
TOOLS = os.path.join(ROOT, "tools")  # tools/llm_wire.py, shared by tests/llm_server.py and the LLM tools
if TOOLS not in sys.path:
    sys.path.append(TOOLS)
os.environ.setdefault("ANSIBLE_CONFIG", os.path.join(ROOT, "ansible.cfg"))
