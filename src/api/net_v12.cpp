// NCCL >= 2.30's net ABI: v11's calls, and properties with eight virtual-device slots and the
// device's rail and plane (NCCL_NET_ID_UNDEF: not known, so NCCL's rail-aware search and NIC
// merging leave the device alone, which is always safe).
#include "api/adapter.h"

namespace nf {
namespace adapter {
namespace {

ncclResult_t init_v12(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config,
                      ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  (void)commId;
  (void)config;
  (void)prof;  // traffic class and profiling: not used yet
  return R(api::init(ctx, nccl_logger(log)));
}

ncclResult_t get_properties_v12(int dev, ncclNetProperties_v12_t* props) {
  ncclResult_t r = get_properties_v9_on(dev, props);
  if (r != ncclSuccess) return r;
  props->maxMultiRequestSize = 1;
  props->railId = NCCL_NET_ID_UNDEF;
  props->planeId = NCCL_NET_ID_UNDEF;
  return ncclSuccess;
}

ncclResult_t listen_v12(void* ctx, int dev, void* handle, void** listen_comm) {
  return R(api::listen(ctx, dev, handle, listen_comm));
}

ncclResult_t connect_v12(void* ctx, int dev, void* handle, void** send_comm,
                         ncclNetDeviceHandle_v12_t** dev_comm) {
  (void)dev_comm;  // host plugin: no device offload
  return R(api::connect(ctx, dev, handle, send_comm));
}

ncclResult_t accept_v12(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v12_t** dev_comm) {
  (void)dev_comm;
  return accept_any(listen_comm, recv_comm);
}

ncclResult_t isend_v12(void* comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                       void** request) {
  (void)phandle;
  return R(api::isend(comm, data, size, tag, mhandle, request));
}

ncclResult_t irecv_v12(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                       void** phandles, void** request) {
  (void)phandles;
  return R(api::irecv(comm, n, data, sizes, tags, mhandles, request));
}

ncclResult_t finalize_v12(void* ctx) { return R(api::finalize(ctx)); }

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
                                                   iflush,
                                                   test,
                                                   close_send,
                                                   close_recv,
                                                   close_listen,
                                                   nullptr /*getDeviceMr*/,
                                                   nullptr /*irecvConsumed*/,
                                                   nullptr /*makeVDevice*/,
                                                   finalize_v12,
                                                   nullptr /*setNetAttr*/};
