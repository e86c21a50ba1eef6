# -*- coding: utf-8 -*-
# Copyright: scapforge.remediation contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The options of LLM endpoint and budgets (scapforge.remediation.ralph and the role that passes them)."""

    DOCUMENTATION = r"""
options:
  llm_base_url:
    description:
      - Base URL of an OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp server, OpenAI), for
        example C(http://127.0.0.1:8000/v1). Unset means no agents - rules the vendor fix does
        not remediate end with its reason, rules without one with C(llm_unavailable).
      - An endpoint that is not loopback or a private address is refused unless O(llm_allow_remote).
    type: str
  llm_model:
    description: Model name the endpoint serves.
    type: str
  llm_api_key:
    description:
      - API key (never logged); unset means the environment variable C(SCAPFORGE_LLM_API_KEY), then C(OPENAI_API_KEY).
    type: str
  llm_timeout:
    description: Seconds one model call may take; 429, 5xx and connection errors are retried with backoff.
    type: float
    default: 120
  llm_allow_remote:
    description: Allow an endpoint outside loopback and private addresses (data leaves the network).
    type: bool
    default: false
  llm_prompts:
    description: Controller paths of Jinja2 templates replacing the skill's, keyed C(architect), C(worker), C(reflector).
    type: dict
    default: {}
  llm_max_attempts:
    description: Worker attempts per rule (reason C(attempt_budget)); 0 means no limit.
    type: int
    default: 5
  llm_max_probes:
    description: Read-only probes per rule (reason C(probe_budget)).
    type: int
    default: 6
  llm_rule_seconds:
    description: Seconds per rule in the Worker phase (reason C(rule_time_budget)).
    type: float
    default: 900
  llm_rule_tokens:
    description: Tokens per rule, all agents (reason C(rule_token_budget)).
    type: int
    default: 60000
  llm_run_tokens:
    description: Tokens per run over all hosts, counted in C(llm_usage.json) of the run directory (reason C(run_token_budget)); 0 means none.
    type: int
    default: 2000000
  llm_max_tokens:
    description:
      - The most tokens one answer may take (C(max_tokens) of each call). A small model left
        unbounded can repeat itself to the end of its context, minutes per call.
    type: int
    default: 2000
  llm_review_every:
    description: Failed attempts between two Architect reviews (a plateau, the same failure twice, also triggers one).
    type: int
    default: 3
"""
