"""A real browser for the deployment tests: Debian's chromium, headless, driven over the DevTools
protocol (a WebSocket; `websockets` comes with uvicorn). The machine has no network beyond
loopback, so every background fetch of the browser's own is switched off, and each run gets a
new profile directory.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
)  # fmt: skip


class Browser:
    def __init__(self, work: Path, width: int = 1500, height: int = 1250) -> None:
        if not Path(CHROMIUM).exists():
            raise AssertionError(f"{CHROMIUM} is missing: `make setup` installs it (Debian package chromium)")
        profile = work / "chromium-profile"
        profile.mkdir(parents=True)
        self.log = open(work / "chromium.log", "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            assert self.proc.poll() is None, (
                f"chromium exited {self.proc.returncode}: see {work / 'chromium.log'}"
            )
            assert time.monotonic() < deadline, "chromium did not open its DevTools port within 60 s"
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as resp:
            page = next(t for t in json.load(resp) if t["type"] == "page")
        self.ws = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
        self._ids = itertools.count(1)
        self.send("Page.enable")
        self.send("Runtime.enable")

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        call = next(self._ids)
        self.ws.send(json.dumps({"id": call, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=120))
            if msg.get("id") == call:
                assert "error" not in msg, f"{method}: {msg['error']}"
                result: dict[str, Any] = msg.get("result", {})
                return result

    def set_cookie(self, url: str, name: str, value: str) -> None:
        self.send("Network.setCookie", url=url, name=name, value=value, path="/")

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def js(self, expression: str, frame: str | None = None) -> Any:
        """The value of `expression` in the page, or in the first iframe whose URL contains `frame`."""
        if frame is not None:
            expression = (
                f"(() => {{ const f = [...document.querySelectorAll('iframe')].find(f => f.src.includes({json.dumps(frame)}));"
                f" if (!f || !f.contentDocument) return null; const document_ = f.contentDocument;"
                f" return (function(document) {{ return {expression}; }})(document_); }})()"
            )
        got = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return got.get("result", {}).get("value")

    def wait_for(self, what: str, expression: str, frame: str | None = None, timeout: float = 120) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = self.js(expression, frame)
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
            time.sleep(0.5)

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=False)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(30)
            self.log.close()


def keep(path: Path, name: str) -> Path:
    """A copy of a screenshot where a person can look at it after the run ($XBP_SCREENSHOTS)."""
    import os

    target = os.environ.get("XBP_SCREENSHOTS")
    if not target:
        return path
    Path(target).mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(path, Path(target) / name))
