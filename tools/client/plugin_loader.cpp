#include "client/plugin_loader.h"

#include <dlfcn.h>
#include <strings.h>
#include <unistd.h>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nfc {
namespace {

template <typename T>
const T* as(const void* p) {
  return static_cast<const T*>(p);
}

// Calls member `m` with `args` on whichever table version is loaded (members of the same name).
#define NFC_DISPATCH(m, ...)                                   \
  switch (version_) {                                          \
    case 12: return as<ncclNet_v12_t>(table_)->m(__VA_ARGS__); \
    case 11: return as<ncclNet_v11_t>(table_)->m(__VA_ARGS__); \
    case 10: return as<ncclNet_v10_t>(table_)->m(__VA_ARGS__); \
    case 9: return as<ncclNet_v9_t>(table_)->m(__VA_ARGS__);   \
    case 8: return as<ncclNet_v8_t>(table_)->m(__VA_ARGS__);   \
    case 7: return as<ncclNet_v7_t>(table_)->m(__VA_ARGS__);   \
    default: return as<ncclNet_v6_t>(table_)->m(__VA_ARGS__);  \
  }

// The same for calls whose v10/v11 forms differ (handled before the macro): v9 down to v6.
#define NFC_DISPATCH_V9(m, ...)                               \
  switch (version_) {                                         \
    case 9: return as<ncclNet_v9_t>(table_)->m(__VA_ARGS__);  \
    case 8: return as<ncclNet_v8_t>(table_)->m(__VA_ARGS__);  \
    case 7: return as<ncclNet_v7_t>(table_)->m(__VA_ARGS__);  \
    default: return as<ncclNet_v6_t>(table_)->m(__VA_ARGS__); \
  }

template <typename P>
void copy_base(const P& p, NetProps* out) {
  out->name = p.name ? p.name : "";
  out->pci_path = p.pciPath ? p.pciPath : "";
  out->guid = p.guid;
  out->ptr_support = p.ptrSupport;
  out->speed = p.speed;
  out->port = p.port;
  out->latency = p.latency;
  out->max_comms = p.maxComms;
  out->max_recvs = p.maxRecvs;
}

int debug_level() {
  const char* v = getenv("NCCL_DEBUG");
  if (v == nullptr) return NCCL_LOG_WARN;
  if (strcasecmp(v, "TRACE") == 0) return NCCL_LOG_TRACE;
  if (strcasecmp(v, "INFO") == 0) return NCCL_LOG_INFO;
  if (strcasecmp(v, "NONE") == 0) return NCCL_LOG_NONE;
  return NCCL_LOG_WARN;
}

}  // namespace

namespace {
LogSink g_sink = nullptr;
}  // namespace

void set_log_sink(LogSink sink) { g_sink = sink; }

void stderr_logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                   const char* fmt, ...) {
  (void)flags;
  (void)file;
  (void)line;
  static const int wanted = debug_level();
  if (g_sink == nullptr && static_cast<int>(level) > wanted) return;
  char buf[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (g_sink != nullptr) {
    if (level == NCCL_LOG_WARN || level == NCCL_LOG_INFO) g_sink(level == NCCL_LOG_WARN, buf);
    return;
  }
  fprintf(stderr, "[pid %d] NCCL %s %s\n", static_cast<int>(getpid()),
          level == NCCL_LOG_WARN   ? "WARN"
          : level == NCCL_LOG_INFO ? "INFO"
                                   : "TRACE",
          buf);
}

NetPlugin::~NetPlugin() {
  // Never dlclose: the plugin's provider may have threads or atexit hooks of its own.
}

bool NetPlugin::load(const std::string& path, int version, std::string* err) {
  lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib_ == nullptr) {
    const char* e = dlerror();
    *err = "cannot load " + path + ": " + (e ? e : "unknown error");
    return false;
  }
  for (int v = 12; v >= 6; --v) {
    if (version != 0 && v != version) continue;
    std::string sym = "ncclNetPlugin_v" + std::to_string(v);
    if (void* t = dlsym(lib_, sym.c_str())) {
      table_ = t;
      version_ = v;
      return true;
    }
  }
  *err = path + " exports no " +
         (version ? "ncclNetPlugin_v" + std::to_string(version)
                  : std::string("ncclNetPlugin_v6..v12")) +
         " symbol: not an NCCL net plugin, or one too old for NCCL 2.28";
  return false;
}

const char* NetPlugin::name() const { return as<ncclNet_v6_t>(table_)->name; }

ncclResult_t NetPlugin::init() {
  switch (version_) {
    case 12:
      config_.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;
      return as<ncclNet_v12_t>(table_)->init(&ctx_, 0x1234, &config_, stderr_logger, prof_);
    case 11:
      // NCCL always passes a config (trafficClass undefined unless the application set one);
      // plugins may read it without a NULL check (the reference plugin does).
      config_.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;
      return as<ncclNet_v11_t>(table_)->init(&ctx_, 0x1234, &config_, stderr_logger, prof_);
    case 10: return as<ncclNet_v10_t>(table_)->init(stderr_logger, prof_);
    default: break;
  }
  NFC_DISPATCH_V9(init, stderr_logger);
}

ncclResult_t NetPlugin::finalize() {
  if (version_ < 11) return ncclSuccess;
  ncclResult_t r = version_ == 12 ? as<ncclNet_v12_t>(table_)->finalize(ctx_)
                                  : as<ncclNet_v11_t>(table_)->finalize(ctx_);
  ctx_ = nullptr;
  return r;
}

ncclResult_t NetPlugin::devices(int* ndev) { NFC_DISPATCH(devices, ndev); }

ncclResult_t NetPlugin::properties(int dev, NetProps* out) {
  ncclResult_t r;
  switch (version_) {
    case 12: {
      ncclNetProperties_v12_t p;
      if ((r = as<ncclNet_v12_t>(table_)->getProperties(dev, &p)) != ncclSuccess) return r;
      copy_base(p, out);
      out->max_p2p_bytes = p.maxP2pBytes;
      out->rail_id = p.railId;
      out->plane_id = p.planeId;
      return r;
    }
    case 11: {
      ncclNetProperties_v11_t p;
      if ((r = as<ncclNet_v11_t>(table_)->getProperties(dev, &p)) != ncclSuccess) return r;
      copy_base(p, out);
      out->max_p2p_bytes = p.maxP2pBytes;
      return r;
    }
    case 10: {
      ncclNetProperties_v10_t p;
      if ((r = as<ncclNet_v10_t>(table_)->getProperties(dev, &p)) != ncclSuccess) return r;
      copy_base(p, out);
      out->max_p2p_bytes = p.maxP2pBytes;
      return r;
    }
    case 9: {
      ncclNetProperties_v9_t p;
      if ((r = as<ncclNet_v9_t>(table_)->getProperties(dev, &p)) != ncclSuccess) return r;
      copy_base(p, out);
      out->max_p2p_bytes = p.maxP2pBytes;
      return r;
    }
    case 8: {
      ncclNetProperties_v8_t p;
      if ((r = as<ncclNet_v8_t>(table_)->getProperties(dev, &p)) != ncclSuccess) return r;
      copy_base(p, out);
      out->max_p2p_bytes = 1u << 30;  // what NCCL's v8 shim assumes
      return r;
    }
    case 7: {
      ncclNetProperties_v7_t p;
      if ((r = as<ncclNet_v7_t>(table_)->getProperties(dev, &p)) != ncclSuccess) return r;
      copy_base(p, out);
      out->max_p2p_bytes = 1u << 30;
      return r;
    }
    default: {
      ncclNetProperties_v6_t p;
      if ((r = as<ncclNet_v6_t>(table_)->getProperties(dev, &p)) != ncclSuccess) return r;
      copy_base(p, out);
      out->max_p2p_bytes = 1u << 30;
      return r;
    }
  }
}

ncclResult_t NetPlugin::listen(int dev, void* handle, void** comm) {
  if (version_ == 12) return as<ncclNet_v12_t>(table_)->listen(ctx_, dev, handle, comm);
  if (version_ == 11) return as<ncclNet_v11_t>(table_)->listen(ctx_, dev, handle, comm);
  if (version_ == 10) return as<ncclNet_v10_t>(table_)->listen(dev, handle, comm);
  NFC_DISPATCH_V9(listen, dev, handle, comm);
}

ncclResult_t NetPlugin::connect(int dev, void* handle, void** comm) {
  // NCCL hands a host plugin a pointer to a NULL device handle.
  switch (version_) {
    case 12: {
      ncclNetDeviceHandle_v12_t* dh = nullptr;
      return as<ncclNet_v12_t>(table_)->connect(ctx_, dev, handle, comm, &dh);
    }
    case 11: {
      ncclNetDeviceHandle_v11_t* dh = nullptr;
      return as<ncclNet_v11_t>(table_)->connect(ctx_, dev, handle, comm, &dh);
    }
    case 10: {
      ncclNetCommConfig_v10_t cfg;
      cfg.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;
      ncclNetDeviceHandle_v10_t* dh = nullptr;
      return as<ncclNet_v10_t>(table_)->connect(dev, &cfg, handle, comm, &dh);
    }
    case 9: {
      ncclNetDeviceHandle_v9_t* dh = nullptr;
      return as<ncclNet_v9_t>(table_)->connect(dev, handle, comm, &dh);
    }
    case 8: {
      ncclNetDeviceHandle_v8_t* dh = nullptr;
      return as<ncclNet_v8_t>(table_)->connect(dev, handle, comm, &dh);
    }
    case 7: {
      ncclNetDeviceHandle_v7_t* dh = nullptr;
      return as<ncclNet_v7_t>(table_)->connect(dev, handle, comm, &dh);
    }
    default: return as<ncclNet_v6_t>(table_)->connect(dev, handle, comm);
  }
}

ncclResult_t NetPlugin::accept(void* lc, void** comm) {
  switch (version_) {
    case 12: {
      ncclNetDeviceHandle_v12_t* dh = nullptr;
      return as<ncclNet_v12_t>(table_)->accept(lc, comm, &dh);
    }
    case 11: {
      ncclNetDeviceHandle_v11_t* dh = nullptr;
      return as<ncclNet_v11_t>(table_)->accept(lc, comm, &dh);
    }
    case 10: {
      ncclNetDeviceHandle_v10_t* dh = nullptr;
      return as<ncclNet_v10_t>(table_)->accept(lc, comm, &dh);
    }
    case 9: {
      ncclNetDeviceHandle_v9_t* dh = nullptr;
      return as<ncclNet_v9_t>(table_)->accept(lc, comm, &dh);
    }
    case 8: {
      ncclNetDeviceHandle_v8_t* dh = nullptr;
      return as<ncclNet_v8_t>(table_)->accept(lc, comm, &dh);
    }
    case 7: {
      ncclNetDeviceHandle_v7_t* dh = nullptr;
      return as<ncclNet_v7_t>(table_)->accept(lc, comm, &dh);
    }
    default: return as<ncclNet_v6_t>(table_)->accept(lc, comm);
  }
}

ncclResult_t NetPlugin::reg_mr(void* comm, void* data, size_t size, int type, void** mh) {
  if (version_ <= 7) {
    if (size > 0x7fffffff) return ncclInvalidArgument;
    if (version_ == 7)
      return as<ncclNet_v7_t>(table_)->regMr(comm, data, static_cast<int>(size), type, mh);
    return as<ncclNet_v6_t>(table_)->regMr(comm, data, static_cast<int>(size), type, mh);
  }
  switch (version_) {
    case 12: return as<ncclNet_v12_t>(table_)->regMr(comm, data, size, type, mh);
    case 11: return as<ncclNet_v11_t>(table_)->regMr(comm, data, size, type, mh);
    case 10: return as<ncclNet_v10_t>(table_)->regMr(comm, data, size, type, mh);
    case 9: return as<ncclNet_v9_t>(table_)->regMr(comm, data, size, type, mh);
    default: return as<ncclNet_v8_t>(table_)->regMr(comm, data, size, type, mh);
  }
}

ncclResult_t NetPlugin::reg_mr_dmabuf(void* comm, void* data, size_t size, int type,
                                      uint64_t offset, int fd, void** mh) {
  NFC_DISPATCH(regMrDmaBuf, comm, data, size, type, offset, fd, mh);
}

ncclResult_t NetPlugin::dereg_mr(void* comm, void* mh) { NFC_DISPATCH(deregMr, comm, mh); }

ncclResult_t NetPlugin::isend(void* comm, void* data, size_t size, int tag, void* mh, void** req) {
  switch (version_) {
    case 12: return as<ncclNet_v12_t>(table_)->isend(comm, data, size, tag, mh, phandle_, req);
    case 11: return as<ncclNet_v11_t>(table_)->isend(comm, data, size, tag, mh, phandle_, req);
    case 10: return as<ncclNet_v10_t>(table_)->isend(comm, data, size, tag, mh, phandle_, req);
    case 9: return as<ncclNet_v9_t>(table_)->isend(comm, data, size, tag, mh, req);
    default:
      if (size > 0x7fffffff) return ncclInvalidArgument;
      switch (version_) {
        case 8:
          return as<ncclNet_v8_t>(table_)->isend(comm, data, static_cast<int>(size), tag, mh, req);
        case 7:
          return as<ncclNet_v7_t>(table_)->isend(comm, data, static_cast<int>(size), tag, mh, req);
        default:
          return as<ncclNet_v6_t>(table_)->isend(comm, data, static_cast<int>(size), tag, mh, req);
      }
  }
}

ncclResult_t NetPlugin::irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhs,
                              void** req) {
  void* phs[NCCL_NET_MAX_REQUESTS];
  for (void*& p : phs) p = phandle_;
  // NCCL stores the hint into the request slot before the call (v9+; its v6-v8 shims clear it).
  if (optional_completion_ && n == 1 && version_ >= 9)
    *req = reinterpret_cast<void*>(static_cast<uintptr_t>(NCCL_NET_OPTIONAL_RECV_COMPLETION));
  switch (version_) {
    case 12:
      return as<ncclNet_v12_t>(table_)->irecv(comm, n, data, sizes, tags, mhs,
                                              phandle_ != nullptr || phandle_array_ ? phs : nullptr,
                                              req);
    case 11:
      return as<ncclNet_v11_t>(table_)->irecv(comm, n, data, sizes, tags, mhs,
                                              phandle_ != nullptr || phandle_array_ ? phs : nullptr,
                                              req);
    case 10:
      return as<ncclNet_v10_t>(table_)->irecv(comm, n, data, sizes, tags, mhs,
                                              phandle_ != nullptr || phandle_array_ ? phs : nullptr,
                                              req);
    case 9: return as<ncclNet_v9_t>(table_)->irecv(comm, n, data, sizes, tags, mhs, req);
    default: {
      int narrow[NCCL_NET_MAX_REQUESTS];
      if (n < 0 || n > NCCL_NET_MAX_REQUESTS) return ncclInvalidArgument;
      for (int i = 0; i < n; ++i) {
        if (sizes[i] > 0x7fffffff) return ncclInvalidArgument;
        narrow[i] = static_cast<int>(sizes[i]);
      }
      switch (version_) {
        case 8: return as<ncclNet_v8_t>(table_)->irecv(comm, n, data, narrow, tags, mhs, req);
        case 7: return as<ncclNet_v7_t>(table_)->irecv(comm, n, data, narrow, tags, mhs, req);
        default: return as<ncclNet_v6_t>(table_)->irecv(comm, n, data, narrow, tags, mhs, req);
      }
    }
  }
}

ncclResult_t NetPlugin::set_net_attr(const ncclNetAttr_v11_t& attr) {
  ncclNetAttr_v11_t a = attr;
  if (version_ == 12 && as<ncclNet_v12_t>(table_)->setNetAttr != nullptr)
    return as<ncclNet_v12_t>(table_)->setNetAttr(ctx_, &a);
  if (version_ == 11 && as<ncclNet_v11_t>(table_)->setNetAttr != nullptr)
    return as<ncclNet_v11_t>(table_)->setNetAttr(ctx_, &a);
  return ncclInvalidUsage;
}

ncclResult_t NetPlugin::iflush(void* comm, int n, void** data, int* sizes, void** mhs, void** req) {
  NFC_DISPATCH(iflush, comm, n, data, sizes, mhs, req);
}

ncclResult_t NetPlugin::test(void* req, int* done, int* sizes) {
  NFC_DISPATCH(test, req, done, sizes);
}
ncclResult_t NetPlugin::close_send(void* comm) { NFC_DISPATCH(closeSend, comm); }
ncclResult_t NetPlugin::close_recv(void* comm) { NFC_DISPATCH(closeRecv, comm); }
ncclResult_t NetPlugin::close_listen(void* comm) { NFC_DISPATCH(closeListen, comm); }

bool connect_pair(NetPlugin& p, int dev, void** send_comm, void** recv_comm, int timeout_ms,
                  std::string* err) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  memset(handle, 0, sizeof(handle));
  void* lc = nullptr;
  *send_comm = *recv_comm = nullptr;
  if (p.listen(dev, handle, &lc) != ncclSuccess || lc == nullptr) {
    *err = "listen failed";
    return false;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (*send_comm == nullptr || *recv_comm == nullptr) {
    if (*send_comm == nullptr && p.connect(dev, handle, send_comm) != ncclSuccess) {
      *err = "connect failed";
      break;
    }
    if (*recv_comm == nullptr && p.accept(lc, recv_comm) != ncclSuccess) {
      *err = "accept failed";
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      *err = "connect/accept did not finish in time";
      break;
    }
  }
  p.close_listen(lc);
  return *send_comm != nullptr && *recv_comm != nullptr;
}

}  // namespace nfc
