"""The agents' prompts: Jinja2 templates of the skill, rendered in a sandbox on data only.

Each agent (``architect``, ``worker``, ``reflector``) has one template,
``skills/<skill>/prompts/<agent>.j2`` (``skills.Skill.prompts_dir``), in the skill's own words, which the inventory may
override (``scapforge_llm_prompts: {worker: /path/on/controller/worker.j2}``). A template
defines two blocks, ``system`` and ``user``; each is rendered on its own into the chat
message of that role.

Rendering uses Jinja2's ``ImmutableSandboxedEnvironment`` with ``StrictUndefined``: the
templates see plain data (dicts, lists, strings, numbers) built by ``plugin_utils.context``,
never an object of ours, and a missing variable is an error rather than an empty string.
Text from the host or the content reaches the template already fenced as data (see
``context.fence``); the template never evaluates it.
"""

from __future__ import annotations

import os
import typing as t

from jinja2 import StrictUndefined, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError

AGENTS = ("architect", "worker", "reflector")


class PromptError(ScapforgeError):
    """A template is missing, does not parse, lacks a block or fails to render; the message
    names the file."""

    kind = "prompts"


class PromptSet:
    """The three agents' templates, loaded once.

    ``directory``: where ``<agent>.j2`` live; ``overrides``: {agent: controller path} read
    instead. Raises PromptError when a template is missing, unreadable, does not parse, or
    lacks the ``system`` or ``user`` block.
    """

    def __init__(self, directory: str, overrides: t.Mapping[str, str] | None = None) -> None:
        self._env = ImmutableSandboxedEnvironment(
            undefined=StrictUndefined, autoescape=False, trim_blocks=True, lstrip_blocks=True,
            keep_trailing_newline=False,
        )
        self.sources: dict[str, str] = {}
        self._templates = {}
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(AGENTS))
        if unknown:
            raise PromptError("prompt overrides for unknown agents %s (agents: %s)" % (unknown, ", ".join(AGENTS)))
        for agent in AGENTS:
            path = overrides.get(agent) or os.path.join(directory, agent + ".j2")
            try:
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
            except OSError as exc:
                raise PromptError("cannot read the %s prompt %s: %s" % (agent, path, exc)) from None
            try:
                template = self._env.from_string(text)
            except TemplateError as exc:
                raise PromptError("the %s prompt %s does not parse: %s" % (agent, path, exc)) from None
            missing = [b for b in ("system", "user") if b not in template.blocks]
            if missing:
                raise PromptError("the %s prompt %s lacks the block(s) %s" % (agent, path, ", ".join(missing)))
            self.sources[agent] = path
            self._templates[agent] = template

    def render(self, agent: str, variables: t.Mapping[str, t.Any]) -> list[dict]:
        """The chat messages ``[{"role": "system", ...}, {"role": "user", ...}]`` for ``agent``.

        ``variables`` must be plain data. Raises PromptError (naming the template) when
        rendering fails, e.g. on an undefined variable or a sandbox violation.
        """
        template = self._templates[agent]
        try:
            context = template.new_context(dict(variables))
            system = "".join(template.blocks["system"](context)).strip()
            context = template.new_context(dict(variables))
            user = "".join(template.blocks["user"](context)).strip()
        except TemplateError as exc:
            raise PromptError("the %s prompt %s failed to render: %s" % (agent, self.sources[agent], exc)) from None
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]
