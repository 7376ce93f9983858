#!/usr/bin/env bash
# The man pages of the three tools (man/*.1): groff formats each without a warning, and each
# documents every long option its tool's --help prints. The option check is also run against a
# page with one option taken out, to show that it catches a missing one.
set -u
build=${NF_BUILD_DIR:-.}
src=${NF_SRC_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The long options a help text names, one per line, sorted, each once. An option named after the
# word "configure" is configure's (a build without MPI says "configure --with-mpi"), not the tool's.
help_options() {
  sed -E 's/configure( --[a-z][a-z0-9=-]*)+//g' "$1" | grep -o -- '--[a-z][a-z0-9-]*' | sort -u
}

# The page as text to search: font changes dropped, \- and \(hy read as -.
page_text() {
  sed -e 's/\\f[BIRP]//g' -e 's/\\f(..//g' -e 's/\\-/-/g' -e 's/\\(hy/-/g' "$1"
}

# missing_options PAGE HELP: prints each option of HELP that PAGE does not name (as a whole
# word: --raw is not found inside --raw-only); fails when there is one.
missing_options() {
  local page=$1 help=$2 text opt missing=0
  text=$(page_text "$page")
  while IFS= read -r opt; do
    if ! grep -qE -- "(^|[^a-z0-9-])${opt}([^a-z0-9-]|\$)" <<<"$text"; then
      echo "$opt"
      missing=1
    fi
  done < <(help_options "$help")
  return $missing
}

if command -v groff >/dev/null; then have_groff=1; else have_groff=0; echo "note: no groff, formatting not checked"; fi

for tool in nccl-fabric-info nccl-fabric-perf nccl-fabric-tune; do
  page="$src/man/$tool.1"
  bin="$build/tools/$tool"
  if [ ! -f "$page" ]; then echo "FAIL: $page missing"; fail=1; continue; fi
  if [ ! -x "$bin" ]; then echo "FAIL: $bin missing"; fail=1; continue; fi

  # (a) groff formats the page, with every warning on, without a word.
  if [ $have_groff = 1 ]; then
    if groff -man -ww -z "$page" >"$tmp/groff.out" 2>&1 && [ ! -s "$tmp/groff.out" ]; then
      echo "ok: $tool.1 formats without warnings"
    else
      echo "FAIL: groff on $tool.1:"; sed 's/^/    /' "$tmp/groff.out"; fail=1
    fi
  fi

  # (b) every long option of --help is in the page.
  help="$tmp/$tool.help"
  if ! "$bin" --help >"$help" 2>&1; then
    echo "FAIL: $tool --help exits non-zero"; sed 's/^/    /' "$help"; fail=1; continue
  fi
  n=$(help_options "$help" | grep -c '')
  if [ "$n" -lt 3 ]; then
    echo "FAIL: only $n long options found in $tool --help"; fail=1; continue
  fi
  if missing=$(missing_options "$page" "$help"); then
    echo "ok: $tool.1 documents all $n long options of --help"
  else
    echo "FAIL: $tool.1 lacks options that --help lists: ${missing//$'\n'/ }"; fail=1
  fi

  # (c) the same check fails on a copy of the page without its first option.
  opt=$(help_options "$help" | head -n 1)
  esc=${opt//-/\\\\-}  # a pattern for the option as the page spells it: \-\-abi
  cut="$tmp/$tool.1"
  grep -v -e "$esc" "$page" >"$cut"
  if page_text "$cut" | grep -qE -- "(^|[^a-z0-9-])${opt}([^a-z0-9-]|\$)"; then
    echo "FAIL: could not take $opt out of a copy of $tool.1"; fail=1
  elif missing=$(missing_options "$cut" "$help"); then
    echo "FAIL: the check missed $opt taken out of $tool.1"; fail=1
  elif [ "$missing" != "$opt" ]; then
    echo "FAIL: without $opt, the check on $tool.1 reported: ${missing//$'\n'/ }"; fail=1
  else
    echo "ok: the check catches $opt taken out of $tool.1"
  fi
done

exit $fail
