#!/bin/bash
# Every C++ file of the tree is as .clang-format says (the house style, design.md). Formatting
# differs between clang-format releases, so the check runs with the one CI installs (Debian 12's
# clang-format 14) and is skipped, saying so, where only another release is found.
# Fix a file with: clang-format-14 -i FILE
set -euo pipefail
src="${NF_SRC_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
cd "$src"
want=14
cf=""
for c in clang-format-$want clang-format; do
  if command -v "$c" >/dev/null 2>&1 &&
     grep -Eq "version $want\." <<< "$("$c" --version)"; then
    cf=$c
    break
  fi
done
if [ -z "$cf" ]; then
  echo "SKIP: no clang-format $want here (apt-get install clang-format on Debian 12); the style is checked in CI"
  exit 77
fi
[ -f .clang-format ] || { echo "no .clang-format in $src" >&2; exit 1; }
mapfile -t files < <(find src tuner tools tests include \( -name '*.cpp' -o -name '*.h' \) | sort)
[ "${#files[@]}" -gt 100 ] || { echo "only ${#files[@]} files found under $src" >&2; exit 1; }
bad=0
for f in "${files[@]}"; do
  if ! "$cf" --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f ($cf -i $f)" >&2
    bad=$((bad + 1))
  fi
done
echo "format: ${#files[@]} files checked with $cf, $bad not formatted"
[ "$bad" = 0 ]
