#!/usr/bin/env bash
# `qrelgen eval --human-qrels` against the validity harness (not part of `cargo test`: it needs
# the harness's venv and its cached runs).
#
#   tests/interop/validity-agreement.sh [COLLECTION]     default ../shared/corpora/med
#
# Builds a set from COLLECTION's corpus (offline, 300 queries), converts it to document ids
# with the harness's set_to_docs.py and measures it with validity.py --json, which runs (or
# reads from its cache) the 13 systems on the human and on the synthetic queries. Then, for
# each system, concatenates its run on the human queries and its run on the synthetic queries
# (the paths validity.py reports) into one run, and scores the 13 runs with
#   qrelgen eval --qrels <set's document qrels> --queries <its queries> \
#       --human-qrels COLLECTION/qrels/test.tsv --ties run-order --gain linear --metric M
# for nDCG@10 and MAP. The harness scores runs in their rank order (scores replaced by -rank)
# with trec_eval's nDCG (linear gain), hence --ties run-order and --gain linear. Prints both
# Kendall taus side by side, and each system's largest difference in mean; exits 1 when a tau
# differs by more than 1e-9.
#
# Needs the harness set up as its README says: VALIDITY_VENV (default /tmp/validity-venv),
# VALIDITY_CACHE (default /tmp/validity-cache), VALIDITY (default ../shared/tools/validity).
# WORK (default: a new /tmp/qrelgen-validity.XXXXXX) keeps every file for a look afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
collection=$(realpath "${1:-../shared/corpora/med}")
venv=${VALIDITY_VENV:-/tmp/validity-venv}
harness=$(realpath "${VALIDITY:-../shared/tools/validity}")
export VALIDITY_CACHE=${VALIDITY_CACHE:-/tmp/validity-cache}
[[ -x "$venv/bin/python" ]] || { echo "no venv at $venv: set up the harness (its README) or set VALIDITY_VENV" >&2; exit 2; }
[[ -f "$harness/validity.py" ]] || { echo "no validity.py in $harness: set VALIDITY" >&2; exit 2; }
[[ -f "$collection/corpus.jsonl" && -f "$collection/qrels/test.tsv" ]] ||
  { echo "$collection is not a BEIR collection with human qrels (corpus.jsonl, qrels/test.tsv)" >&2; exit 2; }
cargo build --release --locked --quiet --bin qrelgen
qrelgen=$root/target/release/qrelgen
work=${WORK:-$(mktemp -d /tmp/qrelgen-validity.XXXXXX)}
mkdir -p "$work"
echo "work folder: $work"

echo "== qrelgen build, set_to_docs.py, validity.py"
rm -rf "$work/set" "$work/docs"
"$qrelgen" build --corpus "$collection/corpus.jsonl" --out "$work/set" --queries 300 --allow-shortfall --quiet
"$venv/bin/python" "$harness/set_to_docs.py" "$work/set" "$work/docs" > /dev/null
"$venv/bin/python" "$harness/validity.py" --collection "$collection" --synthetic "$work/docs" \
  --json "$work/validity.json" > "$work/validity.txt" 2> "$work/validity.log" ||
  { tail -20 "$work/validity.log" >&2; exit 2; }

echo "== one run per system: its human run, then its synthetic run"
mkdir -p "$work/runs"
"$venv/bin/python" - "$work/validity.json" "$work/runs" <<'PY'
import json, shutil, sys
result, out = json.load(open(sys.argv[1])), sys.argv[2]
def qids(path):
    return {line.split()[0] for line in open(path) if line.strip()}
with open(f"{out}/list.txt", "w") as listing:
    for system in result["systems"]:
        paths = result["runs"][system]
        shared = qids(paths["human"]) & qids(paths["synthetic"])
        if shared:
            sys.exit(f"{system}: human and synthetic query ids overlap (e.g. {sorted(shared)[:3]})")
        with open(f"{out}/{system}.run", "w") as run:
            for side in ("human", "synthetic"):
                with open(paths[side]) as part:
                    shutil.copyfileobj(part, run)
        listing.write(f"{out}/{system}.run\n")
PY
mapfile -t runs < "$work/runs/list.txt"
run_args=()
for run in "${runs[@]}"; do run_args+=(--run "$run"); done

status=0
for metric in ndcg@10 map; do
  "$qrelgen" eval --qrels "$work/docs/qrels/test.tsv" --queries "$work/docs/queries.jsonl" \
    --human-qrels "$collection/qrels/test.tsv" "${run_args[@]}" --metric "$metric" \
    --ties run-order --gain linear --resamples 1000 --out "$work/eval-$metric" > "$work/eval-$metric.txt" 2> /dev/null
  "$venv/bin/python" - "$work/validity.json" "$work/eval-$metric/eval.json" "$metric" <<'PY' || status=1
import json, sys
harness, ours, metric = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))["human"], sys.argv[3]
name = {"ndcg@10": "nDCG@10", "map": "MAP"}[metric]
h = harness["metrics"][name]
means = {r["run"]: r for r in ours["runs"]}
worst = max(
    (abs(means[s][side] - h[key][s]), s, side)
    for s in harness["systems"]
    for side, key in (("human", "human"), ("set", "synthetic"))
)
print(f"{name:8} tau: validity.py {h['tau']:.12f}  qrelgen eval {ours['tau']:.12f}  "
      f"({harness['human_queries']} human, {harness['synthetic_queries']} synthetic queries; "
      f"qrelgen {ours['human_queries']}, {ours['set_queries']}); largest difference in a mean: "
      f"{worst[0]:.1e} ({worst[1]}, {worst[2]})")
if abs(h["tau"] - ours["tau"]) > 1e-9 or harness["human_queries"] != ours["human_queries"] \
        or harness["synthetic_queries"] != ours["set_queries"]:
    sys.exit(f"{name}: qrelgen eval and validity.py disagree")
PY
done
exit $status
