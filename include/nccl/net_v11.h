/* Written from the NCCL 2.28.9 plugin ABI spec (nccl-plugin-abi.md §3.1-3.2), not NCCL's headers.
 */
#ifndef NCCL_FABRIC_NCCL_NET_V11_H
#define NCCL_FABRIC_NCCL_NET_V11_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "net_common.h"

/* Current net ABI of NCCL 2.28.9 (symbol ncclNetPlugin_v11). Unlike v10, init is
 * per communicator and returns a ctx that listen, connect, finalize and setNetAttr take. */

typedef struct {
  /* NCCL keys its topology XML on this and keeps the pointer: unique per device, never freed. */
  char* name;
  /* NULL marks a virtual NIC; NCCL then attaches it to the first CPU node. */
  char* pciPath;
  /* Same guid and port means the same physical port to NCCL. */
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  /* Mbps; <= 0 is replaced by 10000. */
  int speed;
  int port;
  /* Microseconds; NCCL stores it as an int, so fractions are lost. */
  float latency;
  int maxComms;
  /* Upper bound on n in a grouped irecv; 1 disables grouping. */
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v11_t vProps;
  /* Must lie in (0, NCCL_MAX_NET_SIZE_BYTES] or connection setup fails. */
  size_t maxP2pBytes;
  /* Used only by CollNet, but NCCL range-checks it like maxP2pBytes. */
  size_t maxCollBytes;
  /* Not read by NCCL 2.28.9; report 1. */
  int maxMultiRequestSize;
} ncclNetProperties_v11_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v11_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v11_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  /* Needed only when ptrSupport has NCCL_PTR_CUDA or NCCL_PTR_DMABUF. */
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  /* The members from here on, except finalize, may be NULL. */
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v11_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v11_t* netAttr);
} ncclNet_v11_t;

NF_ABI_SIZE(ncclNetProperties_v11_t, 112);
NF_ABI_ALIGN(ncclNetProperties_v11_t, 8);
NF_ABI_OFFSET(ncclNetProperties_v11_t, name, 0);
NF_ABI_OFFSET(ncclNetProperties_v11_t, pciPath, 8);
NF_ABI_OFFSET(ncclNetProperties_v11_t, guid, 16);
NF_ABI_OFFSET(ncclNetProperties_v11_t, ptrSupport, 24);
NF_ABI_OFFSET(ncclNetProperties_v11_t, regIsGlobal, 28);
NF_ABI_OFFSET(ncclNetProperties_v11_t, forceFlush, 32);
NF_ABI_OFFSET(ncclNetProperties_v11_t, speed, 36);
NF_ABI_OFFSET(ncclNetProperties_v11_t, port, 40);
NF_ABI_OFFSET(ncclNetProperties_v11_t, latency, 44);
NF_ABI_OFFSET(ncclNetProperties_v11_t, maxComms, 48);
NF_ABI_OFFSET(ncclNetProperties_v11_t, maxRecvs, 52);
NF_ABI_OFFSET(ncclNetProperties_v11_t, netDeviceType, 56);
NF_ABI_OFFSET(ncclNetProperties_v11_t, netDeviceVersion, 60);
NF_ABI_OFFSET(ncclNetProperties_v11_t, vProps, 64);
NF_ABI_OFFSET(ncclNetProperties_v11_t, maxP2pBytes, 88);
NF_ABI_OFFSET(ncclNetProperties_v11_t, maxCollBytes, 96);
NF_ABI_OFFSET(ncclNetProperties_v11_t, maxMultiRequestSize, 104);

NF_ABI_SIZE(ncclNet_v11_t, 176);
NF_ABI_ALIGN(ncclNet_v11_t, 8);
NF_ABI_OFFSET(ncclNet_v11_t, name, 0);
NF_ABI_OFFSET(ncclNet_v11_t, init, 8);
NF_ABI_OFFSET(ncclNet_v11_t, devices, 16);
NF_ABI_OFFSET(ncclNet_v11_t, getProperties, 24);
NF_ABI_OFFSET(ncclNet_v11_t, listen, 32);
NF_ABI_OFFSET(ncclNet_v11_t, connect, 40);
NF_ABI_OFFSET(ncclNet_v11_t, accept, 48);
NF_ABI_OFFSET(ncclNet_v11_t, regMr, 56);
NF_ABI_OFFSET(ncclNet_v11_t, regMrDmaBuf, 64);
NF_ABI_OFFSET(ncclNet_v11_t, deregMr, 72);
NF_ABI_OFFSET(ncclNet_v11_t, isend, 80);
NF_ABI_OFFSET(ncclNet_v11_t, irecv, 88);
NF_ABI_OFFSET(ncclNet_v11_t, iflush, 96);
NF_ABI_OFFSET(ncclNet_v11_t, test, 104);
NF_ABI_OFFSET(ncclNet_v11_t, closeSend, 112);
NF_ABI_OFFSET(ncclNet_v11_t, closeRecv, 120);
NF_ABI_OFFSET(ncclNet_v11_t, closeListen, 128);
NF_ABI_OFFSET(ncclNet_v11_t, getDeviceMr, 136);
NF_ABI_OFFSET(ncclNet_v11_t, irecvConsumed, 144);
NF_ABI_OFFSET(ncclNet_v11_t, makeVDevice, 152);
NF_ABI_OFFSET(ncclNet_v11_t, finalize, 160);
NF_ABI_OFFSET(ncclNet_v11_t, setNetAttr, 168);

#endif /* NCCL_FABRIC_NCCL_NET_V11_H */
