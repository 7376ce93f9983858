// The one internal API every NCCL version adapter (src/api/net_vX.cpp) forwards to.
// Pointers are opaque here exactly as they are to NCCL. Nothing throws across it.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/plugin.h"
#include "util/log.h"
#include "util/status.h"

namespace nf {
namespace api {

// v11: a context per call. v6-v10: init_default once per process, then ctx = nullptr everywhere.
Status init(void** ctx, LoggerFn log);
Status init_default(LoggerFn log);
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

Status isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request);
Status irecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags,
             void** mhandles, void** request);
Status iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
Status test(void* request, int* done, int* sizes);

Status close_send(void* send_comm);
Status close_recv(void* recv_comm);
Status close_listen(void* listen_comm);

}  // namespace api
}  // namespace nf
