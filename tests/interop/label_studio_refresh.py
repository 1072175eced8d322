"""Drives a real Label Studio for the refresh step of tests/interop/label-studio.sh: the review
queue of a refreshed set (`review export --only changed --format label-studio`) in a new project,
the refresh's note checked in the task data and in the labeling UI (with a screenshot), three
tasks annotated through the API, and the JSON export that `qrelgen review apply` reads back. The
annotated query ids go to OUT_DIR/refresh-decided.txt.

    python3 label_studio_refresh.py URL TOKEN EMAIL PASSWORD TASKS.json CONFIG.xml OUT_DIR
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from ls_client import Browser, Client, choice, text  # noqa: E402

url, token, email, password, tasks_path, config_path, out = sys.argv[1:8]
client = Client(url, token)
made, tasks = client.project("qrelgen refresh review", config_path, tasks_path)
noted = [t for t in tasks if t["data"]["refresh"]]
print(f"project {made['id']}: {len(tasks)} tasks, {len(noted)} with the refresh's note")
if len(noted) < 3:
    sys.exit("expected at least three tasks the refresh queued")
for task in noted:
    change = task["data"]["heading"].split(" · refresh: ")[1:]
    if not change or change[0].split(" · ")[0] not in task["data"]["refresh"]:
        sys.exit(f"task {task['id']}: the heading {task['data']['heading']!r} and the note disagree")

ann = {u["email"]: u["id"] for u in client.api("GET", "/api/users/")}[email]
first, second, third = noted[:3]
client.annotate(first, ann, [choice("decision", "query", "accept")])
client.annotate(second, ann, [choice("decision", "query", "reject"), text("reject_reason", "the edit made it vague")])
grade = [choice("source_1_grade", "source_1", "2")] if third["data"]["source_1_id"] else []
client.annotate(third, ann, [choice("decision", "query", "accept")] + grade)
decided = [t["data"]["query_id"] for t in (first, second, third)]
print(f"annotated: accept {decided[0]}, reject {decided[1]}, accept {decided[2]}"
      + (" with source 1 graded 2" if grade else ""))
with open(f"{out}/refresh-decided.txt", "w") as f:
    f.write("\n".join(decided) + "\n")

# The UI shows the note above the query, as HTML (escaped text, one styled box).
browser = Browser.start(url, email, password)
if browser is not None:
    try:
        browser.open_task(made, first)
        shown = browser.evaluate("document.body.innerText.includes('Changed by the refresh to version')")
        boxes = browser.evaluate("document.querySelectorAll('div[style*=\"fff4e5\"]').length")
        print(f"task {first['id']} in the UI: note shown {shown}, {boxes} note box(es)")
        browser.screenshot(f"{out}/refresh-task-{first['id']}.png")
        if not shown or boxes != 1:
            sys.exit("the UI does not show the refresh's note as one box")
    finally:
        browser.close()

client.export(made, "JSON", f"{out}/refresh-export.json")
