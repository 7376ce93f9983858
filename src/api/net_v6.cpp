// NCCL 2.9-2.11 (net v6), the oldest version 2.28.9 still loads.
#include "api/adapter.h"

namespace nf {
namespace adapter {
namespace {

ncclResult_t get_properties_v6(int dev, ncclNetProperties_v6_t* props) {
  DeviceProps d;
  Status s = api::get_properties(dev, &d);
  if (!ok(s)) return R(s);
  fill_base(d, props);
  return ncclSuccess;
}

}  // namespace
}  // namespace adapter
}  // namespace nf

using namespace nf::adapter;

NF_EXPORT const ncclNet_v6_t ncclNetPlugin_v6 = {
    "fabric",   init_default, devices,       get_properties_v6, listen_default, connect_default,
    accept_any, regmr_int,    reg_mr_dmabuf, dereg_mr,          isend_int,      irecv_int,
    iflush,     test,         close_send,    close_recv,        close_listen};
