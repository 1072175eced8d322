#!/usr/bin/env bash
# Peak memory of an offline build, split by kind, on a corpus copied FACTOR times.
#
#   bench/memory.sh CORPUS [FACTOR] [QUERIES]   e.g. bench/memory.sh ../shared/corpora/techdocs 8 2000
#
# Copies CORPUS FACTOR times (default 1) into a temporary folder under /tmp (removed at exit;
# never into the repository), runs `qrelgen build` on the copies while polling /proc/PID/status
# every 50 ms, and prints the chunks, the wall time, the peak RSS (VmHWM) and the peaks of its
# parts: RssAnon (the heap: what qrelgen keeps) and RssFile (memory-mapped files: the index's
# pages in the page cache, which the kernel drops under pressure).
set -euo pipefail
corpus=${1:?usage: bench/memory.sh CORPUS [FACTOR] [QUERIES]}
factor=${2:-1}
queries=${3:-2000}
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet
bin=$PWD/target/release/qrelgen
work=$(mktemp -d /tmp/qrelgen-memory.XXXXXX)
trap 'rm -rf "$work"' EXIT
for i in $(seq 1 "$factor"); do
  cp -r "$corpus" "$work/copy$i"
done
start=$(date +%s.%N)
"$bin" build --corpus "$work" --out "$work/out" --queries "$queries" --allow-shortfall --quiet \
  >/dev/null &
pid=$!
hwm=0 anon=0 file=0
while kill -0 "$pid" 2>/dev/null; do
  if status=$(cat "/proc/$pid/status" 2>/dev/null); then
    read -r h a f < <(awk '/^VmHWM/{h=$2} /^RssAnon/{a=$2} /^RssFile/{f=$2} END{print h+0, a+0, f+0}' <<<"$status")
    ((h > hwm)) && hwm=$h
    ((a > anon)) && anon=$a
    ((f > file)) && file=$f
  fi
  sleep 0.05
done
wait "$pid"
wall=$(echo "$(date +%s.%N) - $start" | bc)
chunks=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["corpus"]["chunks"])' "$work/out/manifest.json")
printf '%s x%s: %s chunks, %s queries, wall %.1f s | peak RSS %d MiB | RssAnon peak %d MiB | RssFile peak %d MiB\n' \
  "$corpus" "$factor" "$chunks" "$queries" "$wall" $((hwm / 1024)) $((anon / 1024)) $((file / 1024))
