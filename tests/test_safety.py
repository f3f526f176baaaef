"""Model text made safe (backend/safety.py) and the HTTP guard's rules (ui/security.py).

Expected rewrites are written out by hand; the guard runs in front of a tiny
Starlette app through httpx's ASGI transport (no server, no browser).
"""

from __future__ import annotations

import base64
import hashlib
import tomllib
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from backend.safety import PARSE_CHARS, escape_markdown, link_remote_images
from ui.security import (
    BROWSER_COOKIE,
    Guard,
    Owners,
    browser_key,
    named_session,
    origin_allowed,
    page_policy,
)


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("![x](http://h/leak?q=1)", "[x](http://h/leak?q=1)"),
        ("a ![x](http://h/l) b ![](https://h/m) c", "a [x](http://h/l) b [image](https://h/m) c"),
        ("> quoted ![x](http://h/l)\n> more", "> quoted [x](http://h/l)\n> more"),
        (
            "- item ![x](http://h/l)\n  - sub ![y](//h/y)",
            "- item [x](http://h/l)\n  - sub [y](//h/y)",
        ),
        ("![x][r]\n\n[r]: http://h/ref", "[x][r]\n\n[r]: http://h/ref"),
        ("| a |\n|---|\n| ![x](http://h/t) |", "| a |\n|---|\n| [x](http://h/t) |"),
        ("# Title ![x](/local.png) ##", "# Title [x](/local.png) ##"),
        ('two\nlines ![x](<http://h/a b> "t")', 'two\nlines [x](<http://h/a b> "t")'),
        # An image inside an image's text shows once the outer one is a link.
        ("![a ![b](http://h/b)](http://h/a)", "[a [b](http://h/b)](http://h/a)"),
        # The page's renderer checks addresses only when it renders: a javascript:
        # definition is a definition, so the ones after it are too.
        (
            "[1]: javascript:alert(1)\n[2]: http://h/leak.png\n\n![x][2] ![y][1]",
            "[1]: javascript:alert(1)\n[2]: http://h/leak.png\n\n[x][2] [y][1]",
        ),
        # Code spans: the page's math ($), directives (:x[...]) and autolinks can end
        # them early, leaving the image outside.
        ("$`$ ![x](http://h/m) `$`$", "$`$ [x](http://h/m) `$`$"),
        (":d[`] ![x](http://h/d) `", ":d[`] [x](http://h/d) `"),
        ("www.h.com/` ![x](http://h/w) `", "www.h.com/` [x](http://h/w) `"),
        ("`![c](http://h/c)` in a code span", "`[c](http://h/c)` in a code span"),
        # A code span hides the first "]": without code spans there is no image there.
        ("![a `]` b](http://h/a)", "[a `]` b](http://h/a)"),
        # A math block opened before a fence ends inside it on the page.
        ("$$\n```\n$$\n![x](http://h/f)\n```", "$$\n```\n$$\n[x](http://h/f)\n```"),
    ],
)
def test_remote_images_become_links(markdown: str, expected: str) -> None:
    assert link_remote_images(markdown) == expected


@pytest.mark.parametrize(
    "markdown",
    [
        "```\n![x](http://h/l)\n```",  # a code block
        "    ![x](http://h/indented)",  # an indented code block
        "\\![x](http://h/escaped)",  # an escaped bang: a link already
        "Wow![1] no address, no image",
        "![x](data:image/png;base64,iVBORw0KGgo=)",  # nothing to fetch
        "$n! [k]$ and plain text",
    ],
)
def test_text_without_remote_images_is_unchanged(markdown: str) -> None:
    assert link_remote_images(markdown) == markdown


def test_many_images_on_a_line_all_go_and_a_text_too_long_to_parse_loses_every_image() -> None:
    prose = "".join(f"![i{n}](http://h/{n}) [l{n}](http://h/{n}) " for n in range(200))
    assert link_remote_images(prose) == prose.replace("![", "[")
    huge = "```\n![kept](http://h/c)\n```\n" + "x" * PARSE_CHARS + " ![y](http://h/y)"
    assert "![" not in link_remote_images(huge)  # too long to parse: code loses it too


def test_code_keeps_its_images_while_prose_loses_them() -> None:
    markdown = "```md\n![x](http://h/code)\n```\n\nsee ![y](http://h/prose)"
    assert (
        link_remote_images(markdown) == "```md\n![x](http://h/code)\n```\n\nsee [y](http://h/prose)"
    )


@pytest.mark.parametrize(
    ("name", "escaped"),
    [
        ("![x](http://h/a).png", "!\\[x\\](http\\://h/a).png"),  # no image, no autolink
        ("[1]: javascript:x", "\\[1\\]: javascript\\:x"),
        ("$x$ :d[y] a_b*c* www.h.com", "\\$x\\$ \\:d\\[y\\] a\\_b\\*c\\* www\\.h.com"),
        ("two\nlines\r\n# head", "two lines # head"),  # no new block
        ("# 1", "\\# 1"),  # a heading at the start of a line, a list below
        ("12. x", "12\\. x"),
        ("Kimi-VL 12:30 report.pdf", "Kimi-VL 12:30 report.pdf"),  # nothing to escape
        ("照片 1", "照片 1"),
    ],
)
def test_names_put_into_markdown_render_as_written(name: str, escaped: str) -> None:
    assert escape_markdown(name) == escaped


@pytest.mark.parametrize(
    ("origin", "host", "extra", "allowed"),
    [
        (None, "127.0.0.1:8300", (), True),  # curl, scripts: not another page
        ("http://127.0.0.1:8300", "127.0.0.1:8300", (), True),
        ("https://chat.example.com", "chat.example.com", (), True),  # TLS proxy, same host
        ("http://127.0.0.1:8301", "127.0.0.1:8300", (), False),  # another port is another site
        ("http://evil.example", "127.0.0.1:8300", (), False),
        ("null", "127.0.0.1:8300", (), False),  # sandboxed frame, file:
        ("https://chat.example.com/", "127.0.0.1:8300", ("https://Chat.Example.com",), True),
        ("http://chat.example.com", "127.0.0.1:8300", ("https://chat.example.com",), False),
        ("http://127.0.0.1:8300", None, (), False),
    ],
)
def test_origin_allowed(
    origin: str | None, host: str | None, extra: tuple[str, ...], allowed: bool
) -> None:
    assert origin_allowed(origin, host, extra) is allowed


def test_page_policy_allows_the_pages_inline_scripts_by_hash_only() -> None:
    html = '<script>alert(1)</script><script type="module" src="/assets/x.js"></script>'
    policy = dict(part.split(" ", 1) for part in page_policy(html).split("; "))
    # sha256 of "alert(1)", by `printf 'alert(1)' | openssl dgst -sha256 -binary | base64`.
    assert policy["script-src"] == "'self' 'sha256-bhHHL3z2vDgxUt0W3dWQOrprscmda2Y5pLsLg4GF+pI='"
    assert policy["img-src"] == "'self' data: blob:"
    assert policy["frame-ancestors"] == "'none'"
    assert "'unsafe-inline'" not in policy["script-src"]
    assert page_policy(html, "127.0.0.1:8300").endswith("frame-ancestors 'none'")
    sockets = dict(p.split(" ", 1) for p in page_policy(html, "127.0.0.1:8300").split("; "))
    assert sockets["connect-src"] == "'self' ws://127.0.0.1:8300 wss://127.0.0.1:8300"
    forged = dict(p.split(" ", 1) for p in page_policy(html, "x; script-src *").split("; "))
    assert forged["connect-src"] == "'self'" and "*" not in forged["script-src"]


def test_browser_key_is_read_from_the_cookie_header() -> None:
    assert browser_key(f"a=1; {BROWSER_COOKIE}=k3y; b=2") == "k3y"
    assert browser_key("a=1") is None
    assert browser_key(None) is None
    assert browser_key('bad="') is None
    # Another app's cookie that is not RFC 6265 costs only that cookie (Starlette's parser).
    assert browser_key(f'prefs={{"theme": "dark"}}; {BROWSER_COOKIE}=k3y') == "k3y"


def test_the_session_a_query_names_is_read_as_starlette_reads_it() -> None:
    def named(query: bytes) -> tuple[str | None, bool]:
        return named_session({"query_string": query})

    assert named(b"session_id=a") == ("a", True)
    assert named(b"session_id=a&session_id=b") == ("b", False)  # FastAPI takes the last
    assert named(b"session_id=a&session%5Fid=b") == ("b", False)  # however it is spelt
    assert named(b"other=1") == (None, True)


PAGE = "<html><head><script>window.theme = 'dark';</script></head><body>" + "x" * 2000 + "</body>"


async def _echo(request: Request) -> Response:
    if request.url.path == "/page":
        return HTMLResponse(PAGE)
    if request.url.path == "/login":
        answer = JSONResponse({"success": True})
        answer.set_cookie("access_token", "t0ken", httponly=True)
        answer.set_cookie("access_token_0", "chunk", httponly=True)
        return answer
    body = await request.body()
    return JSONResponse({"method": request.method, "bytes": len(body)})


def _client(upload_limit_mb: float = 1.0, base_url: str = "http://ui:8300") -> httpx.AsyncClient:
    app = Starlette(
        routes=[Route("/{path:path}", _echo, methods=["GET", "POST", "PUT"])],
        middleware=[Middleware(GZipMiddleware)],  # as Chainlit's app has
    )
    guard = Guard(
        app, allowed_origins=("https://proxy.example",), upload_limit_mb=lambda: upload_limit_mb
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=guard), base_url=base_url)


async def test_a_pages_policy_names_the_inline_scripts_it_was_sent_with() -> None:
    digest = base64.b64encode(hashlib.sha256(b"window.theme = 'dark';").digest()).decode()
    for encoding in ("identity", "gzip"):  # Chainlit compresses its page (GZipMiddleware)
        async with _client() as client:
            page = await client.get("/page", headers={"Accept-Encoding": encoding})
        assert page.text == PAGE
        assert page.headers.get("content-encoding", "identity") == encoding
        policy = dict(p.split(" ", 1) for p in page.headers["content-security-policy"].split("; "))
        assert policy["script-src"] == f"'self' 'sha256-{digest}'"


async def test_sign_in_cookies_are_secure_over_https_only() -> None:
    for base_url, secure in (("https://ui", True), ("http://ui", False)):
        async with _client(base_url=base_url) as client:
            answer = await client.post("/login")
        cookies = [v for k, v in answer.headers.multi_items() if k == "set-cookie"]
        assert len(cookies) == 3  # two of Chainlit's, the browser cookie
        assert all(("; Secure" in c) == secure for c in cookies), cookies


async def test_state_changing_requests_from_other_sites_are_refused() -> None:
    async with _client() as client:
        foreign = await client.post("/project/thread", headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403
        assert foreign.json() == {"detail": "Requests from other web sites are refused."}
        own = await client.post("/project/thread", headers={"Origin": "http://ui:8300"})
        assert own.status_code == 200
        proxied = await client.post("/project/thread", headers={"Origin": "https://proxy.example"})
        assert proxied.status_code == 200
        read = await client.get("/project/settings", headers={"Origin": "http://evil.example"})
        assert read.status_code == 200  # reads are not refused (CORS keeps their answers)
        polling = await client.get("/ws/socket.io/", headers={"Origin": "http://evil.example"})
        assert polling.status_code == 403  # socket.io's HTTP transport acts on the chat


async def test_uploads_are_refused_from_their_declared_size() -> None:
    async with _client(upload_limit_mb=1.0) as client:
        big = await client.post(
            "/project/file?session_id=s", content=b"\0" * (1024 * 1024 + 65 * 1024)
        )
        assert big.status_code == 413
        assert big.json() == {"detail": "This file is larger than the 1 MB the app accepts."}

        async def chunks():  # type: ignore[no-untyped-def]
            yield b"\0"

        unsized = await client.post("/project/file?session_id=s", content=chunks())
        assert unsized.status_code == 411


async def test_responses_carry_the_browser_cookie_once_and_no_referrer() -> None:
    async with _client() as client:
        first = await client.get("/anything")
        cookie = first.headers["set-cookie"]
        assert cookie.startswith(f"{BROWSER_COOKIE}=") and "HttpOnly" in cookie
        assert "SameSite=Lax" in cookie
        assert first.headers["referrer-policy"] == "no-referrer"
        again = await client.get("/anything")  # httpx sends the cookie back
        assert "set-cookie" not in again.headers


class _Session:
    """Stands in for Chainlit's WebsocketSession (hashable, weakly referenced)."""


def test_a_session_belongs_to_the_browser_that_opened_it() -> None:
    owners = Owners()
    mine, scripted, unknown = _Session(), _Session(), _Session()
    owners.claim(mine, "key-a")
    owners.claim(mine, "key-b")  # the first claim stays
    owners.claim(scripted, None)
    assert owners.owns(mine, "key-a") and owners.bound(mine)
    assert not owners.owns(mine, "key-b") and not owners.owns(mine, None)
    assert owners.owns(scripted, None) and owners.owns(scripted, "key-b")
    assert not owners.bound(scripted)
    assert not owners.owns(unknown, None) and not owners.owns(unknown, "key-a")


def test_closed_tabs_are_released_within_a_minute() -> None:
    """tests/browser/test_security.py shows files go once ``session_timeout`` passes
    (with 3 s); this is the value people get (Chainlit's own default is 3600 s)."""
    config = tomllib.loads((Path(__file__).parents[1] / ".chainlit/config.toml").read_text())
    assert 10 <= config["project"]["session_timeout"] <= 60
