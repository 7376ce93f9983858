// NCCL 2.26-2.27 (net v10): one init per process; the traffic class comes with connect.
#include "api/adapter.h"

namespace nf {
namespace adapter {
namespace {

ncclResult_t init_v10(ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  return R(api::init_default(nccl_logger(log), prof_hook(prof)));
}

ncclResult_t get_properties_v10(int dev, ncclNetProperties_v10_t* props) {
  return get_properties_v9_on(dev, props);
}

ncclResult_t connect_v10(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** send_comm,
                         ncclNetDeviceHandle_v10_t** dev_comm) {
  (void)config;
  (void)dev_comm;
  return connect_default(dev, handle, send_comm);
}

ncclResult_t accept_v10(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v10_t** dev_comm) {
  (void)dev_comm;
  return accept_any(listen_comm, recv_comm);
}

ncclResult_t isend_v10(void* comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                       void** request) {
  return R(api::isend(comm, data, size, tag, mhandle, phandle, request));
}

ncclResult_t irecv_v10(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                       void** phandles, void** request) {
  return R(api::irecv(comm, n, data, sizes, tags, mhandles, phandles, request));
}

}  // namespace
}  // namespace adapter
}  // namespace nf

using namespace nf::adapter;

NF_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    "fabric",   init_v10, devices,       get_properties_v10, listen_default, connect_v10,
    accept_v10, reg_mr,   reg_mr_dmabuf, dereg_mr,           isend_v10,      irecv_v10,
    iflush,     test,     close_send,    close_recv,         close_listen,   nullptr,
    nullptr,    nullptr};
