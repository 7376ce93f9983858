/* Written from the NCCL 2.28.9 plugin ABI spec (nccl-plugin-abi.md §3.3.1), not NCCL's headers. */
#ifndef NCCL_FABRIC_NCCL_NET_V10_H
#define NCCL_FABRIC_NCCL_NET_V10_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "net_common.h"

/* For NCCL releases whose newest net ABI is v10: init is global, and the comm
 * config arrives with each connect rather than with init. */

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v10_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} ncclNetProperties_v10_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v10_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v10_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v10_t* props);
} ncclNet_v10_t;

NF_ABI_SIZE(ncclNetProperties_v10_t, 104);
NF_ABI_ALIGN(ncclNetProperties_v10_t, 8);
NF_ABI_OFFSET(ncclNetProperties_v10_t, name, 0);
NF_ABI_OFFSET(ncclNetProperties_v10_t, pciPath, 8);
NF_ABI_OFFSET(ncclNetProperties_v10_t, guid, 16);
NF_ABI_OFFSET(ncclNetProperties_v10_t, ptrSupport, 24);
NF_ABI_OFFSET(ncclNetProperties_v10_t, regIsGlobal, 28);
NF_ABI_OFFSET(ncclNetProperties_v10_t, forceFlush, 32);
NF_ABI_OFFSET(ncclNetProperties_v10_t, speed, 36);
NF_ABI_OFFSET(ncclNetProperties_v10_t, port, 40);
NF_ABI_OFFSET(ncclNetProperties_v10_t, latency, 44);
NF_ABI_OFFSET(ncclNetProperties_v10_t, maxComms, 48);
NF_ABI_OFFSET(ncclNetProperties_v10_t, maxRecvs, 52);
NF_ABI_OFFSET(ncclNetProperties_v10_t, netDeviceType, 56);
NF_ABI_OFFSET(ncclNetProperties_v10_t, netDeviceVersion, 60);
NF_ABI_OFFSET(ncclNetProperties_v10_t, vProps, 64);
NF_ABI_OFFSET(ncclNetProperties_v10_t, maxP2pBytes, 88);
NF_ABI_OFFSET(ncclNetProperties_v10_t, maxCollBytes, 96);

NF_ABI_SIZE(ncclNet_v10_t, 160);
NF_ABI_ALIGN(ncclNet_v10_t, 8);
NF_ABI_OFFSET(ncclNet_v10_t, name, 0);
NF_ABI_OFFSET(ncclNet_v10_t, init, 8);
NF_ABI_OFFSET(ncclNet_v10_t, devices, 16);
NF_ABI_OFFSET(ncclNet_v10_t, getProperties, 24);
NF_ABI_OFFSET(ncclNet_v10_t, listen, 32);
NF_ABI_OFFSET(ncclNet_v10_t, connect, 40);
NF_ABI_OFFSET(ncclNet_v10_t, accept, 48);
NF_ABI_OFFSET(ncclNet_v10_t, regMr, 56);
NF_ABI_OFFSET(ncclNet_v10_t, regMrDmaBuf, 64);
NF_ABI_OFFSET(ncclNet_v10_t, deregMr, 72);
NF_ABI_OFFSET(ncclNet_v10_t, isend, 80);
NF_ABI_OFFSET(ncclNet_v10_t, irecv, 88);
NF_ABI_OFFSET(ncclNet_v10_t, iflush, 96);
NF_ABI_OFFSET(ncclNet_v10_t, test, 104);
NF_ABI_OFFSET(ncclNet_v10_t, closeSend, 112);
NF_ABI_OFFSET(ncclNet_v10_t, closeRecv, 120);
NF_ABI_OFFSET(ncclNet_v10_t, closeListen, 128);
NF_ABI_OFFSET(ncclNet_v10_t, getDeviceMr, 136);
NF_ABI_OFFSET(ncclNet_v10_t, irecvConsumed, 144);
NF_ABI_OFFSET(ncclNet_v10_t, makeVDevice, 152);

#endif /* NCCL_FABRIC_NCCL_NET_V10_H */
