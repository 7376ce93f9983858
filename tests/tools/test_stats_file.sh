#!/usr/bin/env bash
# The statistics file end to end: nccl-fabric-perf's two processes each write one
# (NCCL_FABRIC_STATS with %h and %p), final at finalize (net ABI v12) or at exit (v10, whose NCCL
# never finalizes the plugin), with the messages the test sent; nccl-fabric-info --stats reads them.
set -u
build=${NF_BUILD_DIR:-.}
perf="$build/tools/nccl-fabric-perf"
info="$build/tools/nccl-fabric-info"
plugin="$build/.libs/libnccl-net-fabric.so"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0

# msgs_of FILE send|recv: the device's message count.
msgs_of() {
  tr -d '\n' <"$1" | grep -o "\"$2\": {\"msgs\": [0-9]*" | head -1 | grep -o '[0-9]*$'
}

for abi in 12 10; do
  rm -f "$dir"/*
  if ! NCCL_FABRIC_STATS="$dir/s-%h-%p.json" FI_TCP_IFACE=lo "$perf" --plugin "$plugin" \
      --provider "tcp;ofi_rxm" --abi "$abi" -t lat -b 8 -e 8 -n 50 -w 5 -r 1 --no-raw \
      >"$dir/perf.out" 2>&1; then
    echo "FAIL: abi $abi: nccl-fabric-perf failed"; cat "$dir/perf.out"; fail=1; continue
  fi
  mapfile -t files < <(ls "$dir"/s-*.json 2>/dev/null)
  # v12: both ranks finalize. v10: the forked rank leaves with _exit (no destructors), the
  # parent writes its file when it exits.
  want=$([ "$abi" = 12 ] && echo 2 || echo 1)
  if [ "${#files[@]}" != "$want" ]; then
    echo "FAIL: abi $abi: ${#files[@]} statistics files, expected $want"; ls -l "$dir"; fail=1
    continue
  fi
  for f in "${files[@]}"; do
    case "$(basename "$f")" in
      s-"$(hostname)"-[0-9]*.json) ;;
      *) echo "FAIL: abi $abi: $f does not expand %h and %p"; fail=1 ;;
    esac
    grep -q '"final": true' "$f" || { echo "FAIL: abi $abi: $f is not final"; fail=1; }
    # 50 timed and 5 warmup round trips: 55 messages each way.
    s=$(msgs_of "$f" send)
    r=$(msgs_of "$f" recv)
    if [ "$s" != 55 ] || [ "$r" != 55 ]; then
      echo "FAIL: abi $abi: $f counts $s sent, $r received, expected 55 each"; cat "$f"; fail=1
    fi
  done
  out=$("$info" --stats "${files[@]}")
  rc=$?
  if [ $rc != 0 ] || ! grep -q "ok: no node stands out" <<<"$out"; then
    echo "FAIL: abi $abi: nccl-fabric-info --stats exit $rc"; echo "$out"; fail=1
  else
    echo "ok: abi $abi: ${#files[@]} file(s), 55 messages each way, read back by --stats"
  fi
done

# A path that cannot be written: one WARN, the transfer unharmed.
if ! NCCL_FABRIC_STATS=/nonexistent-dir/s.json NCCL_DEBUG=WARN FI_TCP_IFACE=lo "$perf" \
    --plugin "$plugin" --provider "tcp;ofi_rxm" -t lat -b 8 -e 8 -n 20 -w 2 -r 1 --no-raw \
    >"$dir/perf.out" 2>&1; then
  echo "FAIL: an unwritable NCCL_FABRIC_STATS failed the transfer"; cat "$dir/perf.out"; fail=1
elif ! grep -q "NCCL_FABRIC_STATS: cannot write /nonexistent-dir/s.json" "$dir/perf.out"; then
  echo "FAIL: no WARN for the unwritable path"; cat "$dir/perf.out"; fail=1
else
  echo "ok: an unwritable path is one WARN"
fi
exit $fail
