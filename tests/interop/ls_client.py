"""A small client for Label Studio's REST API, shared by the interop drivers: requests with the
user token, projects with qrelgen's labeling config and tasks, annotations, exports, and
headless Chromium logged in to the labeling UI.

Only the standard library, plus websocket-client for the browser (skipped without it).
"""

import base64
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


class Client:
    def __init__(self, url, token):
        self.url = url
        self.token = token

    def api(self, method, path, body=None):
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        request = urllib.request.Request(
            self.url + path,
            method=method,
            data=data,
            headers={"Authorization": "Token " + self.token, "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                text = response.read()
        except urllib.error.HTTPError as e:
            sys.exit(f"{method} {path}: HTTP {e.code}: {e.read()[:2000]!r}")
        return json.loads(text) if text else None

    def project(self, title, config_path, tasks_path):
        """A new project with the labeling config and tasks of a `review export --format label-studio`."""
        made = self.api("POST", "/api/projects", {"title": title, "label_config": open(config_path).read()})
        self.api("POST", f"/api/projects/{made['id']}/import", open(tasks_path, "rb").read())
        return made, self.api("GET", f"/api/tasks?project={made['id']}&page_size=1000")["tasks"]

    def annotate(self, task, user, result):
        self.api("POST", f"/api/tasks/{task['id']}/annotations/", {"completed_by": user, "result": result})

    def export(self, project, kind, path):
        """Writes the project's export of `kind` (JSON, JSON_MIN), as the export dialog offers it."""
        request = urllib.request.Request(f"{self.url}/api/projects/{project['id']}/export?exportType={kind}",
                                         headers={"Authorization": "Token " + self.token})
        with urllib.request.urlopen(request, timeout=120) as response:
            exported = json.loads(response.read())
        with open(path, "w") as f:
            json.dump(exported, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"{kind}: {len(exported)} records in {path}")
        return exported


def choice(control, to_name, value):
    return {"from_name": control, "to_name": to_name, "type": "choices", "value": {"choices": [value]}}


def text(control, *lines):
    return {"from_name": control, "to_name": "query", "type": "textarea", "value": {"text": list(lines)}}


class Browser:
    """Headless Chromium driven over the DevTools protocol, logged in to Label Studio.

    `Browser.start(...)` returns None (and says why) without chromium or websocket-client.
    """

    @staticmethod
    def start(url, email, password, port=9233):
        try:
            import websocket  # websocket-client
        except ImportError:
            websocket = None
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if websocket is None or chromium is None:
            print("skipping the UI steps: needs chromium and the websocket-client package")
            return None
        return Browser(websocket, chromium, url, email, password, port)

    def __init__(self, websocket, chromium, url, email, password, port):
        self.url = url
        self.profile = tempfile.mkdtemp(prefix="qrelgen-chromium-")
        self.process = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={self.profile}",
             f"--remote-debugging-port={port}", f"--remote-allow-origins=http://127.0.0.1:{port}",
             "--window-size=1400,2600", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.ws = websocket.create_connection(self._page(port)["webSocketDebuggerUrl"], timeout=120,
                                                  suppress_origin=True)
            self.ids = iter(range(1, 1 << 30))
            self.call("Page.enable")
            self.call("Emulation.setDeviceMetricsOverride", width=1400, height=2600, deviceScaleFactor=1,
                      mobile=False)
            self.call("Page.navigate", url=url + "/user/login/")
            self.wait_for("!!document.querySelector('input[name=email]')")
            self.evaluate(f"""document.querySelector('input[name=email]').value = {json.dumps(email)};
                document.querySelector('input[name=password]').value = {json.dumps(password)};
                document.querySelector('form').submit(); true""")
            time.sleep(3)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _page(port):
        for _ in range(100):
            try:
                pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json"))
                return next(p for p in pages if p["type"] == "page")
            except Exception:
                time.sleep(0.2)
        raise RuntimeError("chromium did not open its DevTools port")

    def close(self):
        self.process.terminate()
        self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def call(self, method, **params):
        i = next(self.ids)
        self.ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == i:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, js):
        result = self.call("Runtime.evaluate", expression=js, awaitPromise=True, returnByValue=True)
        return result.get("result", {}).get("value")

    def wait_for(self, js, seconds=90):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.evaluate(js):
                return
            time.sleep(0.5)
        raise RuntimeError(f"timed out waiting for {js}")

    def open_task(self, project, task):
        """Opens `task` of `project` in the labeling UI and waits for its grade buttons."""
        self.call("Page.navigate", url=f"{self.url}/projects/{project['id']}/data?task={task['id']}")
        self.wait_for("[...document.querySelectorAll('label')].some(l => l.textContent.includes('answers fully'))")
        time.sleep(3)

    def screenshot(self, path):
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        open(path, "wb").write(base64.b64decode(shot["data"]))
        print(f"screenshot: {path}")
