// NCCL 2.22-2.23 (net v9): size_t sizes, no profiler handles.
#include "api/adapter.h"

namespace nf {
namespace adapter {
namespace {

ncclResult_t get_properties_v9(int dev, ncclNetProperties_v9_t* props) {
  return get_properties_v9_on(dev, props);
}

ncclResult_t connect_v9(int dev, void* handle, void** send_comm, ncclNetDeviceHandle_v9_t** dc) {
  (void)dc;
  return connect_default(dev, handle, send_comm);
}

ncclResult_t accept_v9(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v9_t** dc) {
  (void)dc;
  return accept_any(listen_comm, recv_comm);
}

ncclResult_t isend_v9(void* comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  return R(api::isend(comm, data, size, tag, mhandle, request));
}

ncclResult_t irecv_v9(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                      void** request) {
  return R(api::irecv(comm, n, data, sizes, tags, mhandles, request));
}

}  // namespace
}  // namespace adapter
}  // namespace nf

using namespace nf::adapter;

NF_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    "fabric",  init_default, devices,       get_properties_v9, listen_default, connect_v9,
    accept_v9, reg_mr,       reg_mr_dmabuf, dereg_mr,          isend_v9,       irecv_v9,
    iflush,    test,         close_send,    close_recv,        close_listen,   nullptr,
    nullptr,   nullptr};
