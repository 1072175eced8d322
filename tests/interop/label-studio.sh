#!/usr/bin/env bash
# The review loop against a real Label Studio (not part of `cargo test`: it needs the server).
#
#   tests/interop/label-studio.sh [--update-fixtures]
#
# Builds the sample set, exports its review queue for Label Studio, starts Label Studio on
# 127.0.0.1 with a fresh data folder, creates a project with qrelgen's labeling config, imports
# the tasks, annotates them as two users (through the API, and one task through the UI in
# headless Chromium, with a screenshot of a task with empty slots), exports JSON and JSON-MIN,
# and applies both with `qrelgen review apply` (JSON and JSON-MIN must give the same version), then
# compares the two users of the second project with `review agree`. Then it refreshes the reviewed
# set from a changed copy of the corpus, imports `review export --only changed` into a third
# project (the refresh's note checked in the UI, with a screenshot), annotates three tasks, applies
# the export, and checks that `--only changed` no longer lists them.
# With --update-fixtures the exports are copied to tests/fixtures/label-studio/, which
# tests/it/review.rs applies in `cargo test`.
#
# Needs: label-studio (LABEL_STUDIO=path, default: on PATH, else /tmp/ls-venv/bin/label-studio;
# install with `python3 -m venv /tmp/ls-venv && /tmp/ls-venv/bin/pip install label-studio`), and
# for the UI steps chromium plus the websocket-client package in the same Python (PYTHON=path,
# default: the one beside label-studio). PORT (default 8089) is where Label Studio listens.
set -euo pipefail
update=false
[[ "${1:-}" == "--update-fixtures" ]] && update=true
cd "$(dirname "$0")/../.."
root=$PWD
ls_bin=${LABEL_STUDIO:-$(command -v label-studio || echo /tmp/ls-venv/bin/label-studio)}
python=${PYTHON:-$(dirname "$ls_bin")/python}
port=${PORT:-8089}
[[ -x "$ls_bin" ]] || { echo "label-studio not found (set LABEL_STUDIO)" >&2; exit 2; }
cargo build --release --locked --quiet --bin qrelgen
qrelgen=$root/target/release/qrelgen
work=$(mktemp -d /tmp/qrelgen-ls.XXXXXX)
echo "work folder: $work"

"$qrelgen" build --corpus corpora/harbor-sync --out "$work/set" --quiet
"$qrelgen" review export --set "$work/set" --format label-studio --to "$work/ls/tasks.json"
for name in json-set min-set agree-set; do cp -r "$work/set" "$work/$name"; done

token=$("$python" -c 'import secrets; print(secrets.token_hex(20))')
password=$("$python" -c 'import secrets; print(secrets.token_urlsafe(12))')
mkdir -p "$work/ls-data"
LABEL_STUDIO_BASE_DATA_DIR="$work/ls-data" "$ls_bin" start --no-browser --internal-host 127.0.0.1 \
  -p "$port" --data-dir "$work/ls-data" -db "$work/ls-data/label_studio.sqlite3" \
  --username admin@example.org --password "$password" --user-token "$token" --enable-legacy-api-token \
  > "$work/label-studio.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  curl -sf -H "Authorization: Token $token" "http://127.0.0.1:$port/api/version" > "$work/version.json" && break
  kill -0 $server 2>/dev/null || { tail -20 "$work/label-studio.log"; exit 2; }
  sleep 1
done
echo "Label Studio $("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["release"])' "$work/version.json")"

"$python" tests/interop/label_studio.py "http://127.0.0.1:$port" "$token" admin@example.org "$password" \
  "$work/ls/tasks.json" "$work/ls/tasks.xml" "$work"

map=$work/annotators.txt
echo "== review apply, JSON export"
"$qrelgen" review apply --set "$work/json-set" --decisions "$work/export.json" --reviewer-map "$map"
echo "== review apply, JSON-MIN export"
"$qrelgen" review apply --set "$work/min-set" --decisions "$work/export-min.json" --reviewer-map "$map"
cmp "$work/json-set/queries.jsonl" "$work/min-set/queries.jsonl" && echo "JSON and JSON-MIN give the same queries"
echo "== review agree --resolve strict, JSON export"
"$qrelgen" review agree --set "$work/agree-set" --decisions "$work/agree.json" --reviewer-map "$map" --resolve strict
echo "== review agree, JSON-MIN export"
"$qrelgen" review agree --set "$work/set" --decisions "$work/agree-min.json" --reviewer-map "$map" | head -3
"$qrelgen" review status --set "$work/json-set" | head -8

echo "== refresh of the reviewed set from a changed corpus; its queue through Label Studio"
changed=$work/changed
cp -r corpora/harbor-sync "$changed"
sed -i 's/events are kept for 90 days/events are kept for 120 days/' "$changed/admin/audit-log.md"
sed -i 's/Each person can hold up to 20 active/Each person can hold up to 50 active/' "$changed/api/api-tokens.md"
rm "$changed/billing/changing-your-plan.md"
"$qrelgen" refresh --set "$work/json-set" --corpus "$changed"
"$qrelgen" review export --set "$work/json-set" --only changed --format label-studio --to "$work/ls-refresh/tasks.json"
"$python" tests/interop/label_studio_refresh.py "http://127.0.0.1:$port" "$token" admin@example.org "$password" \
  "$work/ls-refresh/tasks.json" "$work/ls-refresh/tasks.xml" "$work"
"$qrelgen" review apply --set "$work/json-set" --decisions "$work/refresh-export.json" --reviewer-map "$map"
"$qrelgen" review export --set "$work/json-set" --only changed --format jsonl --to "$work/still-changed.jsonl"
"$python" - "$work/refresh-decided.txt" "$work/still-changed.jsonl" << 'EOF'
import json, sys
decided = open(sys.argv[1]).read().split()
left = [json.loads(line)["query_id"] for line in open(sys.argv[2])]
if set(decided) & set(left):
    sys.exit(f"decided in Label Studio but still queued: {sorted(set(decided) & set(left))}")
print(f"--only changed after the apply: {len(left)} items left, none of the {len(decided)} decided")
EOF

if $update; then
  mkdir -p tests/fixtures/label-studio
  cp "$work"/{export,export-min,agree,agree-min,refresh-export}.json "$work/annotators.txt" tests/fixtures/label-studio/
  "$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["release"])' "$work/version.json" \
    > tests/fixtures/label-studio/label-studio-version.txt
  echo "fixtures updated in tests/fixtures/label-studio/"
fi
echo "done; screenshots and exports in $work"
