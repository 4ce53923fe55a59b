"""Body limits and remote images: what gets through and what the client is told."""

import asyncio
import http.server
import threading
import time

import pytest

from serve_app.config import AppConfig, Limits
from serve_app.edge.body import BodyReads, read_body
from serve_app.edge.errors import RequestError
from serve_app.edge.remote_images import RemoteImagePolicy, address_is_public, fetch_image, host_allowed

from ..images import chat_body, data_url, image_bytes
from .build import answer_job, chat_job

# ---------------------------------------------------------------- body limit


async def chunks(*parts):
    for part in parts:
        yield part


async def test_body_limit_from_content_length_and_while_streaming():
    assert await read_body({"content-length": "4"}, chunks(b"ab", b"cd"), 4) == b"abcd"
    with pytest.raises(RequestError, match="has 5000 bytes, over the limit of 1024") as caught:
        await read_body({"content-length": "5000"}, chunks(), 1024)
    assert caught.value.status == 413
    with pytest.raises(RequestError, match="over the limit of 3"):
        await read_body({}, chunks(b"ab", b"cd"), 3)  # chunked: no length announced


async def test_a_body_sent_a_byte_at_a_time_gets_a_408_at_its_deadline():
    async def trickle():
        while True:
            yield b"["
            await asyncio.sleep(0.02)

    started = time.monotonic()
    with pytest.raises(RequestError, match=r"did not arrive within 0.2 s \(\d+ bytes came\)") as caught:
        await read_body({}, trickle(), 1024, timeout_s=0.2)
    assert (caught.value.status, caught.value.code) == (408, "body_timeout")
    assert 0.2 <= time.monotonic() - started < 1
    assert await read_body({}, chunks(b"ab", b"cd"), 4, timeout_s=0.2) == b"abcd"


def test_bodies_read_at_once_are_bounded_per_client_address():
    reads = BodyReads(per_client=2)
    with reads.from_client("10.0.0.1"), reads.from_client("10.0.0.1"):
        with pytest.raises(RequestError) as caught, reads.from_client("10.0.0.1"):
            pass
        assert (caught.value.status, caught.value.code) == (429, "too_many_requests")
        with reads.from_client("10.0.0.2"):  # another address is not held back
            assert reads.reading == {"10.0.0.1": 2, "10.0.0.2": 1}
    assert reads.reading == {}  # nothing kept once the bodies are read
    with reads.from_client("10.0.0.1"):
        pass


# ---------------------------------------------------------------- remote image URLs: configuration and checks


def test_remote_images_need_an_allowlist():
    with pytest.raises(ValueError, match="needs remote_image_hosts"):
        Limits(allow_remote_images=True)


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("images.example.com", True),
        ("IMAGES.example.com.", True),
        ("cdn.example.org", True),
        ("a.b.example.org", True),
        ("example.org", False),
        ("evil-example.org", False),
        ("images.example.com.evil.net", False),
        ("localhost", False),
    ],
)
def test_host_allowlist(host, allowed):
    assert host_allowed(host, ["images.example.com", "*.example.org"]) is allowed


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),
        ("0.0.0.0", False),
        ("::1", False),
        ("fe80::1", False),
        ("fd00::1", False),
        ("::ffff:127.0.0.1", False),
        ("224.0.0.1", False),
        ("100.64.0.1", False),
    ],
)
def test_only_public_addresses_are_fetched_from(address, public):
    assert address_is_public(address) is public


def config(**limits):
    return AppConfig.model_validate(
        {
            "small": {"model_id": "s", "source": "s"},
            "large": {"model_id": "l", "source": "l"},
            "limits": limits,
        }
    )


def test_a_remote_url_is_checked_before_any_download():
    off = config()
    with pytest.raises(RequestError, match="remote image URLs are disabled"):
        chat_job(off, chat_body(image="https://images.example.com/a.png"))
    on = config(allow_remote_images=True, remote_image_hosts=["images.example.com"])
    fetched = []

    async def fetch(url: str, param: str) -> str:
        fetched.append((url, param))
        return data_url()

    job = chat_job(on, chat_body(image="https://images.example.com/a.png"), fetch=fetch)
    assert fetched == [("https://images.example.com/a.png", "messages")]
    assert job.question.image_url == data_url()  # the job leaves complete, with the image inline
    assert chat_job(on, chat_body(), fetch=fetch).question.image_url.startswith("data:")
    assert len(fetched) == 1  # inline images stay inline
    # Every other check comes first: a URL off the policy, or any other bad field, downloads nothing.
    remote = "https://images.example.com/a.png"
    for url, message in [
        ("https://evil.example.net/a.png", "not on this server's allowlist"),
        ("https://user:pw@images.example.com/a.png", "credentials"),
    ]:
        with pytest.raises(RequestError, match=message):
            chat_job(on, chat_body(image=url), fetch=fetch)
    with pytest.raises(RequestError, match="min_confidence"):
        chat_job(on, chat_body(image=remote, mai={"options": {"min_confidence": 2.0}}), fetch=fetch)
    with pytest.raises(RequestError, match="x-request-id"):
        chat_job(on, chat_body(image=remote), "no spaces", fetch=fetch)
    with pytest.raises(RequestError, match="max_tokens"):
        answer_job(on, {"image": remote, "question": "Is it red?", "max_tokens": 0}, fetch=fetch)
    assert len(fetched) == 1


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("https://evil.example.net/a.png", "not on this server's allowlist"),
        ("https://user:pw@images.example.com/a.png", "credentials"),
        ("https://images.example.com:99999/a.png", "malformed"),
    ],
)
async def test_a_remote_url_off_the_policy_is_refused_before_any_connection(url, message):
    policy = RemoteImagePolicy(allowed_hosts=("images.example.com",), max_bytes=1000, timeout_s=1)

    async def resolver(host: str, port: int) -> list[str]:
        raise AssertionError("no name lookup for a refused URL")

    with pytest.raises(RequestError, match=message) as caught:
        await fetch_image(url, policy, param="image", resolver=resolver)
    assert caught.value.status == 400


# ---------------------------------------------------------------- remote image URLs: downloads


class ImageHandler(http.server.BaseHTTPRequestHandler):
    routes: dict = {}

    def do_GET(self):  # noqa: N802
        status, headers, body, delay = self.routes.get(self.path, (404, {}, b"", 0))
        time.sleep(delay)
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def image_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ImageHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    png = image_bytes()
    ImageHandler.routes = {
        "/a.png": (200, {"content-type": "image/png", "content-length": str(len(png))}, png, 0),
        "/big.png": (200, {"content-length": "999999"}, b"x" * 10, 0),
        "/slow.png": (200, {}, png, 2.0),
        "/away": (302, {"location": "http://elsewhere.test/a.png"}, b"", 0),
        "/here": (302, {"location": "/a.png"}, b"", 0),
        "/loop": (302, {"location": "/loop"}, b"", 0),
    }
    yield f"http://images.test:{port}"
    server.shutdown()


async def to_loopback(host, port):
    return ["127.0.0.1"]


def policy(**overrides):
    return RemoteImagePolicy(
        **{
            "allowed_hosts": ("images.test",),
            "max_bytes": 100_000,
            "timeout_s": 1.0,
            "allow_private_networks": True,
        }
        | overrides
    )


async def test_download_follows_allowed_redirects_and_pins_the_checked_address(image_server):
    assert (
        await fetch_image(f"{image_server}/a.png", policy(), param="image", resolver=to_loopback)
        == image_bytes()
    )
    assert (
        await fetch_image(f"{image_server}/here", policy(), param="image", resolver=to_loopback)
        == image_bytes()
    )


@pytest.mark.parametrize(
    ("path", "overrides", "status", "message"),
    [
        (
            "/a.png",
            {"allow_private_networks": False},
            400,
            "resolves to a private, loopback or link-local address",
        ),
        ("/away", {}, 400, "'elsewhere.test' is not on this server's allowlist"),
        ("/loop", {}, 400, "redirects more than 3 times"),
        ("/big.png", {}, 413, "larger than the limit of 100000 bytes"),
        ("/a.png", {"max_bytes": 50}, 413, "larger than the limit of 50 bytes"),
        ("/slow.png", {"timeout_s": 0.3}, 400, "did not finish within 0.3 s"),
        ("/missing.png", {}, 400, "answered HTTP 404"),
    ],
)
async def test_downloads_that_are_refused(image_server, path, overrides, status, message):
    with pytest.raises(RequestError, match=message) as caught:
        await fetch_image(f"{image_server}{path}", policy(**overrides), param="image", resolver=to_loopback)
    assert caught.value.status == status


async def test_a_host_that_does_not_resolve_is_a_clear_400():
    async def nowhere(host, port):
        raise OSError("no such host")

    with pytest.raises(RequestError, match="does not resolve"):
        await fetch_image("https://images.test/a.png", policy(), param="image", resolver=nowhere)


def test_real_resolution_refuses_localhost():
    with pytest.raises(RequestError, match="private, loopback"):
        asyncio.run(
            fetch_image(
                "http://localhost:9/a.png",
                policy(allowed_hosts=("localhost",), allow_private_networks=False),
                param="image",
            )
        )
