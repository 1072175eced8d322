#!/usr/bin/env bash
# The pip wheel works: build it with maturin, install it into a fresh venv, and run the README's
# quick start with the installed `qrelgen` (offline, the bundled sample corpus).
#   tests/interop/wheel.sh [PROFILE]     PROFILE: dist (default, what is shipped) or release (CI:
#                                        reuses `cargo test --release`'s build)
# Needs python3 with venv; maturin comes from PyPI into a throwaway venv. Prints the wheel's size
# and the install time.
set -euo pipefail
cd "$(dirname "$0")/../.."
profile=${1:-dist}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/build"
"$work/build/bin/pip" install --quiet 'maturin>=1.7,<2'
"$work/build/bin/maturin" build --quiet --locked --profile "$profile" --out "$work/wheels"
wheel=$(ls "$work"/wheels/qrelgen-*.whl)
echo "wheel: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB"
python3 -m venv "$work/user"
started=$(date +%s.%N)
"$work/user/bin/pip" install --quiet --no-index "$wheel"
echo "pip install into a fresh venv: $(echo "$(date +%s.%N) - $started" | bc) s"
qrelgen="$work/user/bin/qrelgen"
[[ $(command -v "$qrelgen") == "$qrelgen" ]]
"$qrelgen" --version
# The README's quick start.
"$qrelgen" build --corpus corpora/harbor-sync --out "$work/out/harbor-sync" --quiet
test -s "$work/out/harbor-sync/qrels.trec"
"$qrelgen" run --set "$work/out/harbor-sync" --to "$work/out/bm25.run" --quiet
"$qrelgen" eval --set "$work/out/harbor-sync" --run "$work/out/bm25.run" > "$work/eval.txt"
grep -q "ndcg@10" "$work/eval.txt"
# The binary from the wheel writes the same set as the one cargo built.
cargo run --locked --release --quiet -- build --corpus corpora/harbor-sync --out "$work/cargo" --quiet
diff -r -x index -x eval -x manifest.json -x report.md -x report.html "$work/out/harbor-sync" "$work/cargo"
"$qrelgen" completions bash | bash -n
echo "wheel OK: installed qrelgen ran the quick start and wrote the same set as cargo's build"
