"""Browsers on other origins: CORS only for the exact origins `--allow-origin` names;
every other origin is refused (403, no CORS headers). Checked over HTTP and in headless
Chromium with a page served from a second 127.0.0.1 server (`localhost:P` and
`127.0.0.1:Q` are different origins)."""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("ag_ui")
pytest.importorskip("uvicorn")

from seamline.server.guard import normalize_origin
from tests.server.harness import serve

PREFLIGHT = {"access-control-request-method": "POST", "access-control-request-headers": "content-type"}


def test_an_allowed_origin_gets_cors_and_others_get_403(tmp_path: Path) -> None:
    allowed = "http://localhost:4000"
    with serve(tmp_path, allow_origins=(allowed,), token="s3cret") as served, served.client() as client:
        # The preflight carries no token; it is answered for the allowed origin only.
        reply = client.options("/v1/sessions", headers={"origin": allowed, **PREFLIGHT})
        assert reply.status_code == 204, reply.text
        assert reply.headers["access-control-allow-origin"] == allowed
        assert set(reply.headers["access-control-allow-methods"].split(", ")) == {"GET", "POST", "DELETE"}
        assert reply.headers["access-control-allow-headers"] == "Authorization, Content-Type, Last-Event-ID"
        assert reply.headers["vary"] == "Origin"
        auth = {"authorization": "Bearer s3cret", "origin": allowed}
        created = client.post("/v1/sessions", json={}, headers=auth)
        assert created.status_code == 201 and created.headers["access-control-allow-origin"] == allowed
        assert created.headers["vary"] == "Origin"
        exposed = {name.strip().lower() for name in created.headers["access-control-expose-headers"].split(",")}
        assert exposed == {"location", "x-seamline-run-id", "x-seamline-session-id"}
        assert client.post("/v1/sessions", json={}, headers={"origin": allowed}).status_code == 401
        for other in ("http://localhost:4001", "https://localhost:4000", "http://127.0.0.1:4000", "null"):
            for method, extra in (("OPTIONS", PREFLIGHT), ("POST", {"authorization": "Bearer s3cret"})):
                reply = client.request(method, "/v1/sessions", headers={"origin": other, **extra}, json={})
                assert reply.status_code == 403, (other, method)
                assert "access-control-allow-origin" not in reply.headers
        # The server's own page (same host and port) needs no CORS.
        own = client.get("/v1/info", headers={"origin": served.base, "authorization": "Bearer s3cret"})
        assert own.status_code == 200 and "access-control-allow-origin" not in own.headers
        assert len(client.get("/v1/sessions", headers={"authorization": "Bearer s3cret"}).json()["sessions"]) == 1


def test_no_origin_is_allowed_by_default(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        port = served.base.rsplit(":", 1)[1]
        other_port = "1" if port != "1" else "2"
        for origin in (f"http://127.0.0.1:{other_port}", f"http://localhost:{port}"):
            reply = client.options("/v1/sessions", headers={"origin": origin, **PREFLIGHT})
            assert reply.status_code == 403 and "access-control-allow-origin" not in reply.headers


def test_the_page_may_not_be_framed(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        for path in ("/", "/page/page.js", "/page/fleet.js"):
            policy = client.get(path).headers["content-security-policy"]
            assert "frame-ancestors 'none'" in policy and "default-src 'self'" in policy


@pytest.mark.parametrize(
    ("given", "normal"),
    [("http://LOCALHOST:80", "http://localhost"), ("https://a.example:8443/", "https://a.example:8443")],
)
def test_origins_are_normalized(given: str, normal: str) -> None:
    assert normalize_origin(given) == normal


@pytest.mark.parametrize("bad", ["localhost:4000", "http://a.example/app", "ftp://a.example", "http://u@a.example"])
def test_a_bad_origin_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        normalize_origin(bad)


# -- a page on another origin, in headless Chromium ------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


@contextmanager
def _page_server(folder: Path) -> Iterator[int]:
    """A plain static server on 127.0.0.1 (another port: another origin)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(folder), **kwargs)  # type: ignore[arg-type]

        def log_message(self, format: str, *args: object) -> None:
            return

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


CALLER = """<!doctype html><title>caller</title><script>
async function call(api) {
  try {
    const reply = await fetch(api + "/v1/sessions", {
      method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify({provider: "offline"}),
    });
    return "status " + reply.status;
  } catch (error) { return "refused: " + error; }
}
// A stock AG-UI client's POST: the run and session it started, as the page can read them.
async function agui(api) {
  const input = {threadId: "t1", runId: "r1", messages: [{id: "u1", role: "user", content: "hello"}],
    tools: [], context: [], state: {}, forwardedProps: {}};
  const reply = await fetch(api + "/v1/agui", {
    method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify(input),
  });
  const names = ["x-seamline-run-id", "x-seamline-session-id"];
  const read = Object.fromEntries(names.map((name) => [name, reply.headers.get(name)]));
  await reply.text();  // the stream, to its end
  return read;
}
</script>"""


@pytest.mark.real
@pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason="chromium missing: bash scripts/system/60-chromium.sh")
def test_a_page_on_another_origin_calls_the_api_only_when_allowed(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(CALLER)
    with _page_server(site) as page_port, sync_api.sync_playwright() as playwright:
        origin = f"http://localhost:{page_port}"  # the API is at 127.0.0.1:other port
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            for allowed, expected in (((origin,), "status 201"), ((), "refused: TypeError")):
                api = tmp_path / f"api{len(allowed)}"
                api.mkdir()
                with serve(api, allow_origins=allowed) as served:
                    page = browser.new_page()
                    page.goto(origin + "/index.html")
                    result = page.evaluate("api => call(api)", served.base)
                    assert result.startswith(expected), result
                    assert len(served.store.list_sessions()) == (1 if allowed else 0)
                    if allowed:  # the AG-UI response's headers are readable from the other origin
                        read = page.evaluate("api => agui(api)", served.base)
                        (session,) = [s for s in served.store.list_sessions() if s.metadata.get("agui_thread_id")]
                        assert read["x-seamline-session-id"] == session.id
                        with served.client() as client:
                            (run,) = [r for r in client.get("/v1/runs").json()["runs"] if r["session_id"] == session.id]
                        assert read["x-seamline-run-id"] == run["id"]
                    page.close()
        finally:
            browser.close()
