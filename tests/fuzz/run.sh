#!/bin/bash
# Fuzzes every wire decoder with libFuzzer (tests/fuzz/README.md): builds each tests/fuzz/fuzz_*.cpp
# with clang's -fsanitize=fuzzer,address,undefined and runs it from a copy of its seeds
# (corpus/<name>/) and regression inputs (regress/<name>/), -seed=1 so that a run repeats.
#
#   tests/fuzz/run.sh [RUNS] [WORKDIR]   RUNS inputs per target (default 30000, ~30 s in all on
#                                         2 cores); RUNS as "120s": 120 seconds per target
#   tests/fuzz/run.sh --corpus           rewrites tests/fuzz/corpus/ with make_corpus.cpp
#
# WORKDIR (default: a new temporary directory, removed when nothing crashed) receives the builds,
# the logs (fuzz-<name>.log), the corpora as they grew, and any crashing input (crash-<name>-*).
# NF_FUZZ_CXX picks the compiler (default clang++); NF_FUZZ_JOBS how many targets build and run at
# once (default: the number of CPUs). Exit: 0 no crash, 1 a crash or a build failure, 77 no clang
# with libFuzzer here.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
top="$(cd "$here/../.." && pwd)"
cxx="${NF_FUZZ_CXX:-clang++}"
jobs="${NF_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}"

targets=()
for f in "$here"/fuzz_*.cpp; do
  t="$(basename "$f" .cpp)"
  targets+=("${t#fuzz_}")
done

# Runs "$@" as a background job, at most $jobs at once.
throttle() {
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  "$@" &
}

if [ "${1:-}" = "--corpus" ]; then
  gen="$cxx"
  command -v "$gen" >/dev/null 2>&1 || gen="${CXX:-c++}"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  "$gen" -std=c++17 -O1 -I "$top/src" "$here/make_corpus.cpp" "$top/src/wire/wire.cpp" \
    -o "$tmp/make_corpus"
  "$tmp/make_corpus" "$tmp/corpus"
  rm -rf "${here:?}/corpus"
  cp -r "$tmp/corpus" "$here/corpus"
  echo "tests/fuzz/corpus/ rewritten: $(find "$here/corpus" -type f | wc -l) seeds"
  exit 0
fi

runs="${1:-30000}"
limit=(-runs="$runs")
case "$runs" in
  *s) limit=(-max_total_time="${runs%s}") ;;
  *[!0-9]* | "")
    echo "usage: $0 [RUNS | SECONDSs] [WORKDIR] | --corpus" >&2
    exit 2
    ;;
esac

if [ -n "${2:-}" ]; then
  work="$2"
  mkdir -p "$work"
  work="$(cd "$work" && pwd)"
  keep=1
else
  work="$(mktemp -d)"
  keep=0
fi

start=$SECONDS
common=(-std=c++17 -O1 -g -fno-sanitize-recover=all -DNF_FUZZ_LIBFUZZER -I "$top/src")
flags=("-fsanitize=fuzzer,address,undefined" "${common[@]}")
probe='extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }'
if ! command -v "$cxx" >/dev/null 2>&1 ||
   ! echo "$probe" | "$cxx" "${flags[@]}" -x c++ - -o "$work/probe" >"$work/probe.log" 2>&1; then
  echo "SKIP: no $cxx with libFuzzer here (apt-get install clang); the fuzz targets' seeds and" \
    "regression inputs still run in make check (tests/fuzz/fuzz_replay)"
  [ "$keep" = 1 ] || rm -rf "$work"
  exit 77
fi

# Build: the decoders once (instrumented), then every target and the seed generator.
build_target() {
  "$cxx" "${flags[@]}" "$here/fuzz_$1.cpp" "$work/wire.o" -o "$work/fuzz_$1" \
    >"$work/build-$1.log" 2>&1 || echo "build of fuzz_$1 failed" >"$work/build-$1.failed"
}
build_gen() {
  "$cxx" -std=c++17 -O1 -I "$top/src" "$here/make_corpus.cpp" "$top/src/wire/wire.cpp" \
    -o "$work/make_corpus" >"$work/build-make_corpus.log" 2>&1 || true
}
"$cxx" -fsanitize=fuzzer-no-link,address,undefined "${common[@]}" -c "$top/src/wire/wire.cpp" \
  -o "$work/wire.o"
rm -f "$work"/build-*.failed
throttle build_gen
for t in "${targets[@]}"; do throttle build_target "$t"; done
wait
failed=0
for t in "${targets[@]}"; do
  if [ -f "$work/build-$t.failed" ]; then
    echo "FAIL $t: build failed:" >&2
    cat "$work/build-$t.log" >&2
    failed=1
  fi
done
[ "$failed" = 0 ] || exit 1
built=$((SECONDS - start))

# The checked-in seeds are what make_corpus writes (else: run.sh --corpus).
if [ -x "$work/make_corpus" ] && "$work/make_corpus" "$work/seeds" &&
   ! diff -rq "$work/seeds" "$here/corpus" >/dev/null 2>&1; then
  echo "NOTE: tests/fuzz/corpus/ differs from what make_corpus.cpp writes now (wire format" \
    "changed?): $0 --corpus rewrites it"
fi

run_target() {
  local t="$1"
  rm -rf "$work/corpus/$t" "$work/regress/$t"
  mkdir -p "$work/corpus/$t" "$work/regress/$t"
  cp "$here/corpus/$t"/* "$work/corpus/$t"/ 2>/dev/null || true
  cp "$here/regress/$t"/* "$work/regress/$t"/ 2>/dev/null || true
  local rc=0
  # New inputs go to the first directory only. -timeout: a decoder takes microseconds.
  (cd "$work" && "./fuzz_$t" -seed=1 "${limit[@]}" -max_len=1024 -use_value_profile=1 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$work/crash-$t-" "$work/corpus/$t" "$work/regress/$t" \
    >"$work/fuzz-$t.log" 2>&1) || rc=$?
  echo "$rc" >"$work/fuzz-$t.rc"
}
for t in "${targets[@]}"; do throttle run_target "$t"; done
wait

for t in "${targets[@]}"; do
  log="$work/fuzz-$t.log"
  rc="$(cat "$work/fuzz-$t.rc" 2>/dev/null || echo 1)"
  if [ "$rc" != 0 ]; then
    input="$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)"
    echo "FAIL $t (exit $rc): crashing input ${input:-not written}; log $log"
    grep -E 'fuzz check failed|ERROR: |SUMMARY: |runtime error' "$log" | head -n 5 | sed 's/^/  /'
    echo "  replay it: fuzz_replay $t ${input:-FILE}; once fixed, keep it in tests/fuzz/regress/$t/"
    failed=1
    continue
  fi
  done_line="$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1)"
  secs="$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)"
  read -r -a f <<<"$done_line"
  # "#N DONE cov: C ft: F corp: K/S lim: ... exec/s: E rss: R"
  printf 'ok   %-9s %9s runs  cov %-4s ft %-5s corp %-10s %s s\n' "$t" "${f[0]#\#}" "${f[3]:-?}" \
    "${f[5]:-?}" "${f[7]:-?}" "${secs:-?}"
done
echo "fuzz: ${#targets[@]} targets, ${limit[*]} each; built in ${built} s, $((SECONDS - start)) s" \
  "in all"
if [ "$failed" != 0 ]; then
  echo "fuzz: FAILED (inputs and logs kept in $work)"
  exit 1
fi
if [ "$keep" = 1 ]; then
  echo "fuzz: logs and grown corpora in $work"
else
  rm -rf "$work"
fi
