#!/usr/bin/env bash
# How an offline build grows with the corpus: index size and build time, round-trip throughput,
# peak RSS per stage, at several multiples of a corpus (the figures of docs/SCALE.md).
#
#   bench/scale.sh CORPUS [FACTORS] [QUERIES]    e.g. bench/scale.sh ../shared/corpora/techdocs "1 4 16" 2000
#
# For each factor k, writes a scaled copy of CORPUS as one JSONL file in a temporary folder
# (never in the repository): k copies of every document, copy i with each word of 8+ letters
# suffixed by i, so copies are not near-duplicates of each other (the chunk dedup would fold
# them) while common words keep sharing postings, as in a larger corpus of the same domain. Then
# runs `qrelgen build` on it, samples the process's RSS every 50 ms and attributes the peak to
# the stage running (a stage ends when its summary line appears on stderr), and prints one line
# per factor: chunks, index size on disk, index build time and rate, round-trip queries/s, wall
# time, peak RSS per stage.
set -euo pipefail
corpus=${1:?usage: bench/scale.sh CORPUS [FACTORS] [QUERIES]}
factors=${2:-1 4 16}
queries=${3:-2000}
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet
bin=$PWD/target/release/qrelgen
work=$(mktemp -d "${TMPDIR:-/tmp}/qrelgen-scale.XXXXXX")
trap 'rm -rf "$work"' EXIT

for k in $factors; do
  python3 - "$corpus" "$k" "$work/corpus-$k.jsonl" <<'PY'
import json, os, re, sys
root, k, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
docs = []
for d, _, files in sorted(os.walk(root)):
    for f in sorted(files):
        if f.endswith((".txt", ".md", ".markdown", ".html", ".htm")):
            p = os.path.join(d, f)
            try:
                docs.append((os.path.relpath(p, root), open(p, encoding="utf-8").read()))
            except (UnicodeDecodeError, OSError):
                pass
long_word = re.compile(r"\b([A-Za-z]{8,})\b")
with open(out, "w", encoding="utf-8") as w:
    for i in range(k):
        for name, text in docs:
            if i:
                text = long_word.sub(lambda m: f"{m.group(1)}{i}", text)
            w.write(json.dumps({"id": f"{i}/{name}", "title": "", "text": text}) + "\n")
PY
  out="$work/out-$k"
  python3 - "$bin" "$work/corpus-$k.jsonl" "$out" "$queries" "$k" <<'PY'
import json, os, subprocess, sys, threading, time
bin, corpus, out, queries, k = sys.argv[1:]
started = time.time()
proc = subprocess.Popen([bin, "build", "--corpus", corpus, "--out", out, "--queries", queries,
                         "--allow-shortfall"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
stage = ["chunk"]
peaks = {}
order = ["chunk", "index", "connect", "generate", "filter", "sample", "write"]
def read():
    for line in proc.stderr:
        name = line.split(":", 1)[0].strip()
        if name in order and "(" in line and line.rstrip().endswith("s)"):
            nxt = order.index(name) + 1
            stage[0] = order[nxt] if nxt < len(order) and name not in ("generate", "filter") else (
                "filter" if name == "generate" else "generate" if name == "filter" else "done")
reader = threading.Thread(target=read, daemon=True)
reader.start()
while proc.poll() is None:
    try:
        for l in open(f"/proc/{proc.pid}/status"):
            if l.startswith("VmRSS:"):
                rss = int(l.split()[1]) / 1024
                peaks[stage[0]] = max(peaks.get(stage[0], 0), rss)
    except OSError:
        pass
    time.sleep(0.05)
wall = time.time() - started
reader.join(timeout=5)
m = json.load(open(os.path.join(out, "manifest.json")))
t = m["run"]["timings_ms"]
chunks = m["corpus"]["chunks"]
generated = sum(c["generated"] for c in m["counts"].values())
index_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(out, "index")) for f in fs)
rate = lambda n, ms: f"{n / (ms / 1000):,.0f}" if ms else "n/a"
rss = " ".join(f"{s} {peaks[s]:.0f}" for s in order + ["done"] if s in peaks)
print(f"{k:>3}x chunks={chunks} index={index_bytes / 2**20:.0f} MiB "
      f"| index {t.get('index', 0) / 1000:.1f} s ({rate(chunks, t.get('index', 0))} chunks/s) "
      f"| chunk {t.get('chunk', 0) / 1000:.1f} s | generate {t.get('generate', 0) / 1000:.1f} s "
      f"| filter {rate(generated, t.get('filter', 0))} queries/s ({generated} queries) "
      f"| wall {wall:.1f} s | peak RSS MiB by stage: {rss}", flush=True)
PY
  rm -rf "$out" "$work/corpus-$k.jsonl"
done
