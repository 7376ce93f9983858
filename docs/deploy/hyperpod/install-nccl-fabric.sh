#!/bin/bash
# SageMaker HyperPod (Slurm) lifecycle step: installs nccl-fabric on each GPU node when the cluster
# is created or a node is replaced, against the EFA installer's libfabric that HyperPod's image
# has in /opt/amazon/efa, and installs the Slurm prolog (docs/deploy/slurm/prolog.sh).
# Call it from the on_create script of your lifecycle scripts, with the release tarball uploaded
# next to them (make dist gives nccl-fabric-VERSION.tar.gz):
#   bash ./install-nccl-fabric.sh ./nccl-fabric-0.1.0.tar.gz [PREFIX]
# Nodes without an NVIDIA GPU (the controller, login nodes) are skipped. Nothing here changes
# NCCL's default: jobs choose the plugin with NCCL_NET_PLUGIN=fabric (docs/deploy.md).
set -euo pipefail
TARBALL=${1:?usage: install-nccl-fabric.sh NCCL_FABRIC_TARBALL [PREFIX]}
PREFIX=${2:-/opt/nccl-fabric}
[ -f "$TARBALL" ] || { echo "install-nccl-fabric.sh: $TARBALL: no such file" >&2; exit 1; }
if [ ! -e /dev/nvidia0 ] && ! command -v nvidia-smi > /dev/null; then
  echo "install-nccl-fabric.sh: no NVIDIA GPU on $(hostname): skipped"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends build-essential pkg-config libhwloc-dev > /dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
tar -xzf "$TARBALL" -C "$WORK"
SRC=$(find "$WORK" -mindepth 1 -maxdepth 1 -type d -name 'nccl-fabric-*' | head -n 1)
[ -n "$SRC" ] || { echo "install-nccl-fabric.sh: $TARBALL holds no nccl-fabric-* folder" >&2; exit 1; }
# The release tarball has configure already: no autotools needed on the node.
bash "$SRC/docs/deploy/install-plugin.sh" --src "$SRC" --libfabric /opt/amazon/efa --prefix "$PREFIX"
install -D -m 0755 "$SRC/docs/deploy/slurm/prolog.sh" /etc/slurm/prolog.d/nccl-fabric.sh
echo "install-nccl-fabric.sh: installed in $PREFIX; prolog in /etc/slurm/prolog.d/nccl-fabric.sh"
echo "  (slurm.conf needs Prolog=/etc/slurm/prolog.d/* for it to run: see docs/deploy.md)"
