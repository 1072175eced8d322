#!/bin/sh
# The measures beyond trec_eval's standard set against the reference tools: recomputes
# tests/fixtures/eval/expected_more.json with pytrec_eval, gdeval (through ir_measures) and
# trectools, scores the fixture with qrelgen eval, and prints the largest difference per
# measure; fails above 1e-4 (gdeval prints 5 decimals) or if the committed file is stale.
# Not in cargo test: it needs a Python with the tools and perl.
#
#   python3 -m venv /tmp/ev && /tmp/ev/bin/pip install pytrec-eval-terrier ir-measures trectools
#   tests/interop/eval-agreement.sh /tmp/ev/bin/python [target/release/qrelgen]
set -eu
PYTHON=${1:?usage: eval-agreement.sh PYTHON [QRELGEN]}
QRELGEN=${2:-target/release/qrelgen}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FIX="$ROOT/tests/fixtures/eval"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
(cd "$FIX" && "$PYTHON" reference_more.py) > "$WORK/expected_more.json"
cmp -s "$WORK/expected_more.json" "$FIX/expected_more.json" || {
    echo "tests/fixtures/eval/expected_more.json is stale: the tools give other values" >&2
    exit 1
}
"$QRELGEN" eval --qrels "$FIX/qrels.trec" --queries "$FIX/queries.jsonl" --no-answer "$FIX/no_answer.txt" \
    --run "$FIX/a.run" --run "$FIX/b.run" --run "$FIX/c.run" --resamples 100 --out "$WORK/out" \
    --measures 'Rprec,P(rel=2)@10,R(rel=2)@100,AP(rel=2),Success(rel=2)@5,Rprec(rel=2),ERR@5,ERR@10,ERR@20,RBP(p=0.8),rbp_residual(p=0.8)' \
    > /dev/null
"$PYTHON" - "$WORK/expected_more.json" "$WORK/out/per_query.tsv" <<'PY'
import csv, json, sys
expected = json.load(open(sys.argv[1]))["runs"]
ours = {}
for row in csv.DictReader(open(sys.argv[2]), delimiter="\t"):
    if row["class"] == "answerable":
        ours.setdefault(row["run"], {})[row["query_id"]] = row
worst = {}
for run, queries in expected.items():
    for q, values in queries.items():
        for m, want in values.items():
            worst[m] = max(worst.get(m, 0.0), abs(float(ours[run][q][m]) - want))
print("measure\tmax |qrelgen - reference|")
for m in sorted(worst):
    print(f"{m}\t{worst[m]:.2e}")
sys.exit(1 if max(worst.values()) > 1e-4 else 0)
PY
