/* Written from the NCCL 2.28.9 plugin ABI spec (nccl-plugin-abi.md §3.3.5), not NCCL's headers. */
#ifndef NCCL_FABRIC_NCCL_NET_V6_H
#define NCCL_FABRIC_NCCL_NET_V6_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "net_common.h"

/* Oldest net ABI NCCL 2.28.9 still loads (there is no v2-v5 symbol). */

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
} ncclNetProperties_v6_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v6_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm);
  ncclResult_t (*regMr)(void* comm, void* data, int size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
} ncclNet_v6_t;

NF_ABI_SIZE(ncclNetProperties_v6_t, 48);
NF_ABI_ALIGN(ncclNetProperties_v6_t, 8);
NF_ABI_OFFSET(ncclNetProperties_v6_t, name, 0);
NF_ABI_OFFSET(ncclNetProperties_v6_t, pciPath, 8);
NF_ABI_OFFSET(ncclNetProperties_v6_t, guid, 16);
NF_ABI_OFFSET(ncclNetProperties_v6_t, ptrSupport, 24);
NF_ABI_OFFSET(ncclNetProperties_v6_t, speed, 28);
NF_ABI_OFFSET(ncclNetProperties_v6_t, port, 32);
NF_ABI_OFFSET(ncclNetProperties_v6_t, latency, 36);
NF_ABI_OFFSET(ncclNetProperties_v6_t, maxComms, 40);
NF_ABI_OFFSET(ncclNetProperties_v6_t, maxRecvs, 44);

NF_ABI_SIZE(ncclNet_v6_t, 136);
NF_ABI_ALIGN(ncclNet_v6_t, 8);
NF_ABI_OFFSET(ncclNet_v6_t, name, 0);
NF_ABI_OFFSET(ncclNet_v6_t, init, 8);
NF_ABI_OFFSET(ncclNet_v6_t, devices, 16);
NF_ABI_OFFSET(ncclNet_v6_t, getProperties, 24);
NF_ABI_OFFSET(ncclNet_v6_t, listen, 32);
NF_ABI_OFFSET(ncclNet_v6_t, connect, 40);
NF_ABI_OFFSET(ncclNet_v6_t, accept, 48);
NF_ABI_OFFSET(ncclNet_v6_t, regMr, 56);
NF_ABI_OFFSET(ncclNet_v6_t, regMrDmaBuf, 64);
NF_ABI_OFFSET(ncclNet_v6_t, deregMr, 72);
NF_ABI_OFFSET(ncclNet_v6_t, isend, 80);
NF_ABI_OFFSET(ncclNet_v6_t, irecv, 88);
NF_ABI_OFFSET(ncclNet_v6_t, iflush, 96);
NF_ABI_OFFSET(ncclNet_v6_t, test, 104);
NF_ABI_OFFSET(ncclNet_v6_t, closeSend, 112);
NF_ABI_OFFSET(ncclNet_v6_t, closeRecv, 120);
NF_ABI_OFFSET(ncclNet_v6_t, closeListen, 128);

#endif /* NCCL_FABRIC_NCCL_NET_V6_H */
