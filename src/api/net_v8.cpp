// NCCL 2.19-2.21 (net v8): int message sizes, size_t registration.
#include "api/adapter.h"

namespace nf {
namespace adapter {
namespace {

ncclResult_t get_properties_v8(int dev, ncclNetProperties_v8_t* props) {
  DeviceProps d;
  Status s = api::get_properties(dev, &d);
  if (!ok(s)) return R(s);
  fill_base(d, props);
  fill_device_type(props);
  props->regIsGlobal = d.reg_is_global;
  return ncclSuccess;
}

ncclResult_t connect_v8(int dev, void* handle, void** send_comm, ncclNetDeviceHandle_v8_t** dc) {
  (void)dc;
  return connect_default(dev, handle, send_comm);
}

ncclResult_t accept_v8(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v8_t** dc) {
  (void)dc;
  return accept_any(listen_comm, recv_comm);
}

}  // namespace
}  // namespace adapter
}  // namespace nf

using namespace nf::adapter;

NF_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    "fabric",  init_default, devices,       get_properties_v8, listen_default, connect_v8,
    accept_v8, reg_mr,       reg_mr_dmabuf, dereg_mr,          isend_int,      irecv_int,
    iflush,    test,         close_send,    close_recv,        close_listen,   nullptr,
    nullptr};
