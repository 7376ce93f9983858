// Loads any NCCL net plugin (ours or another) and calls it through its ABI, v6 to v12, the way
// NCCL 2.28.9 does: the newest symbol wins unless a version is asked for.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "nccl/net.h"

namespace nfc {

// Version-independent view of ncclNetProperties_vX_t.
struct NetProps {
  std::string name;
  std::string pci_path;
  uint64_t guid = 0;
  int ptr_support = 0;
  int speed = 0;
  int port = 0;
  float latency = 0;
  int max_comms = 0;
  int max_recvs = 1;
  size_t max_p2p_bytes = 0;
  int rail_id = -1;  // v12: NCCL_NET_ID_UNDEF when not known, and before v12
  int plane_id = -1;
};

// Where the plugin's log goes: by default stderr, filtered by NCCL_DEBUG; with a sink, every WARN
// and INFO line goes to it instead (a tool that reads what the plugin says about itself).
using LogSink = void (*)(bool warn, const char* text);
void set_log_sink(LogSink sink);

class NetPlugin {
 public:
  NetPlugin() = default;
  ~NetPlugin();
  NetPlugin(const NetPlugin&) = delete;
  NetPlugin& operator=(const NetPlugin&) = delete;

  // version 0: the newest the library exports. On failure *err says why (dlerror, missing symbol).
  bool load(const std::string& path, int version, std::string* err);
  int version() const { return version_; }
  const char* name() const;

  ncclResult_t init();      // v11+: a context of our own; older: the process-wide init
  ncclResult_t finalize();  // v11+; a no-op before
  ncclResult_t devices(int* ndev);
  ncclResult_t properties(int dev, NetProps* out);
  ncclResult_t listen(int dev, void* handle, void** comm);
  ncclResult_t connect(int dev, void* handle, void** comm);
  ncclResult_t accept(void* listen_comm, void** comm);
  ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mh);
  ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                             void** mh);
  ncclResult_t dereg_mr(void* comm, void* mh);
  ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mh, void** req);
  ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhs,
                     void** req);
  ncclResult_t iflush(void* comm, int n, void** data, int* sizes, void** mhs, void** req);
  ncclResult_t test(void* req, int* done, int* sizes);
  ncclResult_t close_send(void* comm);
  ncclResult_t close_recv(void* comm);
  ncclResult_t close_listen(void* comm);

  // Only for tests that check the table itself.
  const void* table() const { return table_; }

  // As NCCL >= 2.23 does: the profiler callback init hands over (v10+; set before init), and the
  // handle each isend/irecv passes (every buffer of a receive gets the same one).
  void set_profiler(ncclProfilerCallback_t cb) { prof_ = cb; }
  void set_phandle(void* ph) { phandle_ = ph; }
  // irecv gets an array of handles even when they are NULL (NCCL 2.28's proxy always passes one);
  // off: NULL for the array when there is no handle.
  void set_phandle_array(bool on) { phandle_array_ = on; }
  // As NCCL does for LL/LL128: *request preset to NCCL_NET_OPTIONAL_RECV_COMPLETION before a
  // single-buffer irecv (v9+).
  void set_optional_recv_completion(bool on) { optional_completion_ = on; }
  // setNetAttr (v11+); ncclInvalidUsage where the version or the plugin has none.
  ncclResult_t set_net_attr(const ncclNetAttr_v11_t& attr);

 private:
  void* lib_ = nullptr;
  const void* table_ = nullptr;
  int version_ = 0;
  void* ctx_ = nullptr;
  ncclNetCommConfig_v11_t config_{};  // what v11 init gets: it must outlive the context
  ncclProfilerCallback_t prof_ = nullptr;
  void* phandle_ = nullptr;
  bool phandle_array_ = false;
  bool optional_completion_ = false;
};

// A logger with ncclDebugLogger_t's shape that prints like NCCL does (honours NCCL_DEBUG).
void stderr_logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                   const char* fmt, ...);

// Drives connect and accept in one thread until both are done, as NCCL's GDR check does:
// bounded by timeout_ms. Returns false with *err on failure or timeout.
bool connect_pair(NetPlugin& p, int dev, void** send_comm, void** recv_comm, int timeout_ms,
                  std::string* err);

}  // namespace nfc
