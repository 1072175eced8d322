#!/usr/bin/env bash
# LLM throughput: qrelgen's LLM generator against a local mock server with a fixed latency and a
# rolling-window rate limit (429 beyond it), on a corpus given as an argument.
#
#   bench/llm.sh CORPUS [QUERIES] [LIMIT_PER_SECOND] [LATENCY_MS] [CONCURRENCY] [told|untold]
#   e.g. bench/llm.sh ../shared/corpora/pgdocs/pages 300 2 300 4
#        bench/llm.sh ../shared/corpora/pgdocs/pages 300 2 300 4 untold
#
# `told` (the default): qrelgen is given the limit (--rpm = 60 × LIMIT) and must pace itself
# under it. `untold`: no --rpm, so qrelgen must find the limit from the server's 429s (the mock
# sends no rate-limit headers). Prints the achieved request rate against the limit, the busiest
# rolling second seen by the server, 429s received, requests and prompt tokens per query in the
# set, and the calls lost. Everything stays on 127.0.0.1.
set -euo pipefail
corpus=${1:?usage: bench/llm.sh CORPUS [QUERIES] [LIMIT_PER_SECOND] [LATENCY_MS] [CONCURRENCY] [told|untold]}
queries=${2:-300}
limit=${3:-2}
latency=${4:-300}
concurrency=${5:-4}
told=${6:-told}
case $told in
  told) rpm=(--rpm $((limit * 60))) ;;
  untold) rpm=() ;;
  *) echo "the 6th argument is told or untold, not $told" >&2; exit 2 ;;
esac
port=${PORT:-8090}
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet --bin qrelgen --example mock_openai
work=$(mktemp -d)
target/release/examples/mock_openai "$port" "$latency" "$limit" 1000 > "$work/mock.log" 2>&1 &
mock=$!
trap 'kill $mock 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/stats" >/dev/null && break; sleep 0.1; done

start=$(date +%s.%N)
target/release/qrelgen build --corpus "$corpus" --out "$work/out" --queries "$queries" --allow-shortfall \
  --generator llm --base-url "http://127.0.0.1:$port/v1" --model mock-model \
  "${rpm[@]}" --concurrency "$concurrency" --quiet > /dev/null
end=$(date +%s.%N)
curl -sf "http://127.0.0.1:$port/stats" > "$work/stats.json"
python3 - "$work/out/manifest.json" "$work/stats.json" "$limit" "$start" "$end" "$latency" "$concurrency" "$told" "$work/out/rejects.jsonl" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2]))
limit, start, end, latency, conc, told = float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), sys.argv[6], sys.argv[7], sys.argv[8]
rejects = [json.loads(l) for l in open(sys.argv[9])]
lost_429 = sum(1 for r in rejects if "HTTP 429" in r["reason"])
net = m["run"]["llm_network"]; use = m["llm"]["usage"]
in_set = sum(c["kept"] + c["flagged"] for c in m["counts"].values())
rate = (s["accepted"] - 1) / s["span_secs"] if s["span_secs"] else 0
lost = net["failures"] / max(net["requests"], 1)
print(f"limit {limit:g} req/s (rolling 1 s), {told} (--rpm {'given' if told == 'told' else 'not given'}), latency {latency} ms, concurrency {conc}, {m['corpus']['documents']} docs")
print(f"requests {net['requests']} ({net['retries']} retries), 429s received {s['rate_limited']}, busiest rolling second {s['busiest_second']}")
print(f"achieved {rate:.3f} req/s = {100 * rate / limit:.1f}% of the limit over {s['span_secs']:.1f} s (wall {end - start:.1f} s)")
print(f"queries in set {in_set}: {use['replies'] / in_set:.3f} replies and {use['prompt_tokens'] / in_set:.0f} prompt tokens per query")
print(f"calls lost: {net['failures']} ({100 * lost:.1f}% of requests), {lost_429} of them to 429s")
PY
