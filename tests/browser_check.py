"""Open a page in headless Chromium and report what a reader would see: console errors, images that
did not load, how much text the page shows, and a screenshot of the first screen.

Chromium is driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: commands in on
file descriptor 3, replies out on 4, each message a JSON object ended by a NUL byte), so nothing but
the browser is needed — no driver, no websocket library, no network. The flags are the ones that
work on these machines (/work/.library/env/machines/python.md): headless, no sandbox (root), no GPU,
no background networking, a fresh profile.
"""
from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
         "--remote-debugging-pipe")

PROBE_JS = """JSON.stringify({
  title: document.title,
  text_chars: (document.body ? document.body.innerText.trim().length : 0),
  images: Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete, width: i.naturalWidth,
                                                   src: i.src.slice(0, 40)})),
  external: Array.from(document.querySelectorAll('[src],[href]')).map(e => e.getAttribute('src') || e.getAttribute('href'))
                 .filter(u => /^(https?:)?\\/\\//.test(u))
})"""


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageCheck:
    title: str
    text_chars: int
    images: list
    broken_images: list
    external_refs: list
    console_errors: list = field(default_factory=list)
    screenshot_png: bytes = b""
    rects: dict = field(default_factory=dict)  # selector -> the first match's box in CSS pixels of the first screen


class _Pipe:
    def __init__(self, proc, write_fd: int, read_fd: int):
        self.proc, self.w, self.r = proc, write_fd, read_fd
        self.buf = b""
        self.next_id = 0
        self.events: list = []

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout_s: float = 30.0) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        want = self.next_id
        deadline = time.monotonic() + timeout_s
        while True:
            m = self._read(deadline)
            if m.get("id") == want:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method: str, timeout_s: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout_s
        for i, e in enumerate(self.events):
            if e.get("method") == method:
                return self.events.pop(i)
        while True:
            m = self._read(deadline)
            if m.get("method") == method:
                return m
            self.events.append(m)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply from Chromium")
            ready, _, _ = select.select([self.r], [], [], left)
            if ready:
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"Chromium closed the pipe (exit status {self.proc.poll()})")
                self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)


RECTS_JS = """JSON.stringify(Object.fromEntries(%s.map(s => {
  const e = document.querySelector(s);
  if (!e) return [s, null];
  const r = e.getBoundingClientRect(), st = getComputedStyle(e);
  return [s, {top: r.top, bottom: r.bottom, left: r.left, right: r.right, width: r.width, height: r.height,
              visible: st.visibility !== 'hidden' && st.display !== 'none' && r.width > 0 && r.height > 0,
              loaded: e.tagName === 'IMG' ? (e.complete && e.naturalWidth > 0) : null}];
})))"""


def chromium_version(chromium: str | None = None) -> str:
    """The browser's version line ("Chromium 150.0.7871.100 ..."), or "" when none is found."""
    exe = chromium or find_chromium()
    if exe is None:
        return ""
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    return out.splitlines()[-1] if out else ""


def check_page(path: Path, *, width: int = 1280, height: int = 900, chromium: str | None = None,
               settle_s: float = 0.5, full_page: bool = False, rects: tuple = ()) -> PageCheck:
    """Load `path` (a local HTML file) in headless Chromium and return what it showed (the screenshot:
    the first screen, width × height, or the whole page with full_page). rects: CSS selectors whose
    first match's box (relative to the first screen, before any scrolling), visibility and, for an
    image, whether it loaded, are returned in PageCheck.rects."""
    exe = chromium or find_chromium()
    if exe is None:
        raise FileNotFoundError("no chromium on PATH")
    cmd_r, cmd_w = os.pipe()  # we write commands, Chromium reads fd 3
    res_r, res_w = os.pipe()  # Chromium writes fd 4, we read

    def child_fds():  # runs in the child before exec: put the pipe ends at 3 and 4
        a, b = os.dup(cmd_r), os.dup(res_w)
        os.dup2(a, 3)
        os.dup2(b, 4)

    profile = tempfile.mkdtemp(prefix="specsim-chromium-")
    proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=child_fds, close_fds=False)
    os.close(cmd_r)
    os.close(res_w)
    pipe = _Pipe(proc, cmd_w, res_r)
    try:
        target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            pipe.send(domain, session=session)
        pipe.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                          "mobile": False}, session=session)
        pipe.send("Page.navigate", {"url": Path(path).resolve().as_uri()}, session=session)
        pipe.wait_event("Page.loadEventFired", timeout_s=60)
        time.sleep(settle_s)
        probe = json.loads(pipe.send("Runtime.evaluate", {"expression": PROBE_JS, "returnByValue": True},
                                     session=session)["result"]["value"])
        boxes = {}
        if rects:
            boxes = json.loads(pipe.send("Runtime.evaluate", {"expression": RECTS_JS % json.dumps(list(rects)),
                                                              "returnByValue": True}, session=session)["result"]["value"])
        if full_page:
            h = pipe.send("Runtime.evaluate", {"expression": "document.documentElement.scrollHeight",
                                               "returnByValue": True}, session=session)["result"]["value"]
            pipe.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": int(h), "deviceScaleFactor": 1,
                                                              "mobile": False}, session=session)
            time.sleep(settle_s)
        shot = pipe.send("Page.captureScreenshot", {"format": "png"}, session=session)["data"]
        errors = []
        for e in pipe.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                errors.append(p.get("exceptionDetails", {}).get("text", "exception"))
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                errors.append(p["entry"].get("text", "log error") + " " + p["entry"].get("url", ""))
        broken = [i for i in probe["images"] if not i["complete"] or i["width"] == 0]
        try:
            pipe.send("Browser.close", timeout_s=5)
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
        return PageCheck(title=probe["title"], text_chars=probe["text_chars"], images=probe["images"],
                         broken_images=broken, external_refs=probe["external"], console_errors=errors,
                         screenshot_png=base64.b64decode(shot), rects=boxes)
    finally:
        os.close(cmd_w)
        os.close(res_r)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":  # python tests/browser_check.py report.html shot.png
    import sys

    c = check_page(Path(sys.argv[1]), full_page="--full" in sys.argv)
    if len(sys.argv) > 2:
        Path(sys.argv[2]).write_bytes(c.screenshot_png)
    print(json.dumps({"title": c.title, "text_chars": c.text_chars, "images": len(c.images),
                      "broken_images": c.broken_images, "external_refs": c.external_refs,
                      "console_errors": c.console_errors}, indent=2))
