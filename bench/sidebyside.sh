#!/usr/bin/env bash
# qrelgen's round trip side by side with plain tantivy (from Rust) and bm25s + numba, on the same
# chunks and the same candidate queries, in one sitting.
#
#   bench/sidebyside.sh CORPUS [QUERIES]     e.g. bench/sidebyside.sh ../shared/corpora/pgdocs/pages 2000
#
# Needs (paths through the environment):
#   PROBE      the plain tantivy probe of ../shared/tools/bm25bench/rust-tantivy, built as its README
#              says [default: /tmp/bm25bench/rust-target/release/tantivy-probe]
#   PY         a Python with bm25s and numba [default: /tmp/bm25bench/.venv/bin/python]
#   BM25BENCH  the bm25bench folder [default: ../shared/tools/bm25bench]
#   QRELGEN    a qrelgen binary to time instead of this checkout's (e.g. an older build, to
#              compare before and after in one sitting) [default: target/release/qrelgen, built]
#
# Runs `qrelgen build` with --threads 1 and --threads 2 (round trip q/s from each manifest, whole
# build wall time from GNU time), turns the second set into the probe's data with from_set.py
# (qrelgen's own chunks and every candidate it searched), then times the probe (index build with
# 1 and 2 writers, queries with 1 and 2 threads, top 10) and bm25s + numba (index, queries warm,
# and cold: import + index + first call with its JIT + one pass), and prints one Markdown table.
set -euo pipefail
corpus=${1:?usage: bench/sidebyside.sh CORPUS [QUERIES]}
queries=${2:-2000}
cd "$(dirname "$0")/.."
probe=${PROBE:-/tmp/bm25bench/rust-target/release/tantivy-probe}
py=${PY:-/tmp/bm25bench/.venv/bin/python}
tools=${BM25BENCH:-../shared/tools/bm25bench}
[[ -x $probe ]] || { echo "no tantivy probe at $probe: build it as $tools/README.md says" >&2; exit 2; }
"$py" -c 'import bm25s, numba' || { echo "$py lacks bm25s or numba (pip install bm25s numba)" >&2; exit 2; }
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)" >&2; exit 2; }
if [[ -n ${QRELGEN:-} ]]; then
  bin=$QRELGEN
else
  cargo build --release --locked --quiet
  bin=target/release/qrelgen
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for t in 1 2; do
  /usr/bin/time -f '%e' -o "$work/wall$t" "$bin" build --corpus "$corpus" --out "$work/set$t" \
    --queries "$queries" --threads "$t" --allow-shortfall --quiet >/dev/null
done
cmp -s "$work/set1/candidates.jsonl" "$work/set2/candidates.jsonl" \
  || { echo "candidates.jsonl differs between --threads 1 and 2" >&2; exit 1; }
"$py" "$tools/from_set.py" "$work/set2" "$work/data" >/dev/null
for w in 1 2; do "$probe" "$work/data" build --writer-threads "$w" >"$work/probe-build$w.json"; done
for t in 1 2; do "$probe" "$work/data" query --threads "$t" >"$work/probe-query$t.json"; done
"$py" "$tools/bench.py" one bm25s-numba build "$work/data" >"$work/bm25s-build.json"
"$py" "$tools/bench.py" one bm25s-numba query "$work/data" --threads 1 >"$work/bm25s-query1.json"
"$py" "$tools/bench.py" one bm25s-numba query "$work/data" --threads 2 >"$work/bm25s-query2.json"

python3 - "$work" "$corpus" "$(nproc)" <<'PY'
import json, sys, os
work, corpus, cores = sys.argv[1:]
load = lambda name: json.loads(open(os.path.join(work, name)).read().strip().splitlines()[-1])
def qrelgen(t):
    m = json.load(open(os.path.join(work, f"set{t}", "manifest.json")))
    ms = m["run"]["timings_ms"]
    judged = sum(c["generated"] for c in m["counts"].values())
    wall = float(open(os.path.join(work, f"wall{t}")).read())
    return judged, judged / (ms["filter"] / 1000), ms["index"] / 1000, wall
(n, qps1, index1, wall1), (_, qps2, index2, wall2) = qrelgen(1), qrelgen(2)
pb1, pb2 = load("probe-build1.json"), load("probe-build2.json")
pq1, pq2 = load("probe-query1.json"), load("probe-query2.json")
bb, bq1, bq2 = load("bm25s-build.json"), load("bm25s-query1.json"), load("bm25s-query2.json")
cold = bb["import_s"] + bb["build_s"] + bq1["warmup_s"] + bq1["query_s"]
print(f"{corpus}: {bb['chunks']:,} chunks, {n:,} candidate queries, top 10, {cores} cores\n")
print("| system | index s (1 / 2 threads) | q/s 1 thread | q/s 2 threads | whole run, cold s |")
print("|---|---|---|---|---|")
print(f"| qrelgen round trip | {index1:.2f} / {index2:.2f} | {qps1:,.0f} | {qps2:,.0f} "
      f"| {wall1:.2f} / {wall2:.2f} (whole build: chunk, index, generate, round trip, files) |")
print(f"| plain tantivy (Rust) | {pb1['build_s']:.2f} / {pb2['build_s']:.2f} | {pq1['qps']:,.0f} | {pq2['qps']:,.0f} | – |")
print(f"| bm25s + numba | {bb['build_s']:.2f} | {bq1['qps']:,.0f} warm | {bq2['qps']:,.0f} warm "
      f"| {cold:.2f} (import, index, JIT on first call, one pass) |")
stages = json.load(open(os.path.join(work, "set2", "manifest.json")))["run"]["timings_ms"]
print("\nqrelgen stages at 2 threads (ms): " + ", ".join(f"{k} {v:,}" for k, v in stages.items()))
print(f"qrelgen whole build / bm25s cold: {wall1 / cold:.2f}x at 1 thread, {wall2 / cold:.2f}x at 2")
print(f"\nqrelgen / plain tantivy: {qps1 / pq1['qps']:.2f}x at 1 thread, {qps2 / pq1['qps']:.2f}x of "
      f"tantivy's 1 thread at 2; hit@10 of the probe {pq1.get('hit10')}, bm25s {bq1.get('hit10')}")
PY
