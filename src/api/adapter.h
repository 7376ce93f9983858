// Shared by the per-version adapters: result mapping, properties filling.
// Only api/ sees NCCL's types.
#pragma once
#include <climits>
#include <cstddef>

#include "api/nccl_logger.h"
#include "core/api.h"
#include "nccl/net.h"

namespace nf {
namespace adapter {

static_assert(static_cast<int>(Status::kOk) == ncclSuccess, "status values are NCCL's");
static_assert(static_cast<int>(Status::kUnhandledCudaError) == ncclUnhandledCudaError,
              "status values are NCCL's");
static_assert(static_cast<int>(Status::kSystemError) == ncclSystemError,
              "status values are NCCL's");
static_assert(static_cast<int>(Status::kInternalError) == ncclInternalError,
              "status values are NCCL's");
static_assert(static_cast<int>(Status::kInvalidArgument) == ncclInvalidArgument,
              "status values are NCCL's");
static_assert(static_cast<int>(Status::kInvalidUsage) == ncclInvalidUsage,
              "status values are NCCL's");
static_assert(static_cast<int>(Status::kRemoteError) == ncclRemoteError,
              "status values are NCCL's");
static_assert(kPtrHost == NCCL_PTR_HOST && kPtrCuda == NCCL_PTR_CUDA &&
                  kPtrDmabuf == NCCL_PTR_DMABUF,
              "pointer kinds are NCCL's");

// NCCL before 2.30 has no ncclTimeout: a peer that stopped answering is a remote error there.
inline ncclResult_t R(Status s) {
  return s == Status::kTimeout ? ncclRemoteError : static_cast<ncclResult_t>(s);
}
// NCCL >= 2.30 (net ABI v12) knows ncclTimeout (8).
constexpr int kNcclTimeout = 8;
inline ncclResult_t R12(Status s) { return static_cast<ncclResult_t>(s); }
static_assert(static_cast<int>(Status::kTimeout) == kNcclTimeout, "status values are NCCL's");

// NCCL's profiler callback, behind core's opaque hook (core sees no NCCL type).
int call_profiler(void* fn, void** ehandle, int type, void* phandle, int64_t plugin_id, void* ext);
inline ProfHook prof_hook(ncclProfilerCallback_t cb) {
  ProfHook h;
  h.fn = reinterpret_cast<void*>(cb);
  h.call = cb != nullptr ? call_profiler : nullptr;
  return h;
}
// setNetAttr (v11, v12: the same struct).
template <typename A>
api::NetAttrs net_attrs(const A* a) {
  api::NetAttrs n;
  n.send_peers_min = a->sendCommAttr.minConcurrentPeers;
  n.send_peers_max = a->sendCommAttr.maxConcurrentPeers;
  n.send_flows_min = a->sendCommAttr.minFlowsPerPeer;
  n.send_flows_max = a->sendCommAttr.maxFlowsPerPeer;
  n.recv_peers_min = a->recvCommAttr.minConcurrentPeers;
  n.recv_peers_max = a->recvCommAttr.maxConcurrentPeers;
  n.recv_flows_min = a->recvCommAttr.minFlowsPerPeer;
  n.recv_flows_max = a->recvCommAttr.maxFlowsPerPeer;
  n.op = a->op;
  n.algo = a->algo;
  n.proto = a->proto;
  return n;
}

// Fields every properties version has.
template <typename P>
void fill_base(const DeviceProps& d, P* p) {
  p->name = const_cast<char*>(d.name);
  p->pciPath = const_cast<char*>(d.pci_path);
  p->guid = d.guid;
  p->ptrSupport = d.ptr_support;
  p->speed = d.speed_mbps;
  p->port = d.port;
  p->latency = d.latency_us;
  p->maxComms = d.max_comms;
  p->maxRecvs = d.max_recvs;
}

template <typename P>
void fill_device_type(P* p) {
  p->netDeviceType = NCCL_NET_DEVICE_HOST;
  p->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
}

// v9 and later.
template <typename P>
void fill_v9(int dev, const DeviceProps& d, P* p) {
  fill_base(d, p);
  fill_device_type(p);
  p->regIsGlobal = d.reg_is_global;
  p->forceFlush = d.force_flush;
  p->vProps.ndevs = 1;
  for (int& slot : p->vProps.devs) slot = 0;  // 4 slots before v12, 8 in v12
  p->vProps.devs[0] = dev;
  p->maxP2pBytes = d.max_p2p_bytes;
  p->maxCollBytes = d.max_coll_bytes;
}

// getProperties of v9 and later: the same fields, in structs that only grow.
template <typename P>
ncclResult_t get_properties_v9_on(int dev, P* p) {
  DeviceProps d;
  Status s = api::get_properties(dev, &d);
  if (!ok(s)) return R(s);
  fill_v9(dev, d, p);
  return ncclSuccess;
}

// The int-sized calls of v6-v8: a negative size is NCCL's mistake, not a huge buffer.
ncclResult_t isend_int(void* comm, void* data, int size, int tag, void* mhandle, void** request);
ncclResult_t irecv_int(void* comm, int n, void** data, int* sizes, int* tags, void** mhandles,
                       void** request);
ncclResult_t regmr_int(void* comm, void* data, int size, int type, void** mhandle);

// Calls that are the same in every version.
ncclResult_t devices(int* ndev);
ncclResult_t accept_any(void* listen_comm, void** recv_comm);
ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle);
ncclResult_t dereg_mr(void* comm, void* mhandle);
ncclResult_t iflush(void* comm, int n, void** data, int* sizes, void** mhandles, void** request);
ncclResult_t test(void* request, int* done, int* sizes);
ncclResult_t close_send(void* comm);
ncclResult_t close_recv(void* comm);
ncclResult_t close_listen(void* comm);
ncclResult_t init_default(ncclDebugLogger_t log);
ncclResult_t listen_default(int dev, void* handle, void** listen_comm);
ncclResult_t connect_default(int dev, void* handle, void** send_comm);

}  // namespace adapter
}  // namespace nf

#define NF_EXPORT extern "C" __attribute__((visibility("default")))
