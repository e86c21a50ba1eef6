"""The answer parser: what models really write, and fuzzing (Hypothesis)."""

import json
import time

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.scapforge.remediation.plugins.plugin_utils.answers import (
    MAX_ANSWER_CHARS,
    SCHEMAS,
    AnswerError,
    ArchitectAnswer,
    CannotFix,
    Lesson,
    extract_object,
    parse_architect,
    parse_reflector,
    parse_worker,
)

TASK = {
    "name": "Set UMASK",
    "ansible.builtin.lineinfile": {"path": "/etc/login.defs", "regexp": "^UMASK", "line": "UMASK 077"},
}


# --- extract_object -------------------------------------------------------------------


def test_plain_json_object():
    assert extract_object(' {"verdict": "PLAN", "plan": "p"}\n') == {"verdict": "PLAN", "plan": "p"}


def test_one_fenced_json_block_in_prose():
    text = 'I will set the umask.\n```json\n{"tasks": [' + json.dumps(TASK) + '], "rationale": "r"}\n```\nDone.'
    assert extract_object(text) == {"tasks": [TASK], "rationale": "r"}


def test_one_fenced_yaml_block():
    text = (
        "Here are the tasks:\n\n```yaml\nrationale: login.defs sets it\ntasks:\n"
        "  - name: Set UMASK\n    ansible.builtin.lineinfile:\n      path: /etc/login.defs\n"
        "      regexp: '^UMASK'\n      line: UMASK 077\n```\n"
    )
    assert extract_object(text) == {"rationale": "login.defs sets it", "tasks": [TASK]}


def test_untagged_fence_and_tilde_fence():
    assert extract_object("```\nverdict: CONTINUE\nplan: ''\n```") == {"verdict": "CONTINUE", "plan": ""}
    assert extract_object("~~~yaml\na: 1\n~~~\n") == {"a": 1}


def test_fences_of_other_languages_are_ignored():
    text = 'Check with:\n```bash\ngrep UMASK /etc/login.defs\n```\nAnswer:\n```json\n{"a": 1}\n```'
    assert extract_object(text) == {"a": 1}


def test_identical_blocks_are_one_answer_but_different_ones_are_refused():
    same = '```json\n{"a": 1}\n```\nagain:\n```yaml\na: 1\n```'
    assert extract_object(same) == {"a": 1}
    with pytest.raises(AnswerError, match="2 fenced blocks hold different mappings"):
        extract_object('```json\n{"a": 1}\n```\nor\n```json\n{"a": 2}\n```')


def test_unclosed_fence_runs_to_the_end():
    assert extract_object('```json\n{"a": 1}\n') == {"a": 1}


def test_whole_text_yaml_mapping():
    assert extract_object("\n  a: 1\n  b: 2\n") == {"a": 1, "b": 2}  # indentation kept, not stripped
    assert extract_object("verdict: pivot\nplan: use sed instead\n") == {"verdict": "pivot", "plan": "use sed instead"}


def test_json_object_inside_prose():
    assert extract_object('Sure.\n{"verdict": "ESCALATE", "plan": ""}\nHope it helps.') == {
        "verdict": "ESCALATE",
        "plan": "",
    }


def test_a_leading_think_block_is_dropped():
    text = (
        '<think>\nThe rule wants {"umask": "077"}; verdict: maybe PIVOT?\n</think>\n\n{"verdict": "PLAN", "plan": "p"}'
    )
    assert extract_object(text) == {"verdict": "PLAN", "plan": "p"}
    with pytest.raises(AnswerError, match="empty answer"):
        extract_object("<think>only thoughts</think>\n")


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty answer"),
        ("  \n\t ", "empty answer"),
        ("I cannot help with that.", "no object in the answer"),
        ("[1, 2]", "top level is a list, not a mapping"),
        ("- a\n- b\n", "top level is a list, not a mapping"),
        ("```yaml\n- a\n```", "the fenced block holds a list, not a mapping"),
        ('```json\n{"a": \n```', "not JSON: Expecting value"),
        ("a: &x [1, 2]\nb: *x\n", "aliases are not accepted"),
        ("a: [\n", "not YAML: .* at line"),
    ],
)
def test_refusals_say_why(text, message):
    with pytest.raises(AnswerError, match=message):
        extract_object(text)


def test_too_large_answer_names_its_size():
    text = "a: " + "x" * MAX_ANSWER_CHARS
    with pytest.raises(AnswerError) as caught:
        extract_object(text)
    assert str(caught.value) == f"answer too large ({len(text)} characters > 65536)"


def test_not_a_string_is_an_answer_error():
    with pytest.raises(AnswerError):
        extract_object(None)  # type: ignore[arg-type]


def test_yaml_is_loaded_safely():
    with pytest.raises(AnswerError):
        extract_object("a: !!python/object/apply:os.system ['true']\n")


def test_an_alias_bomb_is_refused_quickly():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 12)]
    started = time.monotonic()
    with pytest.raises(AnswerError, match="aliases"):
        extract_object("\n".join(lines))
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize(
    "text", ["[" * 30000 + "]" * 30000, '{"a":' * 20000 + "1" + "}" * 20000, "a:\n" + "  - " * 10000 + "x"]
)
def test_deep_nesting_is_an_answer_error(text):
    try:
        extract_object(text)
    except AnswerError:
        pass


# --- typed answers --------------------------------------------------------------------


def test_worker_tasks_win_over_probes():
    answer = parse_worker({"tasks": [TASK], "probes": [{"command": "id"}], "rationale": "r", "extra": 1})
    assert answer.tasks == [TASK]
    assert answer.probes is None and answer.tasks_text is None
    assert answer.rationale == "r"
    assert not answer.is_probe_request


def test_worker_probe_request():
    answer = parse_worker('{"probes": [{"command": "stat /etc/login.defs"}], "tasks": []}')
    assert answer.probes == [{"command": "stat /etc/login.defs"}]
    assert answer.tasks is None and answer.is_probe_request
    assert answer.rationale == ""


def test_worker_yaml_task_text_is_kept_verbatim():
    text = "- name: Set UMASK\n  ansible.builtin.lineinfile:\n    path: /etc/login.defs\n    line: UMASK 077\n"
    answer = parse_worker({"tasks": text, "probes": [{"command": "id"}]})
    assert answer.tasks_text == text
    assert answer.tasks is None and answer.probes is None


@pytest.mark.parametrize(
    "obj, message",
    [
        ({"rationale": "nothing"}, "none of 'tasks', 'probes' and 'cannot_fix'"),
        ({"tasks": "   ", "probes": []}, "none of"),
        ({"tasks": {"name": "x"}}, "'tasks' is a mapping, not a list of mappings"),
        ({"tasks": [TASK, "echo hi"]}, r"'tasks\[1\]' is a string, not a mapping"),
        ({"probes": "id"}, "'probes' is a string, not a list"),
        ({"tasks": [TASK], "rationale": {"a": 1}}, "'rationale' is a mapping, not text"),
    ],
)
def test_worker_refusals(obj, message):
    with pytest.raises(AnswerError, match=message):
        parse_worker(obj)


@pytest.mark.parametrize("verdict", ["plan", "Continue", " PIVOT ", "escalate"])
def test_architect_verdicts_are_case_insensitive(verdict):
    answer = parse_architect({"verdict": verdict, "plan": "step 1"})
    assert answer == ArchitectAnswer(verdict=verdict.strip().upper(), plan="step 1")


def test_architect_plan_rules():
    assert parse_architect("verdict: CONTINUE\n").plan == ""
    assert parse_architect({"verdict": "PIVOT", "plan": ["use sed", "then verify"]}).plan == "use sed\nthen verify"
    assert len(parse_architect({"verdict": "PLAN", "plan": "x" * 5000}).plan) == 2000
    for verdict in ("PLAN", "PIVOT"):
        with pytest.raises(AnswerError, match="'plan' is missing or empty"):
            parse_architect({"verdict": verdict, "plan": "  "})
    with pytest.raises(AnswerError, match="not one of PLAN, CONTINUE, PIVOT, ESCALATE"):
        parse_architect({"verdict": "RETRY", "plan": "x"})
    with pytest.raises(AnswerError, match="verdict"):
        parse_architect({"plan": "x"})


# --- cannot_fix (issue 18) ------------------------------------------------------------
NETLINK = "auditctl -s: Cannot open netlink audit socket"


def test_worker_cannot_fix_is_a_third_shape():
    answer = parse_worker({"cannot_fix": {"reason": "environment", "evidence": NETLINK}, "rationale": "no audit here"})
    assert answer.cannot_fix == CannotFix(reason="environment", evidence=NETLINK)
    assert (answer.tasks, answer.tasks_text, answer.probes, answer.rationale) == (None, None, None, "no audit here")
    # tasks win over cannot_fix (as over probes); cannot_fix wins over probes (nothing would use them)
    assert parse_worker({"tasks": [TASK], "cannot_fix": {"reason": "content", "evidence": "x"}}).cannot_fix is None
    both = parse_worker({"probes": [{"read": "/etc/audit"}], "cannot_fix": {"reason": "needs_human", "evidence": "x"}})
    assert (both.probes, both.cannot_fix) == (None, CannotFix("needs_human", "x"))
    # the model's spelling of the reason is read; the evidence is capped
    said = parse_worker('```json\n{"cannot_fix": {"reason": " Needs-Human ", "evidence": "%s"}}\n```' % ("e" * 3000))
    assert said.cannot_fix == CannotFix("needs_human", "e" * 2000)
    assert parse_worker({"probes": [{"read": "/x"}], "cannot_fix": None}).probes == [{"read": "/x"}]


def test_architect_cannot_fix_is_an_escalate_with_its_evidence():
    answer = parse_architect({"cannot_fix": {"reason": "environment", "evidence": NETLINK}})
    assert answer == ArchitectAnswer(verdict="ESCALATE", plan=NETLINK, cannot_fix=CannotFix("environment", NETLINK))
    # whatever verdict the answer also wrote (a schema-bound server makes it write one)
    both = parse_architect({"verdict": "PLAN", "plan": "set it", "cannot_fix": {"reason": "content", "evidence": "e"}})
    assert (both.verdict, both.cannot_fix.reason) == ("ESCALATE", "content")
    assert parse_architect({"verdict": "PLAN", "plan": "set it"}).cannot_fix is None


@pytest.mark.parametrize("raw, message", [
    ({"reason": "impossible", "evidence": "x"}, "cannot_fix reason 'impossible' is not one of environment, content, needs_human"),
    ({"reason": 3, "evidence": "x"}, "cannot_fix reason 'a int' is not one of"),
    ({"reason": "environment"}, "'evidence' is missing or empty"),
    ({"reason": "environment", "evidence": "  "}, "'evidence' is missing or empty"),
    ("the host is a container", "'cannot_fix' is a string, not a mapping"),
])
def test_cannot_fix_refusals(raw, message):
    for parse in (parse_worker, parse_architect):
        with pytest.raises(AnswerError, match=message):
            parse({"cannot_fix": raw})


def test_cannot_fix_in_the_schemas():
    for agent in ("worker", "architect"):
        schema = SCHEMAS[agent]["properties"]["cannot_fix"]
        assert schema["properties"]["reason"]["enum"] == ["environment", "content", "needs_human"]
        assert schema["required"] == ["reason", "evidence"]
    jsonschema.validate({"rationale": "r", "cannot_fix": {"reason": "environment", "evidence": NETLINK}}, SCHEMAS["worker"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"rationale": "r", "cannot_fix": {"reason": "later"}}, SCHEMAS["worker"])
    alone = {"cannot_fix": {"reason": "needs_human", "evidence": "the site must choose"}}
    for agent in ("worker", "architect"):  # the shape the prompts show, with nothing else
        jsonschema.validate(alone, SCHEMAS[agent])
    jsonschema.validate({"verdict": "PLAN", "plan": "p"}, SCHEMAS["architect"])
    jsonschema.validate({"probes": [{"read": "/etc/login.defs"}], "rationale": "r"}, SCHEMAS["worker"])
    for agent, answer in (("architect", {"verdict": "PLAN"}), ("worker", {"rationale": "only a reason"})):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(answer, SCHEMAS[agent])


def test_reflector_full_answer_with_caps():
    answer = parse_reflector(
        {
            "diagnosis": "d" * 3000,
            "lesson": {"cue": "c" * 600, "action": "use lineinfile on /etc/login.defs"},
            "banned": ["shell: sed", "x" * 201, "", "a", "b", "c", "d", "e"],
            "preferred": "ansible.builtin.lineinfile",
        }
    )
    assert len(answer.diagnosis) == 2000
    assert answer.lesson == Lesson(cue="c" * 500, action="use lineinfile on /etc/login.defs")
    assert answer.banned == ["shell: sed", "a", "b", "c", "d"]
    assert answer.preferred == ["ansible.builtin.lineinfile"]


def test_reflector_lesson_rules():
    assert parse_reflector({"diagnosis": "d", "lesson": None}).lesson is None
    assert parse_reflector({"diagnosis": "d", "lesson": {"cue": "", "action": ""}}).lesson is None
    with pytest.raises(AnswerError, match="both a cue and an action"):
        parse_reflector({"diagnosis": "d", "lesson": {"cue": "when x", "action": ""}})
    with pytest.raises(AnswerError, match="'diagnosis' is missing or empty"):
        parse_reflector({"lesson": None})
    with pytest.raises(AnswerError, match=r"'banned\[0\]' is a int"):
        parse_reflector({"diagnosis": "d", "banned": [1]})


def test_schemas_are_valid_and_accept_what_the_parsers_accept():
    examples = {
        "worker": {"rationale": "r", "tasks": [TASK]},
        "architect": {"verdict": "PLAN", "plan": "p"},
        "reflector": {"diagnosis": "d", "lesson": {"cue": "c", "action": "a"}, "banned": [], "preferred": ["x"]},
    }
    parsers = {"worker": parse_worker, "architect": parse_architect, "reflector": parse_reflector}
    assert set(SCHEMAS) == set(examples)
    for name, schema in SCHEMAS.items():
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.validate(examples[name], schema)
        parsers[name](json.dumps(examples[name]))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"verdict": "MAYBE", "plan": ""}, SCHEMAS["architect"])


# --- fuzzing --------------------------------------------------------------------------

# database=None: the run leaves no example database in the shared tree.
FUZZ = settings(max_examples=100, deadline=1000, database=None, suppress_health_check=[HealthCheck.too_slow])
ROUND_TRIP = settings(FUZZ, max_examples=40)

# Text PyYAML's emitter writes back faithfully (it emits NEL and other C0/C1 controls
# unescaped with allow_unicode, which is an emitter issue, not the parser's).
plain_text = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | plain_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(plain_text, children, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(plain_text, json_values, max_size=5)

fragments = st.sampled_from(
    [
        "```",
        "```json\n",
        "```yaml\n",
        "~~~",
        "\n",
        "{",
        "}",
        "[",
        "]",
        ":",
        "- ",
        "&a ",
        "*a",
        "!!python/",
        "'",
        '"',
        "tasks:",
        "probes:",
        "verdict: PLAN",
        "plan:",
        "lesson:",
        "  ",
        "\t",
        "%YAML 1.1\n",
        "---\n",
        "...",
        "? ",
        "|\n",
    ]
)
answer_like_text = st.lists(fragments | st.text(max_size=10), max_size=40).map("".join)


def _only_answer_errors(func, text):
    started = time.monotonic()
    try:
        func(text)
    except AnswerError:
        pass
    assert time.monotonic() - started < 1.0


@FUZZ
@given(st.text(max_size=2000) | answer_like_text)
def test_fuzz_extract_object_raises_only_answer_error(text):
    _only_answer_errors(extract_object, text)


@FUZZ
@given(answer_like_text | st.text(max_size=500) | json_objects.map(json.dumps))
def test_fuzz_parsers_raise_only_answer_error(text):
    for parse in (parse_worker, parse_architect, parse_reflector):
        _only_answer_errors(parse, text)


# Mappings that use the answer keys, with values of any shape (arbitrary keys would rarely hit them).
answer_mappings = st.fixed_dictionaries(
    {},
    optional={
        key: json_values | st.sampled_from(["PLAN", "pivot", "", " ", "- a\n- b"])
        for key in ("tasks", "probes", "rationale", "verdict", "plan", "diagnosis", "lesson", "banned", "preferred")
    },
)


@ROUND_TRIP
@given(answer_mappings | json_objects)
def test_fuzz_parsers_on_arbitrary_mappings(obj):
    for parse in (parse_worker, parse_architect, parse_reflector):
        _only_answer_errors(parse, obj)


@ROUND_TRIP
@given(json_objects, st.sampled_from(["{}", "Answer:\n```json\n{}\n```\n", "```\n{}\n```", "{}\n"]))
def test_fuzz_json_round_trip(obj, frame):
    text = frame.replace("{}", json.dumps(obj, indent=1))
    assert extract_object(text) == obj


@ROUND_TRIP
@given(json_objects.filter(bool))
def test_fuzz_yaml_round_trip(obj):
    dumped = yaml.safe_dump(obj, default_flow_style=False, allow_unicode=True)
    assert extract_object(dumped) == obj
    assert extract_object("```yaml\n" + dumped + "```\n") == obj


@ROUND_TRIP
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "name": st.text(min_size=1, max_size=20),
                "ansible.builtin.debug": st.fixed_dictionaries({"msg": st.text(max_size=20)}),
            }
        ),
        min_size=1,
        max_size=3,
    ),
    st.text(max_size=50),
)
def test_fuzz_worker_round_trip(tasks, rationale):
    answer = parse_worker(json.dumps({"tasks": tasks, "rationale": rationale, "probes": [{"x": 1}]}))
    assert answer.tasks == tasks and answer.rationale == rationale.strip()[:2000] and answer.probes is None


@ROUND_TRIP
@given(st.sampled_from(["PLAN", "CONTINUE", "PIVOT", "ESCALATE"]), st.text(min_size=1, max_size=3000).filter(str.strip))
def test_fuzz_architect_round_trip(verdict, plan):
    answer = parse_architect(json.dumps({"verdict": verdict.lower(), "plan": plan}))
    assert answer == ArchitectAnswer(verdict=verdict, plan=plan.strip()[:2000])
