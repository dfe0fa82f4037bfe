"""What a bad client can cost ``virtplane serve``, tried over loopback sockets against the real
server process (the probes of issue 31, "Safe to expose").

Each probe is bounded in count and in time; none waits a fixed time: a socket read with a
timeout fails the test if the server never answers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import eventually_sync
from tests.crash.server import ServerProcess

HEADER_TIMEOUT_S = 1.0
PER_CLIENT = 5
WATCHES = 3
WRITE_BURST = 5
ATTACKER = "127.0.0.3"  # loopback addresses no other test uses: their connections are the probe's
OTHER_CLIENT = "127.0.0.2"
SOCKET_CLIENT = "127.0.0.6"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("limits"),
        extra_args=[
            "--header-timeout", str(HEADER_TIMEOUT_S),
            "--idle-timeout", "120",  # kept-alive connections stay for the per-client probe
            "--max-connections-per-client", str(PER_CLIENT),
            "--max-watches-per-token", str(WATCHES),
            "--writes-per-second", "0.01", "--write-burst", str(WRITE_BURST),
        ],
    )  # fmt: skip
    process.start()
    try:
        yield process
    finally:
        process.stop()


def connect(server: ServerProcess, source: str = "127.0.0.1", timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=timeout, source_address=(source, 0))
    return sock


def read_answer(sock: socket.socket) -> tuple[int | None, dict[str, object] | None]:
    """The status and JSON body of the server's answer (None, None: it closed, or reset, the
    connection without one). A server that neither answers nor closes within the socket's
    timeout fails the test."""
    data = b""
    try:
        while not complete(data) and (chunk := sock.recv(65536)):
            data += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the server neither answered nor closed the connection; it sent {data[:200]!r}")
    if not data:
        return None, None
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body else None


def complete(data: bytes) -> bool:
    head, separator, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
    return bool(separator) and length is not None and len(body) >= int(length.group(1))


def metric(server: ServerProcess, name: str) -> float:
    with server.client() as admin:
        text = admin.get("/metrics").text
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{name} not in /metrics"
    return float(found.group(1))


def rss_bytes(server: ServerProcess) -> int:
    assert server.proc is not None
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    found = re.search(r"^VmRSS:\s+(\d+) kB$", status, re.MULTILINE)
    assert found is not None
    return int(found.group(1)) * 1024


def test_wrong_tokens_do_not_grow_the_token_cache(server: ServerProcess) -> None:
    before = metric(server, "virtplane_token_cache_entries")
    with httpx.Client(base_url=server.url, timeout=10.0) as client:
        for i in range(300):
            wrong = f"vp_wrong-{i:04d}-" + "x" * 200
            answer = client.get("/v1/vms", headers={"Authorization": f"Bearer {wrong}"})
            assert (answer.status_code, answer.json()["reason"]) == (401, "Unauthorized")
    assert metric(server, "virtplane_token_cache_entries") == before


def test_huge_tokens_are_refused_before_they_cost_memory(server: ServerProcess) -> None:
    """300 different 1 MiB tokens: each refused (431) from the first 32 KiB of its headers."""
    rss = rss_bytes(server)
    for i in range(300):
        with connect(server) as sock:
            token = f"{i:04d}".encode() + b"t" * (1024 * 1024)
            request = b"GET /v1/vms HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + b"\r\n\r\n"
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(request)  # fails once the server stopped reading: refused early
            status, _ = read_answer(sock)
            assert status in (431, None), status
    grown = rss_bytes(server) - rss
    assert grown < 64 * 1024 * 1024, f"the server grew by {grown / 2**20:.0f} MiB"


def test_an_oversized_head_gets_431_with_a_reason(server: ServerProcess) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 40_000 + b"\r\n\r\n")
        status, body = read_answer(sock)
    assert status == 431
    assert body is not None and body["reason"] == "RequestHeaderFieldsTooLarge"
    with connect(server) as sock:
        many = b"".join(b"X-H%d: 1\r\n" % i for i in range(150))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
        status, body = read_answer(sock)
    assert status == 431 and body is not None
    assert "100 headers" in str(body["message"])


def test_a_never_finished_header_is_cut_off_while_healthz_answers(server: ServerProcess) -> None:
    """A header that would grow to 128 MiB, sent 64 KiB at a time with a /healthz between two
    pieces: the server answers each /healthz, and stops reading the header long before its end."""
    chunk = b"a" * 65536
    sent = 0
    answered = 0
    with connect(server) as attacker, httpx.Client(base_url=server.url, timeout=5.0) as health:
        attacker.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        for _ in range(256):  # 16 MiB at most, far past the 32 KiB limit
            try:
                attacker.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
            assert health.get("/healthz").status_code == 200
            answered += 1
        status, _ = read_answer(attacker)
    # Cut off by its size, within a few pieces (what the sockets' buffers took before the
    # server's reset came back), not by the header timeout (408) nor never.
    assert sent < 1024 * 1024, f"the server read {sent / 2**20:.0f} MiB of one header"
    assert status in (431, None), status
    assert answered >= 1


def test_a_half_sent_request_is_closed_after_the_header_timeout(server: ServerProcess) -> None:
    with connect(server, timeout=HEADER_TIMEOUT_S * 10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n")  # no end of the head
        status, body = read_answer(sock)
    assert status == 408
    assert body is not None and body["reason"] == "RequestTimeout"
    with connect(server, timeout=HEADER_TIMEOUT_S * 10) as silent:  # says nothing at all
        status, _ = read_answer(silent)
    assert status == 408


def test_a_half_sent_body_is_closed_after_the_header_timeout(server: ServerProcess) -> None:
    token = server.token.encode()
    with connect(server, timeout=HEADER_TIMEOUT_S * 10) as sock:
        head = b"POST /v1/vms HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        sock.sendall(head + b"Authorization: Bearer " + token + b"\r\nContent-Length: 100\r\n\r\n{")
        status, _ = read_answer(sock)  # fails the test if the connection stays open
    assert status is None, "closed without an answer of its own: the route may have begun one"


def test_connections_beyond_the_total_are_refused(tmp_path: Path) -> None:
    total = 6
    process = ServerProcess(tmp_path, extra_args=["--max-connections", str(total)])
    process.start()
    held: list[socket.socket] = []
    try:
        for number in range(2, 2 + total * 3):  # each from an address of its own: no per-client limit
            sock = connect(process, f"127.0.1.{number}")
            held.append(sock)
            status = healthz_over(sock)
            if status != 200:
                break
        assert status == 503, f"{len(held)} connections, all answered"
        assert len(held) <= total + 1
    finally:
        for sock in held:
            sock.close()
        process.stop()


def healthz_over(sock: socket.socket) -> int | None:
    """GET /healthz on a kept-alive connection; the status (None if the server closed it)."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused: read the answer
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    return read_answer(sock)[0]


def test_connections_beyond_the_per_client_limit_are_refused_while_others_are_served(
    server: ServerProcess,
) -> None:
    held = [connect(server, ATTACKER) for _ in range(PER_CLIENT)]
    try:
        for sock in held:  # each a complete request, then kept alive: no header timeout applies
            assert healthz_over(sock) == 200
        with connect(server, ATTACKER) as one_more:
            status, body = read_answer(one_more)
        assert status == 429 and body is not None and body["reason"] == "TooManyConnections"
        with connect(server, OTHER_CLIENT) as other:
            assert healthz_over(other) == 200
    finally:
        for sock in held:
            sock.close()


def test_a_websocket_gives_its_connection_back_when_it_ends(server: ServerProcess) -> None:
    """A console's websocket leaves uvicorn's HTTP protocol for its own: it still counts among
    its client's connections while open, and no more once closed."""
    handshake = (
        b"GET /v1/vms/nothing/console HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Authorization: Bearer " + server.token.encode() + b"\r\n\r\n"
    )
    for _ in range(PER_CLIENT * 2):
        with connect(server, SOCKET_CLIENT) as sock:
            sock.sendall(handshake)
            status, body = read_answer(sock)  # the console refuses a VM that does not exist
            assert status == 404, body
    with connect(server, SOCKET_CLIENT) as after:
        assert healthz_over(after) == 200


def make_token(server: ServerProcess, name: str, role: str) -> str:
    with server.client() as admin:
        made = admin.post("/v1/tokens", json={"name": name, "role": role})
    assert made.status_code == 201, made.text
    token: str = made.json()["token"]
    return token


def test_watches_per_token_are_limited(server: ServerProcess) -> None:
    token = make_token(server, "watcher", "viewer")
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=10.0) as viewer:
        opened = [viewer.stream("GET", "/v1/vms", params={"watch": 1}) for _ in range(WATCHES)]
        try:
            for watch in opened:
                assert watch.__enter__().status_code == 200
            with viewer.stream("GET", "/v1/events", params={"watch": 1}) as refused:
                assert refused.status_code == 429
                assert json.loads(refused.read())["reason"] == "TooManyWatches"
        finally:
            for watch in opened:
                watch.__exit__(None, None, None)


def test_writes_per_token_are_rate_limited(server: ServerProcess) -> None:
    token = make_token(server, "writer", "operator")
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=10.0) as op:
        for i in range(WRITE_BURST):
            assert op.delete(f"/v1/vms/nothing-{i}").status_code == 404
        refused = op.delete("/v1/vms/nothing-more")
        assert refused.status_code == 429
        assert refused.json()["reason"] == "TooManyWrites"
        assert op.get("/v1/vms").status_code == 200, "reads are not counted"


def test_an_upload_body_that_keeps_coming_outlives_the_header_timeout(server: ServerProcess) -> None:
    """An image upload's body may take longer than the head's timeout while it keeps coming
    (``http_limits.streamed_body``); other bodies may not (the test above)."""
    with server.client() as admin:
        for plural, doc in (
            ("hosts", {"metadata": {"name": "up-1"}, "spec": {"uri": "sim://up-1", "cluster": "up"}}),
            ("storagepools", {"metadata": {"name": "up-lib"}, "spec": {"kind": "shared", "cluster": "up", "capacity_gib": 1, "content": "images"}}),
        ):  # fmt: skip
            assert admin.post(f"/v1/{plural}", json=doc).status_code == 201
        eventually_sync(lambda: admin.get("/v1/hosts/up-1").json()["status"]["connection"] == "Up")
    pieces = [b"QFI\xfb" + bytes(1020)] + [bytes(1024)] * 7
    body = b"".join(pieces)
    token = server.token.encode()
    with connect(server, timeout=HEADER_TIMEOUT_S * 10) as sock:
        sock.sendall(
            b"PUT /v1/images/trickled/content?pool=up-lib&sha256=" + hashlib.sha256(body).hexdigest().encode()
            + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token
            + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
        )  # fmt: skip
        for piece in pieces:  # 8 pieces a quarter of the timeout apart: twice the timeout in all
            sock.sendall(piece)
            time.sleep(HEADER_TIMEOUT_S / 4)  # the client's pace is what is tested, not a wait for the server
        status, answer = read_answer(sock)
    assert status == 201, answer
