#!/usr/bin/env bash
# The security-group rule EFA needs: all traffic, every protocol and port, inbound and outbound,
# to and from the security group itself. Without it the EFA devices of two nodes cannot reach each
# other: the plugin starts, the connection never completes, and nccl-fabric-info --peer says the
# peer did not answer. Apply it to the security group of the node group that has EFA (eksctl does
# this itself with efaEnabled: true; a node group made another way needs it).
#
# usage: efa-security-group.sh SECURITY_GROUP_ID [--dry-run]   (needs the AWS CLI, credentials)
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 SECURITY_GROUP_ID [--dry-run]" >&2; exit 2; }
SG=$1
[[ "$SG" =~ ^sg-[0-9a-f]+$ ]] || { echo "efa-security-group.sh: '$SG' is not a security group id (sg-...)" >&2; exit 2; }
run=(aws ec2)
if [ "${2:-}" = --dry-run ]; then run=(echo aws ec2); fi
perm=$(printf '[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": "%s", "Description": "EFA: all traffic within the group"}]}]' "$SG")
"${run[@]}" authorize-security-group-ingress --group-id "$SG" --ip-permissions "$perm"
"${run[@]}" authorize-security-group-egress --group-id "$SG" --ip-permissions "$perm"
[ "${2:-}" = --dry-run ] && echo "(dry run: nothing changed)" || echo "efa-security-group.sh: $SG allows all traffic to and from itself"
