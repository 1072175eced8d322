#!/usr/bin/env bash
# Peak memory of an offline build, split by kind and by stage, on a corpus copied FACTOR times.
#
#   bench/memory.sh CORPUS [FACTOR] [QUERIES]   e.g. bench/memory.sh ../shared/corpora/techdocs 8 2000
#
# Copies CORPUS FACTOR times (default 1) into a temporary folder under /tmp (removed at exit;
# never into the repository), runs `qrelgen build` on the copies while polling /proc/PID/status
# every 50 ms, and prints per stage (as the build's stage lines end it) the peaks of VmRSS,
# RssAnon (the heap: what qrelgen keeps) and RssFile (memory-mapped files: the index's pages in
# the page cache, which the kernel drops under pressure), then the chunks, the wall time, the
# peak RSS (VmHWM) and the peaks of its parts over the whole run.
#
# A stage's VmRSS peak is the kernel's high-water mark (VmHWM), reset as each stage ends (through
# /proc/PID/clear_refs), so a stage shorter than the polling interval has its own peak too; its
# RssAnon and RssFile peaks are the largest polled, at least those polled as it began. Stages
# that end within one interval share its figures; a stage that ends after the last poll shows
# those polled last.
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
"$bin" build --corpus "$work" --out "$work/out" --queries "$queries" --allow-shortfall \
  >/dev/null 2>"$work/stages" &
pid=$!
hwm=0 anon=0 file=0 stage_rss=0 stage_anon=0 stage_file=0 ended=0 now_rss=0 now_anon=0 now_file=0
# Prints a line per stage that ended since the last call, with the peaks since the last stage
# ended, and starts the next stage's peaks from the memory polled last.
report_stages() {
  # A stage's last line ends with its time, e.g. "    index: 55165 chunks, index built (1.52s)".
  mapfile -t done < <(grep -E '^ *[a-z]+: .*\([0-9.]+s\)$' "$work/stages" || true)
  ((${#done[@]} > ended)) || return 0
  for ((k = ended; k < ${#done[@]}; k++)); do
    local name line
    name=$(sed -E 's/^ *([a-z]+):.*/\1/' <<<"${done[$k]}")
    line=$(sed -E 's/^ *//' <<<"${done[$k]}")
    if ((stage_rss == 0)); then
      printf '%-8s VmRSS    - MiB | RssAnon    - MiB | RssFile    - MiB | %s\n' "$name" "$line"
    else
      printf '%-8s VmRSS %4d MiB | RssAnon %4d MiB | RssFile %4d MiB | %s\n' "$name" \
        $((stage_rss / 1024)) $((stage_anon / 1024)) $((stage_file / 1024)) "$line"
    fi
  done
  ended=${#done[@]}
  stage_rss=$now_rss stage_anon=$now_anon stage_file=$now_file
  # The next stage's VmHWM starts from the current VmRSS.
  { echo 5 >"/proc/$pid/clear_refs"; } 2>/dev/null || true
}
# Polls the process's memory into the run's and the current stage's peaks.
poll() {
  local status h r a f
  status=$(cat "/proc/$pid/status" 2>/dev/null) || return 0
  read -r h r a f < <(awk '/^VmHWM/{h=$2} /^VmRSS/{r=$2} /^RssAnon/{a=$2} /^RssFile/{f=$2}
    END{print h+0, r+0, a+0, f+0}' <<<"$status")
  ((h > r)) || h=$r
  now_rss=$r now_anon=$a now_file=$f
  ((h > hwm)) && hwm=$h
  ((a > anon)) && anon=$a
  ((f > file)) && file=$f
  ((h > stage_rss)) && stage_rss=$h
  ((a > stage_anon)) && stage_anon=$a
  ((f > stage_file)) && stage_file=$f
  return 0
}
while kill -0 "$pid" 2>/dev/null; do
  poll
  report_stages
  sleep 0.05
done
wait "$pid"
report_stages
wall=$(echo "$(date +%s.%N) - $start" | bc)
chunks=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["corpus"]["chunks"])' "$work/out/manifest.json")
printf '%s x%s: %s chunks, %s queries, wall %.1f s | peak RSS %d MiB | RssAnon peak %d MiB | RssFile peak %d MiB\n' \
  "$corpus" "$factor" "$chunks" "$queries" "$wall" $((hwm / 1024)) $((anon / 1024)) $((file / 1024))
