#!/bin/bash
# Slurm prolog: nccl-fabric-info on each node before a job starts there. A node where it finds an
# error (exit 2: the plugin does not start, no EFA device) is drained, with the reason, instead of
# failing the job an hour later; warnings (exit 1) are logged only.
# Install: copy to the nodes (e.g. /etc/slurm/prolog.d/nccl-fabric.sh) and point slurm.conf's
# Prolog at it (Prolog=/etc/slurm/prolog.d/*). Runs as root; must stay fast and bounded.
# NCCL_FABRIC_INFO: the tool (default: the installed package's, else /opt/nccl-fabric's).
set -u
INFO=${NCCL_FABRIC_INFO:-}
if [ -z "$INFO" ]; then
  for c in /usr/bin/nccl-fabric-info /opt/nccl-fabric/bin/nccl-fabric-info; do
    [ -x "$c" ] && { INFO=$c; break; }
  done
fi
[ -n "$INFO" ] || { logger -t nccl-fabric-prolog "nccl-fabric-info not installed: not checked"; exit 0; }
LOG=/var/log/nccl-fabric-info.log
# The job's plugin choice is the job's; the check is of the node with nccl-fabric selected.
NCCL_NET_PLUGIN=fabric NCCL_NET=fabric timeout 60 "$INFO" > "$LOG" 2>&1
rc=$?
case $rc in
  0 | 1) logger -t nccl-fabric-prolog "job ${SLURM_JOB_ID:-?}: nccl-fabric-info exit $rc (see $LOG)"; exit 0 ;;
  124) logger -t nccl-fabric-prolog "nccl-fabric-info timed out after 60 s"; exit 0 ;;
esac
reason=$(grep -m1 -i 'error' "$LOG" | cut -c1-120)
[ -n "$reason" ] || reason="exit $rc, no error line: see $LOG on $(hostname)"
logger -t nccl-fabric-prolog "job ${SLURM_JOB_ID:-?}: nccl-fabric-info exit $rc: $reason"
echo "print nccl-fabric-info: $reason"
# A non-zero exit makes slurmd drain the node and requeue the job elsewhere.
exit 1
