// NCCL >= 2.30's net ABI: v11's calls; properties with eight virtual-device slots and the
// device's rail and plane (from the platform row or NCCL_FABRIC_RAIL_ID / _PLANE_ID; -1,
// NCCL_NET_ID_UNDEF, where nothing is known); and ncclTimeout for a peer that stopped answering
// (docs/nccl-abi.md, "Errors").
#include "api/adapter.h"

namespace nf {
namespace adapter {
namespace {

ncclResult_t init_v12(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config,
                      ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  (void)commId;
  (void)config;  // the traffic class: EFA has none to set
  return R12(api::init(ctx, nccl_logger(log), prof_hook(prof)));
}

ncclResult_t get_properties_v12(int dev, ncclNetProperties_v12_t* props) {
  DeviceProps d;
  Status s = api::get_properties(dev, &d);
  if (!ok(s)) return R12(s);
  fill_v9(dev, d, props);
  // NCCL reads no multi-request size (2.30.7 and master): one request per call, as NCCL asks.
  props->maxMultiRequestSize = 1;
  props->railId = static_cast<int16_t>(d.rail_id);
  props->planeId = static_cast<int16_t>(d.plane_id);
  return ncclSuccess;
}

ncclResult_t listen_v12(void* ctx, int dev, void* handle, void** listen_comm) {
  return R12(api::listen(ctx, dev, handle, listen_comm));
}

ncclResult_t connect_v12(void* ctx, int dev, void* handle, void** send_comm,
                         ncclNetDeviceHandle_v12_t** dev_comm) {
  (void)dev_comm;  // host plugin: no device offload
  return R12(api::connect(ctx, dev, handle, send_comm));
}

ncclResult_t accept_v12(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v12_t** dev_comm) {
  (void)dev_comm;
  return R12(api::accept(listen_comm, recv_comm));
}

ncclResult_t isend_v12(void* comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                       void** request) {
  return R12(api::isend(comm, data, size, tag, mhandle, phandle, request));
}

ncclResult_t irecv_v12(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                       void** phandles, void** request) {
  return R12(api::irecv(comm, n, data, sizes, tags, mhandles, phandles, request));
}

ncclResult_t iflush_v12(void* comm, int n, void** data, int* sizes, void** mhandles,
                        void** request) {
  return R12(api::iflush(comm, n, data, sizes, mhandles, request));
}

ncclResult_t test_v12(void* request, int* done, int* sizes) {
  return R12(api::test(request, done, sizes));
}

ncclResult_t finalize_v12(void* ctx) { return R12(api::finalize(ctx)); }

ncclResult_t set_net_attr_v12(void* ctx, ncclNetAttr_v12_t* attr) {
  if (attr == nullptr) return ncclInternalError;
  return R12(api::set_net_attr(ctx, net_attrs(attr)));
}

}  // namespace
}  // namespace adapter
}  // namespace nf

using namespace nf::adapter;

NF_EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {"fabric",
                                                   init_v12,
                                                   devices,
                                                   get_properties_v12,
                                                   listen_v12,
                                                   connect_v12,
                                                   accept_v12,
                                                   reg_mr,
                                                   reg_mr_dmabuf,
                                                   dereg_mr,
                                                   isend_v12,
                                                   irecv_v12,
                                                   iflush_v12,
                                                   test_v12,
                                                   close_send,
                                                   close_recv,
                                                   close_listen,
                                                   nullptr /*getDeviceMr*/,
                                                   nullptr /*irecvConsumed*/,
                                                   nullptr /*makeVDevice*/,
                                                   finalize_v12,
                                                   set_net_attr_v12};
