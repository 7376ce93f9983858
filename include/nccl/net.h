/* Written from the NCCL 2.28.9 plugin ABI spec (nccl-plugin-abi.md §1, §3), not NCCL's headers. */
#ifndef NCCL_FABRIC_NCCL_NET_H
#define NCCL_FABRIC_NCCL_NET_H

/* One include for code that exports or shims several net ABI versions at once. */
#include "common.h"
#include "net_common.h"
#include "net_v10.h"
#include "net_v11.h"
#include "net_v12.h"
#include "net_v6.h"
#include "net_v7.h"
#include "net_v8.h"
#include "net_v9.h"

#endif /* NCCL_FABRIC_NCCL_NET_H */
