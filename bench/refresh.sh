#!/usr/bin/env bash
# Refresh vs full rebuild on a reproducibly changed copy of a corpus (issue 14).
#
#   bench/refresh.sh PAGES_DIR [QUERIES] [offline|llm]
#   e.g. bench/refresh.sh ../shared/corpora/pgdocs/pages 300
#        bench/refresh.sh ../shared/corpora/pgdocs/pages 300 llm
#
# Makes the changed copy in a temporary folder (never in the repository): of the documents in
# file-name order, a seeded draw edits 5 % (a sentence added to one paragraph), deletes 1 % and adds
# 2 % (new documents of sentences drawn from others). Builds a set on the original (untimed), then
# times `refresh` onto the changed copy against a full `build` of it, and prints the ratio. With
# `llm`, both run against examples/mock_openai.rs (LATENCY_MS per reply, 0 by default; no rate
# limit) and the script prints the LLM calls each made, counted by the mock. It also prints where
# the refresh's time went (the stage timers of the new version's manifest.json).
set -euo pipefail
pages=${1:?usage: bench/refresh.sh PAGES_DIR [QUERIES] [offline|llm]}
queries=${2:-300}
mode=${3:-offline}
pages=$(cd "$pages" && pwd)
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet --bin qrelgen --example mock_openai
work=$(mktemp -d /tmp/qrelgen-refresh-bench.XXXXXX)
mock=""
trap '[ -n "$mock" ] && kill $mock 2>/dev/null; rm -rf "$work"' EXIT

python3 - "$pages" "$work/changed" <<'PY'
import os, random, re, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(src, dst)
names = sorted(n for n in os.listdir(dst) if os.path.isfile(os.path.join(dst, n)))
rng = random.Random(14)
picked = rng.sample(names, len(names) * 8 // 100)
edited, deleted = picked[: len(names) * 5 // 100], picked[len(names) * 5 // 100 :][: len(names) // 100]
for name in edited:
    path = os.path.join(dst, name)
    paragraphs = open(path, encoding="utf-8").read().split("\n\n")
    prose = [i for i, p in enumerate(paragraphs) if len(p) > 80 and not p.lstrip().startswith(("#", "`", "|", "-", "*"))]
    at = rng.choice(prose) if prose else len(paragraphs) - 1
    paragraphs[at] += " This behaviour changed in the latest release; check the release notes before relying on it."
    open(path, "w", encoding="utf-8").write("\n\n".join(paragraphs))
for name in deleted:
    os.remove(os.path.join(dst, name))
sentences = []
for name in rng.sample(names, 40):
    text = open(os.path.join(src, name), encoding="utf-8").read()
    sentences += [s for s in re.split(r"(?<=[.!?])\s+", text) if 40 < len(s) < 300 and "\n" not in s]
for i in range(len(names) * 2 // 100):
    body = " ".join(rng.sample(sentences, 12))
    open(os.path.join(dst, f"zz-added-{i:03}.md"), "w", encoding="utf-8").write(f"# Added page {i}\n\n{body}\n")
print(f"{len(names)} documents: {len(edited)} edited, {len(deleted)} deleted, {len(names) * 2 // 100} added")
PY

llm=()
if [ "$mode" = llm ]; then
  port=${PORT:-8091}
  target/release/examples/mock_openai "$port" "${LATENCY_MS:-0}" 1000000 1000 > "$work/mock.log" 2>&1 &
  mock=$!
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/stats" >/dev/null && break; sleep 0.1; done
  llm=(--generator llm --base-url "http://127.0.0.1:$port/v1" --model mock-model --concurrency 4)
  export OPENAI_API_KEY=bench
fi
calls() { if [ -n "$mock" ]; then curl -sf "http://127.0.0.1:$port/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"])'; else echo 0; fi; }
seconds() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$2"; }

target/release/qrelgen build --corpus "$pages" --out "$work/set" --queries "$queries" --allow-shortfall "${llm[@]}" --quiet > /dev/null
c0=$(calls)
t0=$(date +%s.%N)
target/release/qrelgen refresh --set "$work/set" --corpus "$work/changed" --quiet > "$work/refresh.txt"
t1=$(date +%s.%N)
c1=$(calls)
target/release/qrelgen build --corpus "$work/changed" --out "$work/rebuild" --queries "$queries" --allow-shortfall "${llm[@]}" --quiet > /dev/null
t2=$(date +%s.%N)
c2=$(calls)
refresh=$(seconds "$t0" "$t1"); rebuild=$(seconds "$t1" "$t2")
cat "$work/refresh.txt"
python3 - "$work/set/manifest.json" <<'PY'
import json, sys
timings = json.load(open(sys.argv[1]))["run"]["timings_ms"]
print("refresh stages (ms): " + ", ".join(f"{stage} {ms}" for stage, ms in sorted(timings.items(), key=lambda t: -t[1])))
PY
echo "refresh ${refresh} s, full rebuild ${rebuild} s: refresh takes $(python3 -c "print(f'{$refresh / $rebuild:.2f}')") of a rebuild"
if [ -n "$mock" ]; then echo "LLM calls: refresh $((c1 - c0)), full rebuild $((c2 - c1))"; fi
