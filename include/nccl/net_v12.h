/* Written from the plugin ABI spec (nccl-plugin-abi.md §9 and Appendix B: NCCL master 2.30.7's
 * compiled layouts), not NCCL's headers. The function table is v11's member for member; the
 * properties grow (vProps.devs[8], so maxP2pBytes moves to 104; railId and planeId at the end).
 * The small structs whose layout Appendix B does not list separately (comm config, net attributes,
 * device handle) are v11's, as §9 says only their names change. */
#ifndef NCCL_FABRIC_NCCL_NET_V12_H
#define NCCL_FABRIC_NCCL_NET_V12_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "net_common.h"
#include "net_v11.h"

#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8
/* railId / planeId not known: NCCL ignores them. */
#define NCCL_NET_ID_UNDEF (-1)

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12];
} ncclNetVDeviceProps_v12_t;

typedef ncclNetCommConfig_v11_t ncclNetCommConfig_v12_t;
typedef ncclNetAttr_v11_t ncclNetAttr_v12_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v12_t;

/* Newest net ABI (symbol ncclNetPlugin_v12, NCCL >= 2.30.3, which looks it up first). */
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
  ncclNetVDeviceProps_v12_t vProps;
  /* Must lie in (0, NCCL_MAX_NET_SIZE_BYTES] or connection setup fails. */
  size_t maxP2pBytes;
  /* Used only by CollNet, but NCCL range-checks it like maxP2pBytes. */
  size_t maxCollBytes;
  /* Requests NCCL may group into one (NCCL_NET_MULTI_REQUEST); 1: none. */
  int maxMultiRequestSize;
  /* The device's rail and plane in the fabric; NCCL_NET_ID_UNDEF: not known, NCCL ignores it. */
  int16_t railId;
  int16_t planeId;
} ncclNetProperties_v12_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v12_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v12_t** recvDevComm);
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
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v12_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v12_t* netAttr);
} ncclNet_v12_t;

NF_ABI_SIZE(ncclNetVDeviceProps_v12_t, 36);
NF_ABI_ALIGN(ncclNetVDeviceProps_v12_t, 4);
NF_ABI_OFFSET(ncclNetVDeviceProps_v12_t, ndevs, 0);
NF_ABI_OFFSET(ncclNetVDeviceProps_v12_t, devs, 4);

NF_ABI_SIZE(ncclNetProperties_v12_t, 128);
NF_ABI_ALIGN(ncclNetProperties_v12_t, 8);
NF_ABI_OFFSET(ncclNetProperties_v12_t, name, 0);
NF_ABI_OFFSET(ncclNetProperties_v12_t, pciPath, 8);
NF_ABI_OFFSET(ncclNetProperties_v12_t, guid, 16);
NF_ABI_OFFSET(ncclNetProperties_v12_t, ptrSupport, 24);
NF_ABI_OFFSET(ncclNetProperties_v12_t, regIsGlobal, 28);
NF_ABI_OFFSET(ncclNetProperties_v12_t, forceFlush, 32);
NF_ABI_OFFSET(ncclNetProperties_v12_t, speed, 36);
NF_ABI_OFFSET(ncclNetProperties_v12_t, port, 40);
NF_ABI_OFFSET(ncclNetProperties_v12_t, latency, 44);
NF_ABI_OFFSET(ncclNetProperties_v12_t, maxComms, 48);
NF_ABI_OFFSET(ncclNetProperties_v12_t, maxRecvs, 52);
NF_ABI_OFFSET(ncclNetProperties_v12_t, netDeviceType, 56);
NF_ABI_OFFSET(ncclNetProperties_v12_t, netDeviceVersion, 60);
NF_ABI_OFFSET(ncclNetProperties_v12_t, vProps, 64);
NF_ABI_OFFSET(ncclNetProperties_v12_t, maxP2pBytes, 104);
NF_ABI_OFFSET(ncclNetProperties_v12_t, maxCollBytes, 112);
NF_ABI_OFFSET(ncclNetProperties_v12_t, maxMultiRequestSize, 120);
NF_ABI_OFFSET(ncclNetProperties_v12_t, railId, 124);
NF_ABI_OFFSET(ncclNetProperties_v12_t, planeId, 126);

NF_ABI_SIZE(ncclNet_v12_t, 176);
NF_ABI_ALIGN(ncclNet_v12_t, 8);
NF_ABI_OFFSET(ncclNet_v12_t, name, 0);
NF_ABI_OFFSET(ncclNet_v12_t, init, 8);
NF_ABI_OFFSET(ncclNet_v12_t, devices, 16);
NF_ABI_OFFSET(ncclNet_v12_t, getProperties, 24);
NF_ABI_OFFSET(ncclNet_v12_t, listen, 32);
NF_ABI_OFFSET(ncclNet_v12_t, connect, 40);
NF_ABI_OFFSET(ncclNet_v12_t, accept, 48);
NF_ABI_OFFSET(ncclNet_v12_t, regMr, 56);
NF_ABI_OFFSET(ncclNet_v12_t, regMrDmaBuf, 64);
NF_ABI_OFFSET(ncclNet_v12_t, deregMr, 72);
NF_ABI_OFFSET(ncclNet_v12_t, isend, 80);
NF_ABI_OFFSET(ncclNet_v12_t, irecv, 88);
NF_ABI_OFFSET(ncclNet_v12_t, iflush, 96);
NF_ABI_OFFSET(ncclNet_v12_t, test, 104);
NF_ABI_OFFSET(ncclNet_v12_t, closeSend, 112);
NF_ABI_OFFSET(ncclNet_v12_t, closeRecv, 120);
NF_ABI_OFFSET(ncclNet_v12_t, closeListen, 128);
NF_ABI_OFFSET(ncclNet_v12_t, getDeviceMr, 136);
NF_ABI_OFFSET(ncclNet_v12_t, irecvConsumed, 144);
NF_ABI_OFFSET(ncclNet_v12_t, makeVDevice, 152);
NF_ABI_OFFSET(ncclNet_v12_t, finalize, 160);
NF_ABI_OFFSET(ncclNet_v12_t, setNetAttr, 168);

#endif /* NCCL_FABRIC_NCCL_NET_V12_H */
