"""Headless Debian chromium driven over the DevTools protocol (aiohttp's websocket client, already
installed with MLflow): load a page at a window width, read what the page shows (JavaScript run in
it), take screenshots, keep its localStorage between loads as a returning user's browser does."""
from __future__ import annotations

import asyncio
import base64
import itertools
import json
import subprocess
import tempfile
import time
from pathlib import Path

import aiohttp

FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "about:blank"]


class Page:
    """One tab of a fresh browser profile; `await page.open(url)`, `await page.js(expr)`."""

    def __init__(self, ws, width: int, height: int):
        self.ws, self.width, self.height = ws, width, height
        self._ids = itertools.count(1)

    async def call(self, method: str, **params) -> dict:
        i = next(self._ids)
        await self.ws.send_json({"id": i, "method": method, "params": params})
        while True:
            msg = json.loads((await self.ws.receive(timeout=60)).data)
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    async def js(self, expression: str):
        res = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression[:80]}: {res['exceptionDetails']}")
        return res["result"].get("value")

    async def open(self, url: str, until: str, within_s: float = 60.0) -> None:
        """Navigate (a hash change reloads, as a typed link does) and wait until JS `until` is true."""
        await self.call("Page.navigate", url="about:blank")
        await self.call("Page.navigate", url=url)
        deadline = time.monotonic() + within_s
        while not await self.js(f"(() => {{ try {{ return Boolean({until}); }} catch (e) {{ return false; }} }})()"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}: {until} not true after {within_s:.0f} s")
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.5)  # the grid's column state and sizes settle after the rows appear

    async def screenshot(self, path: Path) -> None:
        shot = await self.call("Page.captureScreenshot", format="png")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))


async def _session(chromium: str, width: int, height: int, work):
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:  # chromium may still write to it
        proc = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 30
            while not (port_file.exists() and port_file.read_text().strip()):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("chromium did not open its DevTools port")
                await asyncio.sleep(0.2)
            port = port_file.read_text().split()[0]
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{port}/json/list") as r:
                    target = next(t for t in await r.json() if t["type"] == "page")
                async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                    page = Page(ws, width, height)
                    await page.call("Page.enable")
                    await page.call("Runtime.enable")
                    await page.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                                    deviceScaleFactor=1, mobile=False)
                    return await work(page)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def session(chromium: str, work, width: int = 1600, height: int = 1000):
    """Run `async work(page)` in a fresh profile at `width` x `height`; returns what it returns."""
    return asyncio.run(_session(chromium, width, height, work))
