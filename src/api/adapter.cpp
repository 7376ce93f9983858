#include "api/adapter.h"

namespace nf {
namespace adapter {
ncclResult_t isend_int(void* comm, void* data, int size, int tag, void* mhandle, void** request) {
  if (size < 0) {
    *request = nullptr;
    NF_WARN("isend: negative size %d", size);
    return ncclInternalError;
  }
  return R(api::isend(comm, data, static_cast<size_t>(size), tag, mhandle, request));
}

ncclResult_t irecv_int(void* comm, int n, void** data, int* sizes, int* tags, void** mhandles,
                       void** request) {
  *request = nullptr;
  if (n < 1 || n > 8) {
    NF_WARN("irecv: %d receives in one group (1..8)", n);
    return ncclInternalError;
  }
  size_t wide[8];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) {
      NF_WARN("irecv: negative size %d", sizes[i]);
      return ncclInternalError;
    }
    wide[i] = static_cast<size_t>(sizes[i]);
  }
  return R(api::irecv(comm, n, data, wide, tags, mhandles, request));
}

ncclResult_t regmr_int(void* comm, void* data, int size, int type, void** mhandle) {
  if (size < 0) {
    *mhandle = nullptr;
    NF_WARN("regMr: negative size %d", size);
    return ncclInternalError;
  }
  return R(api::reg_mr(comm, data, static_cast<size_t>(size), type, mhandle));
}

int call_profiler(void* fn, void** ehandle, int type, void* phandle, int64_t plugin_id, void* ext) {
  return static_cast<int>(
      reinterpret_cast<ncclProfilerCallback_t>(fn)(ehandle, type, phandle, plugin_id, ext));
}

ncclResult_t devices(int* ndev) { return R(api::devices(ndev)); }
ncclResult_t accept_any(void* listen_comm, void** recv_comm) {
  return R(api::accept(listen_comm, recv_comm));
}
ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return R(api::reg_mr(comm, data, size, type, mhandle));
}
ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle) {
  return R(api::reg_mr_dmabuf(comm, data, size, type, offset, fd, mhandle));
}
ncclResult_t dereg_mr(void* comm, void* mhandle) { return R(api::dereg_mr(comm, mhandle)); }
ncclResult_t iflush(void* comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return R(api::iflush(comm, n, data, sizes, mhandles, request));
}
ncclResult_t test(void* request, int* done, int* sizes) {
  return R(api::test(request, done, sizes));
}
ncclResult_t close_send(void* comm) { return R(api::close_send(comm)); }
ncclResult_t close_recv(void* comm) { return R(api::close_recv(comm)); }
ncclResult_t close_listen(void* comm) { return R(api::close_listen(comm)); }
ncclResult_t init_default(ncclDebugLogger_t log) { return R(api::init_default(nccl_logger(log))); }
ncclResult_t listen_default(int dev, void* handle, void** listen_comm) {
  return R(api::listen(nullptr, dev, handle, listen_comm));
}
ncclResult_t connect_default(int dev, void* handle, void** send_comm) {
  return R(api::connect(nullptr, dev, handle, send_comm));
}

}  // namespace adapter
}  // namespace nf
