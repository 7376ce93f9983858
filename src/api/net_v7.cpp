// NCCL 2.12-2.18 (net v7): int registration sizes; device handles appear.
#include "api/adapter.h"

namespace nf {
namespace adapter {
namespace {

ncclResult_t get_properties_v7(int dev, ncclNetProperties_v7_t* props) {
  DeviceProps d;
  Status s = api::get_properties(dev, &d);
  if (!ok(s)) return R(s);
  fill_base(d, props);
  fill_device_type(props);
  return ncclSuccess;
}

ncclResult_t connect_v7(int dev, void* handle, void** send_comm, ncclNetDeviceHandle_v7_t** dc) {
  (void)dc;
  return connect_default(dev, handle, send_comm);
}

ncclResult_t accept_v7(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v7_t** dc) {
  (void)dc;
  return accept_any(listen_comm, recv_comm);
}

}  // namespace
}  // namespace adapter
}  // namespace nf

using namespace nf::adapter;

NF_EXPORT const ncclNet_v7_t ncclNetPlugin_v7 = {
    "fabric",  init_default, devices,       get_properties_v7, listen_default, connect_v7,
    accept_v7, regmr_int,    reg_mr_dmabuf, dereg_mr,          isend_int,      irecv_int,
    iflush,    test,         close_send,    close_recv,        close_listen,   nullptr,
    nullptr};
