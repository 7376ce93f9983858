/* Written from the NCCL 2.28.9 plugin ABI spec (nccl-plugin-abi.md §1.6-1.7), not NCCL's headers.
 */
#ifndef NCCL_FABRIC_NCCL_NET_COMMON_H
#define NCCL_FABRIC_NCCL_NET_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* Each constant is guarded so a TU that also sees NCCL's own definitions
 * (same values) does not trip a redefinition error. */

/* NCCL copies all 128 bytes of the listen handle to the peer, whatever we fill. */
#ifndef NCCL_NET_HANDLE_MAXSIZE
#define NCCL_NET_HANDLE_MAXSIZE 128
#endif
/* maxP2pBytes/maxCollBytes outside (0, 2^40] make NCCL fail connection setup. */
#ifndef NCCL_MAX_NET_SIZE_BYTES
#define NCCL_MAX_NET_SIZE_BYTES (1 * 1024 * 1024 * 1024 * 1024L)
#endif
/* NCCL stores this into *request before irecv as a hint (v9+); it is not a request. */
#ifndef NCCL_NET_OPTIONAL_RECV_COMPLETION
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1
#endif
#ifndef NCCL_NET_MULTI_REQUEST
#define NCCL_NET_MULTI_REQUEST 0x2
#endif
/* Caps NCCL's compat layers apply to <= v8 plugins. */
#ifndef MAX_NET_SIZE
#define MAX_NET_SIZE (1024 * 1024 * 1024L)
#endif
#ifndef MAX_COLLNET_SIZE
#define MAX_COLLNET_SIZE (512 * 1024 * 1024L)
#endif
/* Bits of ncclNetProperties.ptrSupport, also the `type` argument of regMr. */
#ifndef NCCL_PTR_HOST
#define NCCL_PTR_HOST 0x1
#endif
#ifndef NCCL_PTR_CUDA
#define NCCL_PTR_CUDA 0x2
#endif
#ifndef NCCL_PTR_DMABUF
#define NCCL_PTR_DMABUF 0x4
#endif
/* Outstanding requests every send or recv comm must accept. */
#ifndef NCCL_NET_MAX_REQUESTS
#define NCCL_NET_MAX_REQUESTS 32
#endif
#ifndef NCCL_NET_MAX_REQUESTS_V6
#define NCCL_NET_MAX_REQUESTS_V6 8
#endif
/* Length of vProps.devs[] in v9..v11; master's v12 uses 8, so never size v12 structs with it. */
#ifndef NCCL_NET_MAX_DEVS_PER_NIC
#define NCCL_NET_MAX_DEVS_PER_NIC 4
#endif
#ifndef NCCL_NET_TRAFFIC_CLASS_UNDEF
#define NCCL_NET_TRAFFIC_CLASS_UNDEF -1
#endif
#ifndef NCCL_NET_ATTR_UNDEF
#define NCCL_NET_ATTR_UNDEF -1
#endif
/* A host-only plugin reports NCCL_NET_DEVICE_HOST with this version. */
#ifndef NCCL_NET_DEVICE_INVALID_VERSION
#define NCCL_NET_DEVICE_INVALID_VERSION 0x0
#endif
#ifndef NCCL_NET_MTU_SIZE
#define NCCL_NET_MTU_SIZE 4096
#endif
/* The only UNPACK version NCCL 2.28.9 accepts. */
#ifndef NCCL_NET_DEVICE_UNPACK_VERSION
#define NCCL_NET_DEVICE_UNPACK_VERSION 0x7
#endif

/* NCCL 2.28.9 refuses a net plugin whose device 0 reports anything but HOST or UNPACK. */
typedef enum {
  NCCL_NET_DEVICE_HOST = 0,
  NCCL_NET_DEVICE_UNPACK = 1,
  NCCL_NET_DEVICE_GIN_PROXY = 2,
  NCCL_NET_DEVICE_GIN_GDAKI = 3
} ncclNetDeviceType;

typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v7_t;

/* The device handle has not changed since v7; NCCL keeps one layout under every version's name. */
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v11_t;

/* The per-version small structs share a layout but stay distinct types, as in NCCL,
 * so a vN function pointer cannot silently take a vM struct. */
typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_v9_t;

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_v10_t;

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_v11_t;

typedef struct {
  int trafficClass;
} ncclNetCommConfig_v10_t;

typedef struct {
  int trafficClass;
} ncclNetCommConfig_v11_t;

typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;

typedef struct {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} ncclNetAttr_v11_t;

NF_ABI_SIZE(ncclNetDeviceType, 4);

NF_ABI_SIZE(ncclNetDeviceHandle_v7_t, 32);
NF_ABI_ALIGN(ncclNetDeviceHandle_v7_t, 8);
NF_ABI_OFFSET(ncclNetDeviceHandle_v7_t, netDeviceType, 0);
NF_ABI_OFFSET(ncclNetDeviceHandle_v7_t, netDeviceVersion, 4);
NF_ABI_OFFSET(ncclNetDeviceHandle_v7_t, handle, 8);
NF_ABI_OFFSET(ncclNetDeviceHandle_v7_t, size, 16);
NF_ABI_OFFSET(ncclNetDeviceHandle_v7_t, needsProxyProgress, 24);

NF_ABI_SIZE(ncclNetVDeviceProps_v9_t, 20);
NF_ABI_ALIGN(ncclNetVDeviceProps_v9_t, 4);
NF_ABI_OFFSET(ncclNetVDeviceProps_v9_t, ndevs, 0);
NF_ABI_OFFSET(ncclNetVDeviceProps_v9_t, devs, 4);

NF_ABI_SIZE(ncclNetVDeviceProps_v10_t, 20);
NF_ABI_ALIGN(ncclNetVDeviceProps_v10_t, 4);
NF_ABI_OFFSET(ncclNetVDeviceProps_v10_t, ndevs, 0);
NF_ABI_OFFSET(ncclNetVDeviceProps_v10_t, devs, 4);

NF_ABI_SIZE(ncclNetVDeviceProps_v11_t, 20);
NF_ABI_ALIGN(ncclNetVDeviceProps_v11_t, 4);
NF_ABI_OFFSET(ncclNetVDeviceProps_v11_t, ndevs, 0);
NF_ABI_OFFSET(ncclNetVDeviceProps_v11_t, devs, 4);

NF_ABI_SIZE(ncclNetCommConfig_v10_t, 4);
NF_ABI_ALIGN(ncclNetCommConfig_v10_t, 4);
NF_ABI_OFFSET(ncclNetCommConfig_v10_t, trafficClass, 0);

NF_ABI_SIZE(ncclNetCommConfig_v11_t, 4);
NF_ABI_ALIGN(ncclNetCommConfig_v11_t, 4);
NF_ABI_OFFSET(ncclNetCommConfig_v11_t, trafficClass, 0);

NF_ABI_SIZE(ncclNetCommAttr_v11_t, 16);
NF_ABI_ALIGN(ncclNetCommAttr_v11_t, 4);
NF_ABI_OFFSET(ncclNetCommAttr_v11_t, maxConcurrentPeers, 0);
NF_ABI_OFFSET(ncclNetCommAttr_v11_t, minConcurrentPeers, 4);
NF_ABI_OFFSET(ncclNetCommAttr_v11_t, maxFlowsPerPeer, 8);
NF_ABI_OFFSET(ncclNetCommAttr_v11_t, minFlowsPerPeer, 12);

NF_ABI_SIZE(ncclNetAttr_v11_t, 44);
NF_ABI_ALIGN(ncclNetAttr_v11_t, 4);
NF_ABI_OFFSET(ncclNetAttr_v11_t, sendCommAttr, 0);
NF_ABI_OFFSET(ncclNetAttr_v11_t, recvCommAttr, 16);
NF_ABI_OFFSET(ncclNetAttr_v11_t, op, 32);
NF_ABI_OFFSET(ncclNetAttr_v11_t, algo, 36);
NF_ABI_OFFSET(ncclNetAttr_v11_t, proto, 40);

#endif /* NCCL_FABRIC_NCCL_NET_COMMON_H */
