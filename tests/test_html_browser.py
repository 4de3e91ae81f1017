"""The HTML report as a person sees it: real headless Chromium (Debian's
`chromium`), driven over the DevTools protocol.

The client below talks to Chromium through ``--remote-debugging-pipe``: the
browser reads NUL-terminated JSON commands on fd 3 and writes replies and
events on fd 4, so no websocket library or driver download is needed.
Without chromium these tests skip locally and fail in CI (CI=true): `.ci/run`
and `make test` install it.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from graphbreak_doctor.diagnose import diagnose, target_builder
from graphbreak_doctor.model import Findings
from graphbreak_doctor.render import html

from conftest import FP4_WRAPPER

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("GRAPHBREAK_DOCTOR_CHROMIUM") or shutil.which("chromium")
IN_CI = os.environ.get("CI", "").lower() in ("true", "1", "yes")
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--mute-audio",
]
HOSTILE = ("<script>alert(1)</script>", "</textarea>")


class DevToolsError(RuntimeError):
    pass


class Chromium:
    """A headless Chromium and a DevTools-protocol session over a pipe."""

    def __init__(self, binary: str, profile: Path):
        profile.mkdir(parents=True, exist_ok=True)
        cmd_r, self._cmd_w = os.pipe()
        self._res_r, res_w = os.pipe()
        # Move the child's ends above fd 9, so that placing them on 3 and 4 cannot clobber one with the other.
        cmd_r, res_w = self._above_9(cmd_r), self._above_9(res_w)
        self.log_path = profile / "chromium.log"
        self._log = open(self.log_path, "wb")
        exec_with_fds = (
            "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
            "os.execvp(sys.argv[3], sys.argv[3:])"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", exec_with_fds, str(cmd_r), str(res_w), binary, *FLAGS,
             f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            pass_fds=(cmd_r, res_w), stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
        )
        os.close(cmd_r)
        os.close(res_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    @staticmethod
    def _above_9(fd: int) -> int:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
        os.close(fd)
        return high

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time")
            if select.select([self._res_r], [], [], left)[0]:
                chunk = os.read(self._res_r, 1 << 20)
                if not chunk:
                    raise DevToolsError(f"chromium closed the DevTools pipe; its log:\n{self.log_tail()}")
                self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._cmd_w, data):]
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise DevToolsError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, session: str | None = None, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method and (session is None or event.get("sessionId") == session):
                    return self.events.pop(i)
            self.events.append(self._receive(deadline))

    def log_tail(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-2000:]

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (DevToolsError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd_w)
        os.close(self._res_r)
        self._log.close()


class Page:
    """One tab: navigate, evaluate, click like a user, and what the page reported."""

    WIDTH, HEIGHT = 1280, 900

    def __init__(self, browser: Chromium):
        self.browser = browser
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.viewport(self.HEIGHT)
        self.url = ""

    def send(self, method: str, params: dict | None = None) -> dict:
        return self.browser.send(method, params, session=self.session)

    def viewport(self, height: int) -> None:
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": self.WIDTH, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def open(self, path: Path, javascript: bool = True) -> None:
        self.send("Emulation.setScriptExecutionDisabled", {"value": not javascript})
        self.browser.events.clear()
        self.url = path.resolve().as_uri()
        self.send("Page.navigate", {"url": self.url})
        self.browser.wait_for("Page.loadEventFired", self.session)

    def js(self, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise DevToolsError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real left click in the middle of the element (Input domain, not element.click())."""
        box = self.js(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView({{block: 'center'}});"
            " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1})

    def visible(self, selector: str) -> list[bool]:
        # checkVisibility: not display:none, not inside a closed <details>
        # (content-visibility: hidden), not visibility:hidden.
        return self.js(
            f"Array.from(document.querySelectorAll({json.dumps(selector)}))"
            ".map(e => e.checkVisibility({visibilityProperty: true}) && e.getClientRects().length > 0)"
        )

    def text(self, selector: str) -> str:
        return self.js(f"document.querySelector({json.dumps(selector)}).innerText")

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions, error log entries (CSP violations
        among them), dialogs, and any request other than the report itself."""
        out = []
        for event in self.browser.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
                out.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Runtime.exceptionThrown":
                out.append(f"exception: {params.get('exceptionDetails')}")
            elif method == "Log.entryAdded" and params["entry"].get("level") in ("error", "warning"):
                out.append(f"log: {params['entry'].get('text')}")
            elif method == "Page.javascriptDialogOpening":
                out.append(f"dialog: {params.get('message')}")
                self.send("Page.handleJavaScriptDialog", {"accept": False})
            elif method == "Network.requestWillBeSent" and params["request"]["url"] != self.url:
                out.append(f"request: {params['request']['url']}")
        return out

    def screenshot(self, path: Path) -> bytes:
        height = int(self.send("Page.getLayoutMetrics")["cssContentSize"]["height"])
        self.viewport(min(height, 16000))
        try:
            data = base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"})["data"])
        finally:
            self.viewport(self.HEIGHT)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return data


# --- fixtures ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not CHROMIUM:
        message = "chromium is not installed (Debian: apt-get install chromium; `make test` does it as root)"
        if IN_CI:
            pytest.fail(f"{message}: the browser tests must run in CI")
        pytest.skip(message)
    chromium = Chromium(CHROMIUM, tmp_path_factory.mktemp("chromium-profile"))
    try:
        chromium.send("Browser.getVersion", timeout=60)
        yield chromium
    finally:
        chromium.close()


@pytest.fixture(scope="module")
def page(browser):
    return Page(browser)


@pytest.fixture(scope="module")
def reports(tmp_path_factory, traces) -> dict[str, tuple[Findings, Path]]:
    out = {}
    folder = tmp_path_factory.mktemp("reports")
    for name, spec, device in [
        ("fp4", "fixtures.flashinfer_targets:fp4_quantize_wrapper", "sm120"),
        ("hostile", "fixtures.breaks.hostile_text:target", "cpu"),
        ("many", "fixtures.many_breaks:target", "cpu"),
    ]:
        # FlashInfer's wrapper: the session's trace of it (as .ci/run gates it).
        findings = (traces.get(*FP4_WRAPPER).findings if name == "fp4"
                    else diagnose(target_builder(spec), device=device))
        path = folder / f"{name}.html"
        path.write_text(html.render(findings), encoding="utf-8")
        out[name] = (findings, path)
    return out


# --- what a person sees ----------------------------------------------------------


@pytest.mark.parametrize("name", ["fp4", "many"])
def test_verdict_and_every_card_are_visible(page, reports, name):
    findings, path = reports[name]
    page.open(path)
    verdict = " ".join(page.text("#verdict").split())
    assert "fullgraph FAILED" in verdict and findings.fullgraph.error in verdict
    assert f"{len(findings.breaks)} distinct breaks ({sum(b.count for b in findings.breaks)} hits)" in verdict
    assert f"{len(findings.root_causes)} root cause" in verdict
    assert f"torch {findings.environment['torch']}" in verdict
    assert ("emulated " + findings.device.get("gpu", "")) in verdict if findings.device["emulated"] else "cpu: plain CPU tensors" in verdict
    assert page.visible("article.card") == [True] * len(findings.breaks)
    for b in findings.breaks:
        card = " ".join(page.text(f"#break-{b.id}").split())
        assert b.category in card and b.gb_type in card and f"×{b.count}" in card
        assert f"{html.short_path(b.site.file)}:{b.site.line}" in card
        assert " ".join(b.fix.summary.replace("`", "").split()) in card
    # The stack and the decompiled code are folded: their text is not shown.
    assert not any(page.visible("details.stack ol")) and not any(page.visible("details.graph pre"))
    assert page.problems() == []
    if name == "fp4":
        png = page.screenshot(ARTIFACTS / "html-report-fp4.png")
        assert png.startswith(b"\x89PNG") and len(png) > 50_000


def test_filtering_by_category_and_package_hides_cards(page, reports):
    findings, path = reports["many"]
    page.open(path)
    assert page.visible("#filters") == [True]
    total = len(findings.breaks)
    category = "unsupported-builtin"
    page.click(f'#filters input[name="category"][value="{category}"]')
    shown = page.visible("article.card")
    assert shown == [b.category != category for b in findings.breaks]
    assert page.text("#shown") == f"{shown.count(True)} of {total} breaks shown"
    assert 0 < shown.count(True) < total

    page.click('#filters button[data-action="show-all"]')
    assert page.visible("article.card") == [True] * total

    page.click('#filters input[name="package"][value="fixtures"]')
    assert page.visible("article.card") == [b.package != "fixtures" for b in findings.breaks]
    page.click('#filters input[name="category"][value="filesystem"]')
    assert page.visible("article.card") == [b.package != "fixtures" and b.category != "filesystem" for b in findings.breaks]
    assert page.problems() == []


def test_expand_and_collapse_all(page, reports):
    findings, path = reports["fp4"]
    page.open(path)
    page.click('#filters button[data-action="expand"]')
    assert all(page.visible("details.graph pre")) and all(page.visible("details.resume pre"))
    assert len(page.visible("details.resume pre")) == len(findings.resume_code) > 0
    page.click('#filters button[data-action="collapse"]')
    assert not any(page.visible("main details pre"))


def test_reads_without_javascript(page, reports):
    findings, path = reports["fp4"]
    page.open(path, javascript=False)
    try:
        assert page.visible("#filters") == [False]  # the script did not run: no filter form
        assert page.visible("article.card") == [True] * len(findings.breaks)
        assert "fullgraph FAILED" in page.text("#verdict")
        assert page.visible("#callgraph") == [True]
        # Folding is plain <details>: a click on a summary still opens it.
        page.click("details.graph summary")
        assert page.visible("details.graph pre")[0]
        assert page.problems() == []
    finally:
        page.send("Emulation.setScriptExecutionDisabled", {"value": False})


def test_print_layout_hides_the_controls(page, reports):
    _findings, path = reports["many"]
    page.open(path)
    page.send("Emulation.setEmulatedMedia", {"media": "print"})
    try:
        assert page.visible("nav.toc") == [False] and page.visible("#filters") == [False]
        assert all(page.visible("article.card"))
    finally:
        page.send("Emulation.setEmulatedMedia", {"media": ""})
    # Printing unfolds every <details> (listeners run in order: the report's first).
    page.js("window.addEventListener('beforeprint', () => {"
            " window.openWhilePrinting = document.querySelectorAll('details[open]').length; })")
    folded = page.js("document.querySelectorAll('details:not([open])').length")
    pdf = base64.b64decode(page.send("Page.printToPDF", {"printBackground": False})["data"])
    assert pdf.startswith(b"%PDF")
    assert folded > 0 and page.js("window.openWhilePrinting") == page.js("document.querySelectorAll('details').length")
    assert page.js("document.querySelectorAll('details:not([open])').length") == folded  # folded again after


def test_hostile_text_is_shown_and_never_run(page, reports):
    findings, path = reports["hostile"]
    page.open(path)
    # The payloads would set the title or open an alert dialog.
    assert page.js("document.title") == "graphbreak-doctor: fixtures.breaks.hostile_text:target"
    assert page.js("document.scripts.length") == 1
    assert page.js("document.querySelectorAll('img, textarea').length") == 0
    text = page.text("#breaks")
    for needle in HOSTILE:
        assert needle in text
    assert any(HOSTILE[0] in page.text(f"#break-{b.id} figure") for b in findings.breaks)
    # Filtering by a package whose name is markup still works.
    odd = next(b.package for b in findings.breaks if b.package != "fixtures")
    page.click(f"#filters input[name='package'][value={json.dumps(odd)}]")
    assert page.visible("article.card") == [b.package != odd for b in findings.breaks]
    assert page.problems() == []
    page.screenshot(ARTIFACTS / "html-report-hostile.png")
