"""Drives a real Label Studio for tests/interop/label-studio.sh: two projects with qrelgen's
labeling config and tasks, annotations by two users (through the API, and one through the UI in
headless Chromium), the JSON and JSON-MIN exports, and a screenshot of a task.

Only the standard library, plus websocket-client for the Chromium steps (skipped without it).

    python3 label_studio.py URL TOKEN EMAIL PASSWORD TASKS.json CONFIG.xml OUT_DIR
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

url, token, email, password, tasks_path, config_path, out = sys.argv[1:8]


def api(method, path, body=None):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(
        url + path,
        method=method,
        data=data,
        headers={"Authorization": "Token " + token, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            text = response.read()
    except urllib.error.HTTPError as e:
        sys.exit(f"{method} {path}: HTTP {e.code}: {e.read()[:2000]!r}")
    return json.loads(text) if text else None


def choice(control, to_name, value):
    return {"from_name": control, "to_name": to_name, "type": "choices", "value": {"choices": [value]}}


def text(control, *lines):
    return {"from_name": control, "to_name": "query", "type": "textarea", "value": {"text": list(lines)}}


def annotate(task, user, result):
    api("POST", f"/api/tasks/{task['id']}/annotations/", {"completed_by": user, "result": result})


def kind(task):
    return task["data"]["heading"].split(" · ")[0]


def empty(task, slot):
    return task["data"][f"{slot}_id"] == ""


# Two projects with the same tasks: one for `review apply` (one judgment per query, by two
# users), one for `review agree` (both users judge the same queries); and a second annotator.
def project(title):
    made = api("POST", "/api/projects", {"title": title, "label_config": open(config_path).read()})
    api("POST", f"/api/projects/{made['id']}/import", open(tasks_path, "rb").read())
    return made, api("GET", f"/api/tasks?project={made['id']}&page_size=1000")["tasks"]


project_apply, tasks = project("qrelgen review")
project_agree, agree_tasks = project("qrelgen agreement")
users = {u["email"]: u["id"] for u in api("GET", "/api/users/")}
if "bob@example.org" not in users:
    bob = api("POST", "/api/users/", {"email": "bob@example.org", "username": "bob", "password": password + "-bob"})
    users["bob@example.org"] = bob["id"]
ann, bob = users[email], users["bob@example.org"]
print(f"projects {project_apply['id']} and {project_agree['id']}: {len(tasks)} tasks each; users ann={ann} bob={bob}")


def pick(predicate, skip=()):
    return next(t for t in tasks if predicate(t) and t["id"] not in skip)


def twin(task):
    """The same item in the agreement project."""
    return next(t for t in agree_tasks if t["data"]["query_id"] == task["data"]["query_id"])


used = []
direct = pick(lambda t: kind(t) == "direct" and empty(t, "source_2"))
used.append(direct["id"])
# A task with fewer than five pool chunks when the set has one (empty pool slots), else any direct one.
short = next((t for t in tasks if kind(t) == "direct" and empty(t, "pool_5") and t["id"] not in used), None) \
    or pick(lambda t: kind(t) == "direct", used)
used.append(short["id"])
paraphrase = pick(lambda t: kind(t) == "paraphrase", used)
no_answer = pick(lambda t: kind(t) == "no_answer", used)
hop = pick(lambda t: kind(t) == "multi_hop" and not empty(t, "source_2"), used)
ui = pick(lambda t: kind(t) == "direct", used)
used.append(ui["id"])
slip = pick(lambda t: kind(t) == "direct" and empty(t, "source_2"), used)

# For apply: ann judges five queries, bob one.
annotate(direct, ann, [choice("decision", "query", "accept"), choice("source_1_grade", "source_1", "3"),
                       choice("pool_1_grade", "pool_1", "1")])
annotate(paraphrase, ann, [choice("decision", "query", "edit"), text("edited_text", "how do I rotate an API token")])
annotate(no_answer, ann, [choice("decision", "query", "answerable"), choice("pool_1_grade", "pool_1", "2")])
annotate(hop, ann, [choice("decision", "query", "reject"), text("reject_reason", "not a real question", "too vague")])
# A grade on a slot the task has no chunk for (the UI no longer shows one; an API client can).
annotate(slip, ann, [choice("decision", "query", "accept"), choice("source_2_grade", "source_2", "2")])
annotate(short, bob, [choice("decision", "query", "accept"), choice("pool_1_grade", "pool_1", "2")])
# For agree: both judge the same three queries.
annotate(twin(direct), ann, [choice("decision", "query", "accept"), choice("pool_1_grade", "pool_1", "1")])
annotate(twin(direct), bob, [choice("decision", "query", "accept"), choice("pool_1_grade", "pool_1", "0")])
annotate(twin(paraphrase), ann, [choice("decision", "query", "edit"), text("edited_text", "how do I rotate an API token")])
annotate(twin(paraphrase), bob, [choice("decision", "query", "reject"), text("reject_reason", "too vague")])
annotate(twin(no_answer), ann, [choice("decision", "query", "accept")])
annotate(twin(no_answer), bob, [choice("decision", "query", "accept")])
print(f"annotated: direct {direct['data']['query_id']}, paraphrase {paraphrase['data']['query_id']}, "
      f"no_answer {no_answer['data']['query_id']}, multi_hop {hop['data']['query_id']}, "
      f"empty-slot grade {slip['data']['query_id']}, bob {short['data']['query_id']}")

# The UI: a screenshot of a task with empty slots, then grade and accept one task by clicking.
try:
    import websocket  # websocket-client
except ImportError:
    websocket = None
chromium = shutil.which("chromium") or shutil.which("chromium-browser")
if websocket is None or chromium is None:
    print("skipping the UI steps: needs chromium and the websocket-client package")
else:
    profile = tempfile.mkdtemp(prefix="qrelgen-chromium-")
    port = 9233
    browser = subprocess.Popen(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
         f"--remote-debugging-port={port}", f"--remote-allow-origins=http://127.0.0.1:{port}",
         "--window-size=1400,2600", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json"))
                page = next(p for p in pages if p["type"] == "page")
                break
            except Exception:
                time.sleep(0.2)
        ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=120, suppress_origin=True)
        ids = iter(range(1, 1 << 30))

        def call(method, **params):
            i = next(ids)
            ws.send(json.dumps({"id": i, "method": method, "params": params}))
            while True:
                message = json.loads(ws.recv())
                if message.get("id") == i:
                    if "error" in message:
                        raise RuntimeError(f"{method}: {message['error']}")
                    return message.get("result", {})

        def evaluate(js):
            result = call("Runtime.evaluate", expression=js, awaitPromise=True, returnByValue=True)
            return result.get("result", {}).get("value")

        def wait_for(js, seconds=90):
            deadline = time.time() + seconds
            while time.time() < deadline:
                if evaluate(js):
                    return
                time.sleep(0.5)
            raise RuntimeError(f"timed out waiting for {js}")

        def open_task(task):
            call("Page.navigate", url=f"{url}/projects/{project_apply['id']}/data?task={task['id']}")
            wait_for("[...document.querySelectorAll('label')].some(l => l.textContent.includes('answers fully'))")
            time.sleep(3)

        call("Page.enable")
        call("Emulation.setDeviceMetricsOverride", width=1400, height=2600, deviceScaleFactor=1, mobile=False)
        call("Page.navigate", url=url + "/user/login/")
        wait_for("!!document.querySelector('input[name=email]')")
        evaluate(f"""document.querySelector('input[name=email]').value = {json.dumps(email)};
            document.querySelector('input[name=password]').value = {json.dumps(password)};
            document.querySelector('form').submit(); true""")
        time.sleep(3)
        open_task(short)
        shown = evaluate("[...document.querySelectorAll('label')].filter(l => l.textContent.includes('answers fully')).length")
        slots = sum(1 for k, v in short["data"].items() if k.endswith("_id") and k != "query_id" and v)
        print(f"task {short['id']}: {slots} chunks, {shown} rows of grade buttons shown")
        if shown != slots:
            sys.exit(f"the UI shows grade buttons for {shown} slots, the task has {slots} chunks")
        shot = call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        open(f"{out}/task-{short['id']}.png", "wb").write(base64.b64decode(shot["data"]))
        print(f"screenshot: {out}/task-{short['id']}.png")
        open_task(ui)
        clicked = evaluate("""(async () => {
            const labels = [...document.querySelectorAll('label')];
            const pick = text => labels.find(l => l.textContent.trim().startsWith(text));
            for (const text of ['3 = answers fully', 'Accept as it is']) { const l = pick(text); if (!l) return 'missing ' + text; l.click(); }
            await new Promise(r => setTimeout(r, 1000));
            const submit = [...document.querySelectorAll('button')].find(b => b.textContent.trim() === 'Submit');
            if (!submit) return 'no Submit button';
            submit.click();
            await new Promise(r => setTimeout(r, 3000));
            return 'submitted';
        })()""")
        print(f"task {ui['id']} in the UI: {clicked}")
        if clicked != "submitted":
            sys.exit(f"the UI annotation failed: {clicked}")
    finally:
        browser.terminate()
        browser.wait()
        shutil.rmtree(profile, ignore_errors=True)

# The exports, as Label Studio's export dialog offers them.
for made, prefix in [(project_apply, "export"), (project_agree, "agree")]:
    for kind_name, suffix in [("JSON", ""), ("JSON_MIN", "-min")]:
        request = urllib.request.Request(f"{url}/api/projects/{made['id']}/export?exportType={kind_name}",
                                         headers={"Authorization": "Token " + token})
        with urllib.request.urlopen(request, timeout=120) as response:
            exported = json.loads(response.read())
        with open(f"{out}/{prefix}{suffix}.json", "w") as f:
            json.dump(exported, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"{kind_name}: {len(exported)} records in {out}/{prefix}{suffix}.json")
with open(f"{out}/annotators.txt", "w") as f:
    f.write(f"# Label Studio user id = name\n{ann}=ann\n{bob}=bob\n")
