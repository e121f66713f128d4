"""Headless Chromium driven over the DevTools protocol, on a pipe: standard library only.

`--remote-debugging-pipe` makes Chromium read protocol commands on its fd 3 and write replies and events on its fd 4,
each message a JSON object ended by a NUL byte. No port, no websocket client, nothing to install beyond Chromium.
Used by tools/mlflow_ui.py and tests/tooling/test_mlflow_ui.py.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"

# argv: the read end, the write end, the command. Moved above 9 first so that neither lands on the other's target.
_ON_FDS_3_AND_4 = """import fcntl, os, sys
ends = [fcntl.fcntl(int(fd), fcntl.F_DUPFD, 10) for fd in sys.argv[1:3]]
for fd in sys.argv[1:3]:
    os.close(int(fd))
for target, fd in zip((3, 4), ends):
    os.dup2(fd, target)
    os.close(fd)
os.execv(sys.argv[3], sys.argv[3:])
"""


class BrowserError(RuntimeError):
    pass


def find_chromium(binary: str | None = None) -> str:
    """`binary`, else /usr/bin/chromium, else chromium / chromium-browser / google-chrome on PATH."""
    for candidate in (binary, CHROMIUM, "chromium", "chromium-browser", "google-chrome"):
        if candidate and (Path(candidate).is_file() or shutil.which(candidate)):
            return candidate if Path(candidate).is_file() else str(shutil.which(candidate))
    raise BrowserError("no Chromium found (apt-get install chromium), or pass its path")


class Browser:
    """One headless Chromium (started by this object, in a process group of its own that `close` ends) and its
    pages."""

    def __init__(self, binary: str | None = None, timeout_s: float = 60) -> None:
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="chromium-profile-")
        to_child, self._write = os.pipe()  # we write commands, Chromium reads them on its fd 3
        self._read, from_child = os.pipe()  # Chromium writes on its fd 4, we read
        command = [
            find_chromium(binary),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--no-first-run",
            "--no-default-browser-check",
            "--hide-scrollbars",
            "--mute-audio",
            f"--user-data-dir={self.profile}",
            "--remote-debugging-pipe",
            "about:blank",
        ]
        # a small Python puts the pipe ends on fds 3 and 4, then becomes Chromium (exec), in a session of its own
        self.process = subprocess.Popen(
            [sys.executable, "-S", "-c", _ON_FDS_3_AND_4, str(to_child), str(from_child), *command],
            pass_fds=(to_child, from_child),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Debian's /usr/bin/chromium is a script: the browser is its child, in the group
        )
        os.close(to_child)
        os.close(from_child)
        self._buffer = b""
        self._next_id = 0
        try:
            self.send("Browser.getVersion")  # fails here, with a clear message, if Chromium did not start
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- the protocol

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """One command; its result (events that arrive meanwhile are dropped)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._write, data) :]
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._receive(deadline, method)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')} {reply['error'].get('data', '')}")
                return reply.get("result", {})

    def _receive(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"{waiting_for}: no reply from Chromium within {self.timeout_s:.0f} s")
            ready, _, _ = select.select([self._read], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self._read, 1 << 20)
                if not chunk:
                    raise BrowserError(f"{waiting_for}: Chromium exited (code {self.process.poll()})")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    # ---------------------------------------------------------------- pages

    def new_page(self, width: int = 1600, height: int = 1000) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        page.resize(width, height)
        return page

    def close(self) -> None:
        """Browser.close, then (if still alive after 10 s) a kill of the process group this object started."""
        if self.process.poll() is None:
            try:
                self._next_id += 1
                os.write(self._write, json.dumps({"id": self._next_id, "method": "Browser.close"}).encode() + b"\0")
            except OSError:
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)  # its own session: the group id is its PID
                self.process.wait(timeout=10)
        for fd in (self._read, self._write):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Page:
    """A tab: navigate, evaluate JavaScript, wait for a condition, click, screenshot."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.send(method, params, self.session)

    def resize(self, width: int, height: int) -> None:
        """The viewport's size in CSS pixels (what a screenshot holds)."""
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def goto(self, url: str) -> None:
        result = self.send("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise BrowserError(f"{url}: {result['errorText']}")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (awaited if a promise), as JSON."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"JavaScript error: {text}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout_s: float = 60, what: str | None = None) -> Any:
        """Polls a JavaScript expression until its value is truthy (a script error, e.g. while the page is still
        loading, counts as not yet); that value."""
        deadline = time.monotonic() + timeout_s
        error = ""
        while True:
            try:
                value = self.evaluate(expression)
            except BrowserError as e:
                value, error = None, f" (last: {e})"
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out after {timeout_s:.0f} s waiting for {what or expression}{error}")
            time.sleep(0.25)

    def text(self) -> str:
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def click(self, element: str, what: str | None = None) -> None:
        """A real mouse click (moved, pressed, released) on the centre of the element a JavaScript expression
        gives, scrolled into view first."""
        box = self.evaluate(
            f"(() => {{ const e = {element}; if (!e) return null; e.scrollIntoView({{block: 'center'}});"
            " const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        if not box:
            raise BrowserError(f"nothing to click: {what or element}")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            extra = {"button": "left", "clickCount": 1} if kind != "mouseMoved" else {}
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1], **extra})

    def type(self, text: str) -> None:
        """Text typed into the focused element."""
        self.send("Input.insertText", {"text": text})

    def press(self, key: str) -> None:
        """A key pressed and released: Enter, Escape, Tab."""
        code = {"Enter": 13, "Escape": 27, "Tab": 9}[key]
        for kind in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", {"type": kind, "key": key, "code": key, "windowsVirtualKeyCode": code})

    def screenshot(self, path: str | Path, clip: dict[str, float] | None = None) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if clip is not None:
            params["clip"] = {**clip, "scale": 1}
        data = base64.b64decode(self.send("Page.captureScreenshot", params)["data"])
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path
