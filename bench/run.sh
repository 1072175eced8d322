#!/usr/bin/env bash
# Benchmark an offline build on a corpus given as an argument.
#
#   bench/run.sh CORPUS [QUERIES] [RUNS]      e.g. bench/run.sh ../shared/corpora/pgdocs/pages 2000
#   THREADS=1 bench/run.sh ...                 passes --threads 1 (default: all cores)
#
# Builds the release binary, then runs `qrelgen build` RUNS times (default 3) into a fresh
# temporary folder each time (so the index is built every time), and prints per run: wall time
# per stage (from manifest.json), chunks/s for chunking and indexing, queries/s for the round-trip
# filter, total wall time and peak RSS (from GNU time), and checks that the stage times add up
# to the wall time (within 2 %). A last run rebuilds into the same folder to show the cost when
# the index is reused.
set -euo pipefail
corpus=${1:?usage: bench/run.sh CORPUS [QUERIES] [RUNS]}
queries=${2:-2000}
runs=${3:-3}
cd "$(dirname "$0")/.."
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)" >&2; exit 2; }
cargo build --release --locked --quiet
bin=target/release/qrelgen
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {  # run OUT LABEL
  /usr/bin/time -f '%e %M' -o "$work/time" "$bin" build --corpus "$corpus" --out "$1" \
    --queries "$queries" ${THREADS:+--threads "$THREADS"} --allow-shortfall --quiet >/dev/null
  python3 - "$1/manifest.json" "$work/time" "$2" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
wall, rss_kb = open(sys.argv[2]).read().split()
t = m["run"]["timings_ms"]
chunks = m["corpus"]["chunks"]
judged = sum(c["generated"] for c in m["counts"].values())
in_set = sum(c["kept"] + c["flagged"] for c in m["counts"].values())
rate = lambda n, ms: f"{n / (ms / 1000):,.0f}" if ms else "n/a"
print(f"{sys.argv[3]:<8} docs={m['corpus']['documents']} chunks={chunks} queries={in_set}/{judged} "
      f"| chunk {t.get('chunk', 0)} ms ({rate(chunks, t.get('chunk', 0))} chunks/s) "
      f"| index {t.get('index', 0)} ms ({rate(chunks, t.get('index', 0))} chunks/s) "
      f"| connect {t.get('connect', 0)} ms | plan {t.get('plan', 0)} ms | generate {t.get('generate', 0)} ms | filter {t.get('filter', 0)} ms ({rate(judged, t.get('filter', 0))} queries/s) "
      f"| sample {t.get('sample', 0)} ms | write {t.get('write', 0)} ms "
      f"| wall {float(wall):.2f} s | peak RSS {int(rss_kb) / 1024:.0f} MiB")
stages = sum(t.values()) / 1000
gap = (float(wall) - stages) / float(wall) * 100 if float(wall) else 0.0
print(f"{'':<8} stages add up to {stages:.2f} s of {float(wall):.2f} s wall: {gap:.1f} % outside them "
      f"({'within' if abs(gap) <= 2 else 'NOT within'} 2 %)")
PY
}

echo "qrelgen $("$bin" --version | cut -d' ' -f2) on $corpus, $queries queries, $(nproc) cores"
for i in $(seq 1 "$runs"); do
  run "$work/out$i" "run $i"
done
run "$work/out1" "reuse"
