#!/usr/bin/env bash
# Instructions per 8-byte message on the plugin's data path, counted by callgrind: deterministic
# where timings are not, so a change of a few instructions shows (docs/performance.md).
#
# tools/msgcost sends N messages from the plugin to itself in one thread; this runs it under
# valgrind --tool=callgrind with N1 and then N2 messages and prints (Ir(N2) - Ir(N1)) / (N2 - N1),
# which cancels loading, init, connecting and closing. Only what runs inside the plugin's isend,
# irecv and test (as called through its NCCL ABI) is counted: the plugin's keeper thread and the
# program's own loop are left out, and so is msgcost's own dispatch into the ABI table.
#
#   tools/callgrind-msg.sh [-b BUILD_DIR] [--provider P] [--protocol LIST] [--n1 N] [--n2 N]
#                          [--runs R] [--top K] [--whole] [--keep DIR]
#
# Columns: Ir per message in total, in the plugin (libnccl-net-fabric.so), in libfabric
# (libfabric.so and DL providers, *-fi.so), elsewhere (libc's mutexes, memset and system-call
# wrappers, libstdc++); then per message inside isend, irecv, the tests of the receive and those
# of the send (all test calls of the message), and how many test calls of each a message took.
# --top K adds the K functions of the first run with the most inclusive Ir per message.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: tools/callgrind-msg.sh [options]
  -b, --build DIR   build directory (default: $NF_BUILD_DIR, else build/ at the top of the tree)
  --provider P      libfabric provider (default: $NCCL_FABRIC_PROVIDER, else shm); mockefa is the
                    mock EFA provider of the build (FI_PROVIDER_PATH and FI_PROVIDER are set)
  --protocol LIST   comma-separated NCCL_FABRIC_PROTOCOL values (default: $NCCL_FABRIC_PROTOCOL,
                    else sendrecv,rdma)
  --n1 N, --n2 N    the two message counts (default: $N1 and $N2, else 200 and 1200)
  --runs R          measure each protocol R times, to see the spread (default 1)
  --top K           also list the K functions with the most inclusive Ir per message
  --whole           count everything (all threads, set-up included) instead of only the calls
  --keep DIR        keep callgrind's output files (callgrind_annotate reads them) in DIR
EOF
}

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${NF_BUILD_DIR:-$src/build}
provider=${NCCL_FABRIC_PROVIDER:-shm}
protocols=${NCCL_FABRIC_PROTOCOL:-sendrecv,rdma}
n1=${N1:-200}
n2=${N2:-1200}
runs=1
top=0
whole=0
keep=""
while [ $# -gt 0 ]; do
  case $1 in
    -b | --build) build=${2:?}; shift 2 ;;
    --provider) provider=${2:?}; shift 2 ;;
    --protocol) protocols=${2:?}; shift 2 ;;
    --n1) n1=${2:?}; shift 2 ;;
    --n2) n2=${2:?}; shift 2 ;;
    --runs) runs=${2:?}; shift 2 ;;
    --top) top=${2:?}; shift 2 ;;
    --whole) whole=1; shift ;;
    --keep) keep=${2:?}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
for v in "$n1" "$n2" "$runs" "$top"; do
  [[ $v =~ ^[0-9]+$ ]] || { echo "callgrind-msg: '$v' is not a number" >&2; exit 2; }
done
if [ "$n1" -lt 1 ] || [ "$n2" -le "$n1" ]; then
  echo "callgrind-msg: need 1 <= N1 < N2" >&2
  exit 2
fi
[ "$runs" -ge 1 ] || { echo "callgrind-msg: --runs must be at least 1" >&2; exit 2; }

prog=$build/tools/msgcost
plugin=$build/.libs/libnccl-net-fabric.so
for f in "$prog" "$plugin"; do
  [ -f "$f" ] || { echo "callgrind-msg: $f is missing: build first (make -C $build)" >&2; exit 1; }
done
command -v valgrind >/dev/null || { echo "callgrind-msg: valgrind is not installed" >&2; exit 1; }

export NCCL_FABRIC_PROVIDER=$provider NF_PLUGIN_LIB=$plugin
# The plugin's keeper thread pings a peer with requests pending every NCCL_FABRIC_PEER_TIMEOUT / 5
# of wall-clock time, and the probes it sends (to itself, here) are received and dispatched by the
# test calls being counted: how many fall in the window depends on valgrind's speed. Probing off
# (the data path is the same: it only counts passes and completions) makes runs repeat exactly.
export NCCL_FABRIC_PEER_TIMEOUT=${NCCL_FABRIC_PEER_TIMEOUT:-0}
case $provider in
  *mockefa*)
    if [ -z "${FI_PROVIDER_PATH:-}" ]; then
      export FI_PROVIDER_PATH=$build/tests/mockprov/.libs
      [ -f "$FI_PROVIDER_PATH/libmockefa-fi.so" ] || {
        echo "callgrind-msg: no mock provider: make -C $build tests/mockprov/libmockefa-fi.la" >&2
        exit 1
      }
    fi
    export FI_PROVIDER=${FI_PROVIDER:-mockefa} ;;
  *tcp*) export FI_TCP_IFACE=${FI_TCP_IFACE:-lo} ;;
esac

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=${keep:-$tmp}
mkdir -p "$out"

# The collection window: the four functions of tools/perf/msgcost.cpp (msgcost::measured::) that
# make msgcost's isend, irecv and test calls. They run only in the message loop, never nest, and
# are msgcost's own, so the window does not depend on the plugin's internal names. (The plugin's
# nf::api:: functions would not do: as_comm and the like match nf::api::* too, and entering a
# nested match toggles collection off.)
vg=(valgrind --tool=callgrind --quiet)
if [ "$whole" = 0 ]; then
  vg+=(--collect-atstart=no --toggle-collect='msgcost::measured::*')
fi

# Reads one callgrind output file and prints, tab-separated:
#   T total          O self object          F inclusive self object function
#   C calls object function (calls into it)  E cost calls caller callee (calls out of msgcost's)
# A function's inclusive cost is its self cost plus its calls' costs (the cost line after each
# calls= line). Names are compressed: "(id) name" the first time, "(id)" after.
parse() {
  awk -v OFS='\t' '
    function name(kind, s,   p, id, n) {
      if (substr(s, 1, 1) != "(") return s
      p = index(s, ")")
      id = substr(s, 2, p - 2)
      n = substr(s, p + 2)
      if (n != "") names[kind, id] = n
      return names[kind, id]
    }
    BEGIN { npos = 1 }
    /^positions:/ { npos = NF - 1; next }
    /^(summary|totals):/ { total = $2; next }
    /^ob=/ { ob = name("ob", substr($0, 4)); next }
    /^cob=/ { cob = name("ob", substr($0, 5)); next }
    /^fn=/ { fn = name("fn", substr($0, 4)); key = ob "\t" fn; next }
    /^cfn=/ { cfn = name("fn", substr($0, 5)); next }
    /^calls=/ { call = substr($1, 7) + 0; next }
    /^[0-9+*-]/ {
      c = NF > npos ? $(npos + 1) : 0
      incl[key] += c
      if (call == "") { self[key] += c; obj[ob] += c; next }
      callee = (cob != "" ? cob : ob) "\t" cfn
      calls[callee] += call
      if (fn ~ /^(msgcost::measured::|nfc::NetPlugin::)/) {
        edge[fn "\t" cfn] += c
        ecalls[fn "\t" cfn] += call
      }
      call = ""
      cob = ""
      next
    }
    END {
      print "T", total + 0
      for (o in obj) print "O", obj[o], o
      for (k in incl) print "F", incl[k], self[k] + 0, k
      for (k in calls) print "C", calls[k], k
      for (k in edge) print "E", edge[k], ecalls[k], k
    }' "$1"
}

# Runs msgcost under callgrind with $1 messages; the parsed figures go to $2.parsed.
measure() {
  local n=$1 base=$2
  if ! "${vg[@]}" --callgrind-out-file="$base.out" "$prog" "$n" >"$base.stdout" 2>"$base.stderr"
  then
    echo "callgrind-msg: msgcost $n failed ($NCCL_FABRIC_PROVIDER, $NCCL_FABRIC_PROTOCOL):" >&2
    cat "$base.stdout" "$base.stderr" >&2
    exit 1
  fi
  parse "$base.out" >"$base.parsed"
}

# Per message: (figure at N2 - figure at N1) / (N2 - N1), from the two parsed files. Prints the
# row's columns, or with top > 0 the functions (inclusive, self, calls per message) instead.
per_message() {
  awk -F'\t' -v n1="$n1" -v n2="$n2" -v top="$3" -v prog="$prog" '
    function cls(o) {
      if (o ~ /libnccl-net-fabric/) return "plugin"
      if (o ~ /libfabric\.so|-fi\.so/) return "fabric"
      if (o == prog || o ~ /\/msgcost$/) return "caller"
      return "other"
    }
    function base(o) { sub(/.*\//, "", o); return o }
    function which(f) {
      if (f !~ /^msgcost::measured::/) return ""
      sub(/^msgcost::measured::/, "", f)
      sub(/\(.*/, "", f)
      return f
    }
    { s = FILENAME == ARGV[1] ? -1 : 1 }
    $1 == "T" { t += s * $2 }
    $1 == "O" { o[cls($3)] += s * $2 }
    $1 == "F" {
      f = $5 " [" base($4) "]"
      inc[f] += s * $2
      slf[f] += s * $3
      if (s > 0) { self2[f] = $3; self2fn[$5] += $3 }
    }
    $1 == "C" {
      f = $4 " [" base($3) "]"
      cnt[f] += s * $2
      if (s > 0) in2[$4] += $2
    }
    $1 == "E" && which($4) != "" {
      # msgcost::measured::X -> nfc::NetPlugin::Y: the plugin cost of X is the call less
      # NetPlugin::Y own dispatch (the same instructions on every call).
      w = which($4)
      ec[w, $5] += s * $2
      ek[w, $5] += s * $3
      pair[w, $5] = 1
    }
    END {
      d = n2 - n1
      if (top > 0) {
        for (f in inc) if (self2[f] > 0)
          printf "%.1f\t%.1f\t%.2f\t%s\n", inc[f] / d, slf[f] / d, cnt[f] / d, f
        exit
      }
      for (wm in pair) {
        split(wm, a, SUBSEP)
        disp = in2[a[2]] > 0 ? self2fn[a[2]] / in2[a[2]] : 0
        k[a[1]] += ec[wm] - ek[wm] * disp
        n[a[1]] += ek[wm]
      }
      total = o["plugin"] + o["fabric"] + o["other"]
      printf "%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%.1f\n", total / d,
             o["plugin"] / d, o["fabric"] / d, o["other"] / d, k["isend"] / d, k["irecv"] / d,
             k["test_recv"] / d, k["test_send"] / d, n["test_recv"] / d, n["test_send"] / d,
             (k["isend"] + k["irecv"] + k["test_recv"] + k["test_send"]) / d
    }' "$1" "$2"
}

rev=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ "$whole" = 1 ]; then what="everything"; else what="inside isend/irecv/test"; fi
echo "callgrind-msg: $plugin (commit $rev), provider $provider, N1=$n1 N2=$n2, counting $what," \
  "NCCL_FABRIC_PEER_TIMEOUT=$NCCL_FABRIC_PEER_TIMEOUT"
echo "Ir per message: total = plugin + libfabric + other; isend, irecv, test of the receive,"
echo "test of the send; test calls per message on the receive and on the send"
row='%-12s %-9s %3s %8s %8s %9s %6s %6s %6s %7s %7s %6s %6s\n'
# shellcheck disable=SC2059  # the format is ours
printf "$row" provider protocol run Ir/msg plugin libfabric other isend irecv test.r test.s \
  tests.r tests.s
IFS=',' read -r -a protos <<<"$protocols"
for proto in "${protos[@]}"; do
  export NCCL_FABRIC_PROTOCOL=$proto
  for ((r = 1; r <= runs; r++)); do
    b=$out/${proto}.run$r
    measure "$n1" "$b.n1"
    measure "$n2" "$b.n2"
    IFS=$'\t' read -r total pl fab oth is ir tr ts nr ns calls \
      < <(per_message "$b.n1.parsed" "$b.n2.parsed" 0)
    # shellcheck disable=SC2059
    printf "$row" "$provider" "$proto" "$r" "$total" "$pl" "$fab" "$oth" "$is" "$ir" "$tr" "$ts" \
      "$nr" "$ns"
    # The four calls must account for every instruction counted (not so with --whole).
    if [ "$whole" = 0 ] &&
      awk -v a="$total" -v b="$calls" 'BEGIN { exit !(a - b > 0.5 || b - a > 0.5) }'; then
      echo "callgrind-msg: the calls add up to $calls, not $total: the window leaks" >&2
      exit 1
    fi
  done
done
if [ "$top" -gt 0 ]; then
  for proto in "${protos[@]}"; do
    echo
    echo "top $top functions by inclusive Ir per message, $provider $proto (run 1):"
    printf '%9s %9s %7s  %s\n' inclusive self calls function
    per_message "$out/$proto.run1.n1.parsed" "$out/$proto.run1.n2.parsed" "$top" |
      sort -t$'\t' -k1,1gr |
      awk -F'\t' -v top="$top" 'NR <= top { printf "%9s %9s %7s  %s\n", $1, $2, $3, $4 }'
  done
fi
[ -z "$keep" ] || echo "callgrind-msg: output files in $keep (callgrind_annotate FILE.out)"
