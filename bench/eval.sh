#!/usr/bin/env bash
# Benchmark `qrelgen eval` against pytrec_eval on the same files, and the paired statistics.
#
#   bench/eval.sh [QUERIES] [HITS] [PYTHON]     default 100000 queries × 100 hits
#
# PYTHON is an interpreter with pytrec-eval-terrier installed (default: python3; make one with
# `python3 -m venv v && v/bin/pip install pytrec-eval-terrier`). Writes a synthetic qrels file
# (1–4 relevant documents per query, graded 1–3, plus judged non-relevant ones) and a TREC run
# into a temporary folder, then times, each with GNU time (wall, peak RSS):
#   qrelgen eval --qrels Q --run R --k 1,3,5,10,20,100   (hit, recall, p, mrr, map, ndcg at six
#       cut-offs, plus map, judged, ndcg', bpref; the output files included)
#   pytrec_eval: reading both files and computing success, recall, P, recip_rank, map_cut and
#       ndcg_cut at the same six cut-offs
# and prints the ratio. Then `cargo bench --bench eval` times the paired bootstrap (10,000
# resamples) and the randomization test on 10,000 queries.
set -euo pipefail
queries=${1:-100000}
hits=${2:-100}
python=${3:-python3}
cd "$(dirname "$0")/.."
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)" >&2; exit 2; }
"$python" -c 'import pytrec_eval' || { echo "needs pytrec_eval: pass a PYTHON that has pytrec-eval-terrier" >&2; exit 2; }
cargo build --release --locked --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$python" - "$work" "$queries" "$hits" <<'PY'
import random, sys
work, n, hits = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(1)
docs = 1_000_000
with open(f"{work}/qrels.trec", "w") as q, open(f"{work}/run.trec", "w") as r:
    for i in range(n):
        qid = f"q{i}"
        for d in rng.sample(range(docs), rng.randint(1, 4)):
            q.write(f"{qid} 0 d{d} {rng.randint(1, 3)}\n")
        for d in rng.sample(range(docs), rng.randint(0, 6)):
            q.write(f"{qid} 0 d{d + docs} 0\n")
        base = rng.randrange(docs - 4 * hits)
        lines = [f"{qid} Q0 d{base + 3 * k} {k + 1} {100.0 - k * 0.5:.2f} bench\n" for k in range(hits)]
        r.write("".join(lines))
PY
echo "files: $(wc -l < "$work/qrels.trec") qrels rows, $(wc -l < "$work/run.trec") run rows ($queries queries × $hits hits)"

/usr/bin/time -f '%e %M' -o "$work/t.qrelgen" target/release/qrelgen eval --qrels "$work/qrels.trec" \
  --run "$work/run.trec" --k 1,3,5,10,20,100 --out "$work/eval" > /dev/null
cat > "$work/pte.py" <<'PY'
import sys, pytrec_eval
qrels, run = {}, {}
for line in open(sys.argv[1]):
    q, _, d, g = line.split()
    qrels.setdefault(q, {})[d] = int(g)
for line in open(sys.argv[2]):
    q, _, d, _, s, _ = line.split()
    run.setdefault(q, {})[d] = float(s)
ks = "1,3,5,10,20,100"
measures = {f"success.{ks}", f"recall.{ks}", f"P.{ks}", "recip_rank", f"map_cut.{ks}", f"ndcg_cut.{ks}"}
results = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
print(len(results))
PY
/usr/bin/time -f '%e %M' -o "$work/t.pte" "$python" "$work/pte.py" "$work/qrels.trec" "$work/run.trec" > /dev/null
read -r q_wall q_rss < "$work/t.qrelgen"
read -r p_wall p_rss < "$work/t.pte"
echo "qrelgen eval: ${q_wall} s, peak RSS $((q_rss / 1024)) MiB"
echo "pytrec_eval:  ${p_wall} s, peak RSS $((p_rss / 1024)) MiB"
"$python" -c "print(f'ratio: qrelgen takes {$q_wall / $p_wall:.2f} of pytrec_eval\'s time ({$p_wall / $q_wall:.1f}x faster)')"
cargo bench --bench eval --quiet
