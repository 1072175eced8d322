"""Drives a real Label Studio for tests/interop/label-studio.sh: two projects with qrelgen's
labeling config and tasks, annotations by two users (through the API, and one through the UI in
headless Chromium), the JSON and JSON-MIN exports, and a screenshot of a task.

Only the standard library, plus websocket-client for the Chromium steps (skipped without it).

    python3 label_studio.py URL TOKEN EMAIL PASSWORD TASKS.json CONFIG.xml OUT_DIR
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from ls_client import Browser, Client, choice, text  # noqa: E402

url, token, email, password, tasks_path, config_path, out = sys.argv[1:8]
client = Client(url, token)
api, annotate = client.api, client.annotate


def kind(task):
    return task["data"]["heading"].split(" · ")[0]


def empty(task, slot):
    return task["data"][f"{slot}_id"] == ""


# Two projects with the same tasks: one for `review apply` (one judgment per query, by two
# users), one for `review agree` (both users judge the same queries); and a second annotator.
def project(title):
    return client.project(title, config_path, tasks_path)


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
browser = Browser.start(url, email, password)
if browser is not None:
    try:
        browser.open_task(project_apply, short)
        shown = browser.evaluate(
            "[...document.querySelectorAll('label')].filter(l => l.textContent.includes('answers fully')).length")
        slots = sum(1 for k, v in short["data"].items() if k.endswith("_id") and k != "query_id" and v)
        print(f"task {short['id']}: {slots} chunks, {shown} rows of grade buttons shown")
        if shown != slots:
            sys.exit(f"the UI shows grade buttons for {shown} slots, the task has {slots} chunks")
        browser.screenshot(f"{out}/task-{short['id']}.png")
        browser.open_task(project_apply, ui)
        clicked = browser.evaluate("""(async () => {
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
        browser.close()

# The exports, as Label Studio's export dialog offers them.
for made, prefix in [(project_apply, "export"), (project_agree, "agree")]:
    for kind_name, suffix in [("JSON", ""), ("JSON_MIN", "-min")]:
        client.export(made, kind_name, f"{out}/{prefix}{suffix}.json")
with open(f"{out}/annotators.txt", "w") as f:
    f.write(f"# Label Studio user id = name\n{ann}=ann\n{bob}=bob\n")
