#!/usr/bin/env bash
# Validity of build + `qrelgen pool`, measured with the shared harness (Kendall's tau of 13
# systems' orderings under a set vs under human qrels).
#   bench/validity.sh QRELGEN_BIN COLLECTION_DIR TOOLS_DIR OUT_DIR MODE [NOISE] [SEED]
# MODE: one-shot (offline build, then `pool --judge one-shot`) or llm (build against the
# oracle LLM, TOOLS_DIR/oracle-llm/oracle.py, at judge noise NOISE, then `pool --judge llm`
# through the same oracle). TOOLS_DIR is the shared tools folder (validity/, oracle-llm/).
# The four pooled systems are the harness's bm25_lucene, bm25plus, dense_minilm and hybrid_rrf,
# run on the set's queries (top DEPTH, default 20, as `pool --depth`). Needs the harness venv (VALIDITY_PY,
# default /tmp/validity-venv/bin/python; VALIDITY_CACHE, default /tmp/validity-cache).
# NQ (default 200 for llm, 300 for one-shot) sets --queries. Prints the harness summary and the
# oracle's request totals; everything is kept in OUT_DIR.
set -u
bin=$1; col=$2; tools=$3; out=$4; mode=$5; noise=${6:-0}; seed=${7:-42}
depth=${DEPTH:-20}
py=${VALIDITY_PY:-/tmp/validity-venv/bin/python}
export VALIDITY_CACHE=${VALIDITY_CACHE:-/tmp/validity-cache}
[ -x "$py" ] || { echo "no harness venv at $py (see TOOLS_DIR/validity/README.md)"; exit 2; }
mkdir -p "$out"; rm -rf "$out/set" "$out/set-docs" "$out/port" "$out/runs"
llm=()
if [ "$mode" = llm ]; then
  python3 "$tools/oracle-llm/oracle.py" --collection "$col" --port 0 --port-file "$out/port" \
    --judge-noise "$noise" --seed 7 --log "$out/oracle.jsonl" 2>"$out/oracle.err" &
  opid=$!
  trap 'kill $opid 2>/dev/null' EXIT
  for _ in $(seq 100); do [ -s "$out/port" ] && break; sleep 0.1; done
  [ -s "$out/port" ] || { echo "oracle did not start: $(tail -3 "$out/oracle.err")"; exit 1; }
  llm=(--base-url "http://127.0.0.1:$(cat "$out/port")/v1" --model oracle --concurrency 8)
  env OPENAI_API_KEY=sk-oracle "$bin" build --corpus "$col/corpus.jsonl" --generator llm "${llm[@]}" \
    --queries "${NQ:-200}" --seed "$seed" --allow-shortfall --quiet --out "$out/set" >"$out/build.log" 2>&1
  judge=llm
else
  "$bin" build --corpus "$col/corpus.jsonl" --queries "${NQ:-300}" --seed "$seed" --allow-shortfall \
    --quiet --out "$out/set" >"$out/build.log" 2>&1
  judge=one-shot
fi
rc=$?
[ $rc -le 1 ] || { echo "build failed (exit $rc): $(tail -3 "$out/build.log")"; exit 1; }
mkdir -p "$out/runs"
runs=()
while IFS=$'\t' read -r name path; do
  cp "$path" "$out/runs/$name.run"
  runs+=(--run "$out/runs/$name.run")
done < <(cd "$tools/validity" && "$py" systems.py --corpus "$col/corpus.jsonl" \
  --queries "$out/set/queries.jsonl" --systems bm25_lucene,bm25plus,dense_minilm,hybrid_rrf --depth "$depth")
[ ${#runs[@]} -eq 8 ] || { echo "expected 4 runs, got: ${runs[*]}"; exit 1; }
env OPENAI_API_KEY=sk-oracle "$bin" pool --set "$out/set" "${runs[@]}" --depth "$depth" --judge "$judge" \
  "${llm[@]}" --quiet >"$out/pool.log" 2>&1 || { echo "pool failed: $(tail -3 "$out/pool.log")"; exit 1; }
cat "$out/pool.log"
python3 "$tools/validity/set_to_docs.py" "$out/set" "$out/set-docs" >/dev/null || exit 1
"$py" "$tools/validity/validity.py" --collection "$col" --synthetic "$out/set-docs" \
  --json "$out/validity.json" --markdown "$out/validity.md"
if [ "$mode" = llm ]; then
  kill $opid 2>/dev/null; wait $opid 2>/dev/null
  python3 "$tools/oracle-llm/oracle.py" --summarize "$out/oracle.jsonl"
fi
