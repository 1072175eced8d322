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
# times `refresh` (of a fresh copy of that set) onto the changed copy against a full `build` of
# it, RUNS times (5 by default), interleaved, and prints each ratio and the ratio of the medians. With
# `llm`, both run against examples/mock_openai.rs (LATENCY_MS per reply, 0 by default; no rate
# limit) and the script prints the LLM calls each made, counted by the mock. It also prints where
# the refresh's time went (the median stage timers of the new version's manifest.json).
set -euo pipefail
pages=${1:?usage: bench/refresh.sh PAGES_DIR [QUERIES] [offline|llm]}
queries=${2:-300}
mode=${3:-offline}
runs=${RUNS:-5}
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

target/release/qrelgen build --corpus "$pages" --out "$work/set0" --queries "$queries" --allow-shortfall "${llm[@]}" --quiet > /dev/null
# RUNS rounds, each a refresh of a fresh copy of the set and a rebuild, interleaved so that both
# see the same machine; each timed command starts with nothing of the one before left to write.
for run in $(seq "$runs"); do
  rm -rf "$work/set" "$work/rebuild"
  cp -a "$work/set0" "$work/set"
  c0=$(calls)
  sync
  t0=$(date +%s.%N)
  target/release/qrelgen refresh --set "$work/set" --corpus "$work/changed" --quiet > "$work/refresh.txt"
  t1=$(date +%s.%N)
  c1=$(calls)
  sync
  t2=$(date +%s.%N)
  target/release/qrelgen build --corpus "$work/changed" --out "$work/rebuild" --queries "$queries" --allow-shortfall "${llm[@]}" --quiet > /dev/null
  t3=$(date +%s.%N)
  c2=$(calls)
  echo "$(seconds "$t0" "$t1") $(seconds "$t2" "$t3")" >> "$work/times"
  python3 - "$work/set/manifest.json" >> "$work/stages" <<'PY'
import json, sys
print(json.dumps(json.load(open(sys.argv[1]))["run"]["timings_ms"]))
PY
done
cat "$work/refresh.txt"
python3 - "$work/times" "$work/stages" <<'PY'
import json, statistics, sys
runs = [tuple(map(float, line.split())) for line in open(sys.argv[1])]
stages = [json.loads(line) for line in open(sys.argv[2])]
for refresh, rebuild in runs:
    print(f"  refresh {refresh:.2f} s, full rebuild {rebuild:.2f} s: {refresh / rebuild:.2f}")
median = {name: statistics.median(s.get(name, 0) for s in stages) for name in stages[0]}
print("refresh stages, median (ms): " + ", ".join(f"{n} {ms:g}" for n, ms in sorted(median.items(), key=lambda t: -t[1])))
refresh, rebuild = (statistics.median(r[i] for r in runs) for i in (0, 1))
print(f"median of {len(runs)}: refresh {refresh:.2f} s, full rebuild {rebuild:.2f} s: "
      f"refresh takes {refresh / rebuild:.2f} of a rebuild")
PY
if [ -n "$mock" ]; then echo "LLM calls (last round): refresh $((c1 - c0)), full rebuild $((c2 - c1))"; fi
