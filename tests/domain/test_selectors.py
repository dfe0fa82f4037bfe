"""Label and field selectors (Kubernetes' grammar): what parses to what, and where a bad one fails."""

from __future__ import annotations

import pytest

from virtplane.domain.resources import (
    Host,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineSnapshot,
    Volume,
)
from virtplane.domain.selectors import (
    Operator,
    Requirement,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
    selectable_fields,
)

Op = Operator

LABELS = [
    ("", ()),
    ("   ", ()),
    ("app=web", (Requirement("app", Op.EQUALS, ("web",)),)),
    ("app==web", (Requirement("app", Op.EQUALS, ("web",)),)),
    ("app = web", (Requirement("app", Op.EQUALS, ("web",)),)),
    ("app=", (Requirement("app", Op.EQUALS, ("",)),)),
    ("app!=web", (Requirement("app", Op.NOT_EQUALS, ("web",)),)),
    ("canary", (Requirement("canary", Op.EXISTS),)),
    ("!legacy", (Requirement("legacy", Op.NOT_EXISTS),)),
    ("! legacy", (Requirement("legacy", Op.NOT_EXISTS),)),
    ("env in (prod,qa)", (Requirement("env", Op.IN, ("prod", "qa")),)),
    ("env in ( prod , qa )", (Requirement("env", Op.IN, ("prod", "qa")),)),
    ("env notin (dev)", (Requirement("env", Op.NOT_IN, ("dev",)),)),
    ("in=x", (Requirement("in", Op.EQUALS, ("x",)),)),  # a keyword is a key where a key is expected
    ("example.com/team=a_b-c.d", (Requirement("example.com/team", Op.EQUALS, ("a_b-c.d",)),)),
    (
        "app=web,tier!=db,env in (prod),canary,!legacy",
        (
            Requirement("app", Op.EQUALS, ("web",)),
            Requirement("tier", Op.NOT_EQUALS, ("db",)),
            Requirement("env", Op.IN, ("prod",)),
            Requirement("canary", Op.EXISTS),
            Requirement("legacy", Op.NOT_EXISTS),
        ),
    ),
]


@pytest.mark.parametrize(("text", "requirements"), LABELS)
def test_label_selectors_parse(text: str, requirements: tuple[Requirement, ...]) -> None:
    selector = parse_label_selector(text)
    assert selector.requirements == requirements
    assert parse_label_selector(str(selector)) == selector  # the canonical text parses back


# (text, position of the error, words of the message)
BAD_LABELS = [
    ("app=web,", 8, "expected a label key, found the end"),
    (",app=web", 0, "expected a label key, found ','"),
    ("app=web tier=db", 8, "expected ',' or the end, found 'tier'"),
    ("app in web", 7, "expected '(' after in/notin"),
    ("app in (web", 11, "expected ',' or ')', found the end"),
    ("app in ()", 8, "expected a value, found ')'"),
    ("app in (a,,b)", 10, "expected a value, found ','"),
    ("app notin", 9, "expected '(' after in/notin"),
    ("app=(web)", 4, "expected a value, found '('"),
    ("app=a=b", 5, "expected ',' or the end, found '='"),
    ("app startswith x", 4, "expected =, ==, !=, in, notin"),
    ("!", 1, "expected a label key after '!'"),
    ("!=web", 0, "expected a label key, found '!='"),
    ("-app=web", 0, "is not a label key"),
    ("app,Bad Key", 8, "expected =, ==, !=, in, notin, ',' or the end, found 'Key'"),
    ("a/b/c=x", 0, "is not a label key"),
    ("x" * 5000, 4096, "longer than 4096"),
]


@pytest.mark.parametrize(("text", "position", "words"), BAD_LABELS)
def test_a_bad_label_selector_says_where(text: str, position: int, words: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_label_selector(text)
    assert caught.value.position == position
    assert words in str(caught.value)
    assert str(caught.value).startswith(f"at position {position}: ")


VM_FIELDS = selectable_fields(VirtualMachine)

FIELDS = [
    ("", ()),
    ("status.phase=Running", (Requirement("status.phase", Op.EQUALS, ("Running",)),)),
    ("status.phase==Running", (Requirement("status.phase", Op.EQUALS, ("Running",)),)),
    (
        "status.host!=h1,spec.run_policy=Manual",
        (
            Requirement("status.host", Op.NOT_EQUALS, ("h1",)),
            Requirement("spec.run_policy", Op.EQUALS, ("Manual",)),
        ),
    ),
    ("status.host=", (Requirement("status.host", Op.EQUALS, ("",)),)),
    ("metadata.name=web-1", (Requirement("metadata.name", Op.EQUALS, ("web-1",)),)),
]


@pytest.mark.parametrize(("text", "requirements"), FIELDS)
def test_field_selectors_parse(text: str, requirements: tuple[Requirement, ...]) -> None:
    assert parse_field_selector(text, VM_FIELDS).requirements == requirements


BAD_FIELDS = [
    ("status.phase in (Running)", 13, "field selectors take =, == or !=; found 'in'"),
    ("status.phase", 12, "field selectors take =, == or !=; found the end"),
    ("spec.cpu=2", 0, "cannot select by field 'spec.cpu'"),
    ("status.phase=Running,spec.vm=x", 21, "cannot select by field 'spec.vm'"),  # a VM has no spec.vm
    ("!status.phase", 0, "expected a field, found '!'"),
]


@pytest.mark.parametrize(("text", "position", "words"), BAD_FIELDS)
def test_a_bad_field_selector_says_where(text: str, position: int, words: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_field_selector(text, VM_FIELDS)
    assert caught.value.position == position
    assert words in str(caught.value)


def test_each_kind_is_selectable_by_the_fields_it_has() -> None:
    assert selectable_fields(VirtualMachine) == {
        "metadata.name",
        "spec.run_policy",
        "status.host",
        "status.phase",
    }
    assert selectable_fields(VirtualMachineOperation) == {"metadata.name", "spec.vm", "status.phase"}
    assert selectable_fields(VirtualMachineSnapshot) == {
        "metadata.name",
        "spec.vm",
        "status.phase",
        "status.host",
    }
    assert selectable_fields(Volume) == {"metadata.name", "status.phase"}
    assert selectable_fields(Host) == {"metadata.name"}


MATCHES = [
    ("", {}, True),
    ("app=web", {"app": "web"}, True),
    ("app=web", {"app": "db"}, False),
    ("app=web", {}, False),
    ("app!=web", {}, True),  # != also matches an object without the key, as in Kubernetes
    ("app!=web", {"app": "web"}, False),
    ("env in (prod,qa)", {"env": "qa"}, True),
    ("env notin (prod,qa)", {"env": "qa"}, False),
    ("canary", {"canary": ""}, True),
    ("!legacy", {"legacy": "1"}, False),
    ("app=web,tier=db", {"app": "web", "tier": "fe"}, False),
]


@pytest.mark.parametrize(("text", "labels", "selected"), MATCHES)
def test_a_label_selector_matches_labels_in_memory_as_the_store_does(
    text: str, labels: dict[str, str], selected: bool
) -> None:
    assert parse_label_selector(text).matches(labels) is selected


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("app=web", {"app": "web"}, True),
        ("app=web", {"app": "db"}, False),
        ("app=web", {}, False),
        ("app!=web", {}, True),
        ("app!=web", {"app": "web"}, False),
        ("env in (prod,qa)", {"env": "qa"}, True),
        ("env in (prod,qa)", {}, False),
        ("env notin (dev)", {}, True),
        ("env notin (dev)", {"env": "dev"}, False),
        ("canary", {"canary": ""}, True),
        ("!legacy", {"legacy": "1"}, False),
        ("app=web,!legacy", {"app": "web"}, True),
        ("", {}, True),
    ],
)
def test_a_selector_matches_labels_in_memory(selector: str, labels: dict[str, str], expected: bool) -> None:
    """As the store's SQL does (negatives match a missing key); red with != or notin
    requiring the key, or with EXISTS and NOT_EXISTS swapped."""
    assert parse_label_selector(selector).matches(labels) is expected
