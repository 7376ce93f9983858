// The one internal API every NCCL version adapter (src/api/net_vX.cpp) forwards to.
// Pointers are opaque here exactly as they are to NCCL. Nothing throws across it.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/plugin.h"
#include "core/profile.h"
#include "util/log.h"
#include "util/status.h"

namespace nf {
namespace api {

// v11: a context per call. v6-v10: init_default once per process, then ctx = nullptr everywhere.
// prof: NCCL's profiler callback (v10+), nothing before.
Status init(void** ctx, LoggerFn log, const ProfHook& prof = ProfHook());
Status init_default(LoggerFn log, const ProfHook& prof = ProfHook());
Status finalize(void* ctx);

Status devices(int* ndev);
Status get_properties(int dev, DeviceProps* props);

Status listen(void* ctx, int dev, void* handle, void** listen_comm);
Status connect(void* ctx, int dev, void* handle, void** send_comm);
Status accept(void* listen_comm, void** recv_comm);

Status reg_mr(void* comm, void* data, size_t size, int type, void** mhandle);
Status reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                     void** mhandle);
Status dereg_mr(void* comm, void* mhandle);

// What NCCL stores in *request before irecv when the completion is optional (LL, LL128; v9+).
constexpr uintptr_t kOptionalRecvCompletion = 0x1;

// phandle(s): NCCL's profiler handles (v10+; NULL from older NCCL and from bootstrap).
Status isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
             void** request);
Status irecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags,
             void** mhandles, void* const* phandles, void** request);
inline Status isend(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                    void** request) {
  return isend(send_comm, data, size, tag, mhandle, nullptr, request);
}
inline Status irecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags,
                    void** mhandles, void** request) {
  return irecv(recv_comm, n, data, sizes, tags, mhandles, nullptr, request);
}

// NCCL's hints for a context (setNetAttr, v11+): -1 (or UINT32_MAX) where unset.
struct NetAttrs {
  int send_peers_min, send_peers_max, send_flows_min, send_flows_max;
  int recv_peers_min, recv_peers_max, recv_flows_min, recv_flows_max;
  uint32_t op, algo, proto;
};
Status set_net_attr(void* ctx, const NetAttrs& a);
Status iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
Status test(void* request, int* done, int* sizes);

Status close_send(void* send_comm);
Status close_recv(void* recv_comm);
Status close_listen(void* listen_comm);

}  // namespace api
}  // namespace nf
