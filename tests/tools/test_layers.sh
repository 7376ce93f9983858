#!/bin/bash
# The layering of docs/architecture.md, checked on every #include of src/ and tuner/: a layer may
# include only itself and the layers below it, so no include cycle between layers can appear. An
# include against the layering fails the test with the file, line and the rule it breaks.
#
#   api      -> core tuner util (and include/nccl: only api/ and tuner/ see NCCL's types)
#   proto    -> core wire fabric mem util   (the protocols: plug-ins of core, which never includes them)
#   core     -> wire fabric mem topo platform util tuner/net_info.h
#   wire     -> (nothing)
#   topo     -> fabric util
#   mem      -> fabric util
#   fabric   -> util
#   platform -> util
#   tuner    -> platform util (+ nccl)
#   util     -> (nothing)
# libfabric's headers (<rdma/...>) only in fabric/, core/ and proto/; hwloc only in topo/.
set -euo pipefail
src="${NF_SRC_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
cd "$src"

allowed() {  # layer -> the layers it may include (besides itself)
  case "$1" in
    api) echo "core tuner util nccl" ;;
    core) echo "wire fabric mem topo platform util tuner/net_info.h" ;;
    proto) echo "core wire fabric mem util" ;;
    wire) echo "" ;;
    topo) echo "fabric util" ;;
    mem) echo "fabric util" ;;
    fabric) echo "util" ;;
    platform) echo "util" ;;
    tuner) echo "platform util nccl" ;;
    util) echo "" ;;
    *) echo "?" ;;
  esac
}

fails=0
checked=0
bad() {
  echo "LAYER: $*" >&2
  fails=$((fails + 1))
}

while IFS= read -r -d '' f; do
  case "$f" in
    src/*) layer=$(echo "$f" | cut -d/ -f2) ;;
    tuner/*) layer=tuner ;;
  esac
  rules=$(allowed "$layer")
  if [ "$rules" = "?" ]; then
    bad "$f: folder '$layer' is not in the layering (add it to docs/architecture.md and here)"
    continue
  fi
  n=0
  while IFS= read -r line; do
    n=$((n + 1))
    case "$line" in
      '#include "'*)
        inc=${line#\#include \"}
        inc=${inc%%\"*}
        target=${inc%%/*}
        [ "$target" = "$inc" ] && continue  # a header beside the file
        checked=$((checked + 1))
        [ "$target" = "$layer" ] && continue
        ok=0
        for r in $rules; do
          if [ "$r" = "$target" ] || [ "$r" = "$inc" ]; then ok=1; fi
        done
        [ $ok = 1 ] || bad "$f:$n: $layer/ includes \"$inc\" ($layer/ may include: ${rules:-nothing})"
        ;;
      '#include <rdma/'*)
        case "$layer" in fabric | core | proto) ;; *) bad "$f:$n: libfabric header in $layer/ (only fabric/, core/ and proto/)" ;; esac
        ;;
      '#include <hwloc'*)
        [ "$layer" = topo ] || bad "$f:$n: hwloc header in $layer/ (only topo/)"
        ;;
    esac
  done <"$f"
done < <(find src tuner \( -name '*.h' -o -name '*.cpp' \) -print0 | sort -z)

echo "layers: $checked includes between folders checked, $fails against the layering"
[ "$checked" -gt 50 ] || { echo "too few includes found: is NF_SRC_DIR ($src) the source tree?" >&2; exit 1; }
[ "$fails" = 0 ]
