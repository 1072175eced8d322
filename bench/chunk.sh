#!/usr/bin/env bash
# Chunking speed on large single files: `bench/chunk.sh PGDOCS_PAGES [MEGABYTES]`.
#
# Builds the release binary, then runs offline builds (10 queries, so chunking dominates) on
#   1. pgdocs as separate files (the reference rate),
#   2. pgdocs concatenated into one Markdown file,
#   3. a generated Markdown file of MEGABYTES (default 200) MB: pages of headings, paragraphs,
#      lists and fenced code, words drawn from pgdocs' vocabulary (no text is copied whole),
# and prints the chunk stage's time (from manifest.json) and its rate in MB/s, and each large
# file's rate as a share of the reference. Files are made in a temporary folder, never in the repo.
set -euo pipefail
cd "$(dirname "$0")/.."
pages=${1:?usage: bench/chunk.sh PGDOCS_PAGES [MEGABYTES]}
megabytes=${2:-200}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cargo build --release --quiet
bin=target/release/qrelgen

mkdir -p "$work/one" "$work/big"
find "$pages" -type f -name '*.md' | sort | xargs cat > "$work/one/pgdocs.md"
python3 - "$pages" "$work/big/generated.md" "$megabytes" <<'PY'
import os, random, re, sys
pages, out, megabytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
words = []
for name in sorted(os.listdir(pages)):
    with open(os.path.join(pages, name), encoding="utf-8") as f:
        words.extend(re.findall(r"[A-Za-z][A-Za-z_]{2,}", f.read()))
vocab = sorted(set(words))
rng = random.Random(42)
def sentence():
    return " ".join(rng.choice(vocab) for _ in range(rng.randint(6, 24))).capitalize() + "."
def paragraph():
    return " ".join(sentence() for _ in range(rng.randint(2, 8)))
target = megabytes * 1_000_000
with open(out, "w", encoding="utf-8") as f:
    written, page = 0, 0
    while written < target:
        page += 1
        parts = [f"# Page {page}: {sentence()}"]
        for section in range(rng.randint(2, 6)):
            parts.append(f"## {sentence()}")
            for _ in range(rng.randint(1, 5)):
                kind = rng.random()
                if kind < 0.15:
                    parts.append("```sql\n# " + sentence() + "\n" + "\n".join(sentence() for _ in range(3)) + "\n```")
                elif kind < 0.3:
                    parts.append("\n".join("- " + sentence() for _ in range(rng.randint(2, 6))))
                else:
                    parts.append(paragraph())
        text = "\n\n".join(parts) + "\n\n"
        f.write(text)
        written += len(text.encode())
PY

# chunk_ms CORPUS OUT: the chunk stage's milliseconds.
chunk_ms() {
  "$bin" build --corpus "$1" --out "$2" --queries 10 --allow-shortfall --quiet > /dev/null
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run"]["timings_ms"]["chunk"])' "$2/manifest.json"
}

printf '%-36s %10s %10s %10s %8s\n' corpus MB "chunk s" "MB/s" "rate/ref"
ref_rate=""
for case in "pgdocs, separate files:$pages" "pgdocs, one file:$work/one" "generated, one file:$work/big"; do
  name=${case%%:*}
  corpus=${case#*:}
  bytes=$(find "$corpus" -type f -name '*.md' -printf '%s\n' | awk '{s+=$1} END {print s}')
  ms=$(chunk_ms "$corpus" "$work/out-${#name}")
  rate=$(python3 -c "print(f'{$bytes / 1e6 / max($ms, 1) * 1000:.2f}')")
  ref_rate=${ref_rate:-$rate}
  share=$(python3 -c "print(f'{$rate / $ref_rate:.2f}x')")
  printf '%-36s %10.1f %10.2f %10s %8s\n' "$name" "$(python3 -c "print($bytes / 1e6)")" \
    "$(python3 -c "print($ms / 1000)")" "$rate" "$share"
done
