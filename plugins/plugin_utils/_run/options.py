"""What the user asked of a host's run: the ralph action's options, resolved."""

from __future__ import annotations

import dataclasses
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A


@dataclasses.dataclass
class LoopOptions:
    """What the user asked for; field meanings are documented in plugins/modules/ralph.py.

    llm: an ``llm.LLMConfig`` (None or not ``configured``: no Worker phase); prompts: the
    agents' PromptSet; budget: the per-rule ``attempts.Budget``; run_tokens: the run's
    token budget over all hosts (0: none); max_answer_tokens: the most tokens one answer may take;
    memory_path/memory_mode/memory_retry: the lesson store (``memory.session``).
    """

    datastream: str
    profile: str
    datastream_src: str | None = None
    tailoring_src: str | None = None
    trusted_sha256: list[str] = dataclasses.field(default_factory=list)
    rules: list[str] = dataclasses.field(default_factory=list)
    skip_rules: list[str] = dataclasses.field(default_factory=list)
    waivers: list[dict] = dataclasses.field(default_factory=list)  # scapforge_waivers (waivers.parse)
    allow_access_impacting: list[str] = dataclasses.field(default_factory=list)
    health_check: bool = True
    rescan: bool = True
    run_dir: str = "."
    run_id: str = ""
    time_budget: float = 0.0  # seconds, 0 = no limit
    verify_batch: int = 8  # applied rules re-evaluated per oscap call
    scan_timeout: int = 0  # seconds a scan may run; 0: ten times the baseline's, at least 120 (decisions.scan_timeout)
    skill: str = "anssi-debian12"
    skill_description: str = ""
    llm: t.Any = None
    prompts: t.Any = None
    budget: A.Budget = dataclasses.field(default_factory=A.Budget)
    run_tokens: int = 0
    max_answer_tokens: int = 2000
    memory_path: str = "~/.scapforge/memory"
    memory_mode: str = "inject"
    memory_retry: bool = False
    allow_controller: bool = False
    health_commands: list[str] = dataclasses.field(default_factory=list)
    deadman_seconds: int = 600
    allow_reboot: bool = False
    checkpoint_provider: str = "files"
    checkpoint_options: dict = dataclasses.field(default_factory=dict)
