# shellcheck shell=bash
# Sourced by the sbatch scripts: sets the NCCL variables for PLUGIN (default: fabric).
#   PLUGIN=fabric     nccl-fabric (NCCL_NET_PLUGIN=fabric, NCCL_NET=fabric)
#   PLUGIN=reference  the reference plugin (aws-ofi-nccl) the EFA installer put in the image
#   PLUGIN=default    whatever NCCL loads by itself (nothing set)
# Any other value stops the job before it starts.
case "${PLUGIN:=fabric}" in
  fabric)
    export NCCL_NET_PLUGIN=fabric NCCL_NET=fabric ;;
  reference)
    # NCCL resolves "ofi" to libnccl-net-ofi.so on the library path (the image puts the EFA
    # installer's ofi-nccl folder there). NCCL_NET is left unset: the reference plugin calls its
    # network "Libfabric" or "AWS Libfabric" depending on its version.
    export NCCL_NET_PLUGIN=ofi
    unset NCCL_NET ;;
  default)
    unset NCCL_NET_PLUGIN NCCL_NET ;;
  *)
    echo "PLUGIN=$PLUGIN: use fabric, reference or default" >&2
    exit 2 ;;
esac
export NCCL_DEBUG=${NCCL_DEBUG:-INFO} NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,NET,TUNING}
echo "plugin: $PLUGIN (NCCL_NET_PLUGIN=${NCCL_NET_PLUGIN:-<unset>} NCCL_NET=${NCCL_NET:-<unset>})"
