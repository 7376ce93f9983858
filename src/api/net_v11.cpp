// NCCL 2.28.9's native net ABI: a context per communicator.
#include "api/adapter.h"

namespace nf {
namespace adapter {
namespace {

ncclResult_t init_v11(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,
                      ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  (void)commId;
  (void)config;
  return R(api::init(ctx, nccl_logger(log), prof_hook(prof)));
}

ncclResult_t get_properties_v11(int dev, ncclNetProperties_v11_t* props) {
  ncclResult_t r = get_properties_v9_on(dev, props);
  if (r == ncclSuccess) props->maxMultiRequestSize = 1;
  return r;
}

ncclResult_t listen_v11(void* ctx, int dev, void* handle, void** listen_comm) {
  return R(api::listen(ctx, dev, handle, listen_comm));
}

ncclResult_t connect_v11(void* ctx, int dev, void* handle, void** send_comm,
                         ncclNetDeviceHandle_v11_t** dev_comm) {
  (void)dev_comm;  // host plugin: no device offload
  return R(api::connect(ctx, dev, handle, send_comm));
}

ncclResult_t accept_v11(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v11_t** dev_comm) {
  (void)dev_comm;
  return accept_any(listen_comm, recv_comm);
}

ncclResult_t isend_v11(void* comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                       void** request) {
  return R(api::isend(comm, data, size, tag, mhandle, phandle, request));
}

ncclResult_t irecv_v11(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                       void** phandles, void** request) {
  return R(api::irecv(comm, n, data, sizes, tags, mhandles, phandles, request));
}

ncclResult_t finalize_v11(void* ctx) { return R(api::finalize(ctx)); }

ncclResult_t set_net_attr_v11(void* ctx, ncclNetAttr_v11_t* attr) {
  if (attr == nullptr) return ncclInternalError;
  return R(api::set_net_attr(ctx, net_attrs(attr)));
}

}  // namespace
}  // namespace adapter
}  // namespace nf

using namespace nf::adapter;

NF_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {"fabric",
                                                   init_v11,
                                                   devices,
                                                   get_properties_v11,
                                                   listen_v11,
                                                   connect_v11,
                                                   accept_v11,
                                                   reg_mr,
                                                   reg_mr_dmabuf,
                                                   dereg_mr,
                                                   isend_v11,
                                                   irecv_v11,
                                                   iflush,
                                                   test,
                                                   close_send,
                                                   close_recv,
                                                   close_listen,
                                                   nullptr /*getDeviceMr*/,
                                                   nullptr /*irecvConsumed*/,
                                                   nullptr /*makeVDevice*/,
                                                   finalize_v11,
                                                   set_net_attr_v11};
