#include "core/api.h"

#include <cstring>
#include <new>

#include "core/connect.h"
#include "mem/gdr.h"

#include "core/comm.h"
#include "util/clock.h"

namespace nf {
namespace api {
namespace {

// No exception may cross the C ABI: allocation failures become an error NCCL sees.
template <typename F>
Status guarded(const char* what, F f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    NF_WARN("%s: out of memory", what);
    return Status::kSystemError;
  } catch (...) {
    NF_WARN("%s: unexpected internal failure", what);
    return Status::kInternalError;
  }
}

Status resolve_ctx(void* ctx, PluginCtx** out) {
  if (ctx == nullptr) {
    *out = default_ctx_if_any();
    if (*out == nullptr) {
      NF_WARN("called before init");
      return Status::kInternalError;
    }
    return Status::kOk;
  }
  PluginCtx* p = static_cast<PluginCtx*>(ctx);
  if (p->magic != kCtxMagic) {
    NF_WARN("not a context of this plugin: %p", ctx);
    return Status::kInternalError;
  }
  *out = p;
  return Status::kOk;
}

Comm* as_comm(void* p, CommRole role, const char* what) {
  Comm* c = static_cast<Comm*>(p);
  if (c == nullptr || c->magic != kCommMagic || c->role != role) {
    NF_WARN("%s: %p is not a %s comm of this plugin", what, p,
            role == CommRole::kSend   ? "send"
            : role == CommRole::kRecv ? "recv"
                                      : "listen");
    return nullptr;
  }
  return c;
}

Comm* as_data_comm(void* p, const char* what) {
  Comm* c = static_cast<Comm*>(p);
  if (c == nullptr || c->magic != kCommMagic || c->role == CommRole::kListen) {
    NF_WARN("%s: %p is not a send or recv comm of this plugin", what, p);
    return nullptr;
  }
  return c;
}

}  // namespace

Status init(void** ctx, LoggerFn log, const ProfHook& prof) {
  set_logger(log);
  *ctx = nullptr;
  return guarded("init", [&] {
    PluginCtx* p = nullptr;
    NF_CHECK(ctx_create(&p));
    p->prof = prof;
    *ctx = p;
    return Status::kOk;
  });
}

Status init_default(LoggerFn log, const ProfHook& prof) {
  set_logger(log);
  return guarded("init", [&] {
    PluginCtx* p = nullptr;
    NF_CHECK(default_ctx(&p));
    std::lock_guard<std::mutex> lock(p->mu);
    if (p->prof.fn == nullptr) p->prof = prof;
    return Status::kOk;
  });
}

Status set_net_attr(void* ctx, const NetAttrs& a) {
  PluginCtx* p = static_cast<PluginCtx*>(ctx);
  if (p == nullptr || p->magic != kCtxMagic) {
    NF_WARN("setNetAttr: %p is not a context of this plugin", ctx);
    return Status::kInternalError;
  }
  NetHints& h = *p->hints;
  const bool was_one = h.send_peers.load(std::memory_order_relaxed) > 0 &&
                       h.send_flows.load(std::memory_order_relaxed) > 0;
  h.send_peers.store(a.send_peers_max, std::memory_order_relaxed);
  h.send_flows.store(a.send_flows_max, std::memory_order_relaxed);
  h.recv_peers.store(a.recv_peers_max, std::memory_order_relaxed);
  h.recv_flows.store(a.recv_flows_max, std::memory_order_relaxed);
  h.op.store(a.op, std::memory_order_relaxed);
  h.algo.store(a.algo, std::memory_order_relaxed);
  h.proto.store(a.proto, std::memory_order_relaxed);
  // NCCL calls it at every connect and whenever an operation's hints differ from the last: the
  // first few calls of a context are logged, the rest only at TRACE.
  const int64_t flows = static_cast<int64_t>(a.send_peers_max) * a.send_flows_max;
  const bool now_one = a.send_peers_max > 0 && a.send_flows_max > 0;
  std::lock_guard<std::mutex> lock(p->mu);
  if (p->attr_calls++ < 4 || was_one != now_one)
    NF_INFO(kSubsysNet,
            "setNetAttr: send peers %d..%d x flows %d..%d, recv peers %d..%d x flows %d..%d, op "
            "0x%x algo 0x%x proto 0x%x; %s",
            a.send_peers_min, a.send_peers_max, a.send_flows_min, a.send_flows_max,
            a.recv_peers_min, a.recv_peers_max, a.recv_flows_min, a.recv_flows_max, a.op, a.algo,
            a.proto,
            !h.enabled ? "ignored (NCCL_FABRIC_NET_ATTR=0)"
            : now_one  ? (std::string("RDMA messages of a connection with fewer rails than ") +
                         std::to_string(flows) + " concurrent flows stay on one rail each")
                            .c_str()
                      : "messages are cut over every rail (no flow count given)");
  return Status::kOk;
}

Status finalize(void* ctx) {
  if (ctx == nullptr) return Status::kOk;  // NCCL 2.28.9 finalizes after a failed init too
  PluginCtx* p = static_cast<PluginCtx*>(ctx);
  if (p->magic != kCtxMagic) {
    NF_WARN("finalize: %p is not a context of this plugin", ctx);
    return Status::kInternalError;
  }
  ctx_destroy(p);
  return Status::kOk;
}

Status devices(int* ndev) {
  *ndev = device_count();
  return Status::kOk;
}

Status get_properties(int dev, DeviceProps* props) { return device_props(dev, props); }

Status listen(void* ctx, int dev, void* handle, void** listen_comm) {
  *listen_comm = nullptr;
  return guarded("listen", [&] {
    PluginCtx* p = nullptr;
    NF_CHECK(resolve_ctx(ctx, &p));
    ConnectEnv env;
    NF_CHECK(device_env(*p, dev, &env));
    std::unique_ptr<Comm> l;
    NF_CHECK(comm_listen(env, handle, &l));
    *listen_comm = l.release();
    return Status::kOk;
  });
}

Status connect(void* ctx, int dev, void* handle, void** send_comm) {
  *send_comm = nullptr;
  return guarded("connect", [&] {
    PluginCtx* p = nullptr;
    NF_CHECK(resolve_ctx(ctx, &p));
    Comm* c = nullptr;
    {
      std::lock_guard<std::mutex> lock(p->mu);
      // Connects NCCL stopped polling (an abort, a failed peer) would otherwise stay until the
      // context goes, which for the v6-v10 default context is never: one past twice the connect
      // timeout is abandoned, and closed here.
      const uint64_t stale =
          2ull * static_cast<uint64_t>(p->params.get_int(ParamId::kConnectTimeout)) * 1000000000ull;
      const uint64_t now = now_ns();
      for (auto it = p->pending.begin(); it != p->pending.end();) {
        if (it->first != handle && now - it->second->started_ns > stale)
          it = p->pending.erase(it);
        else
          ++it;
      }
      auto it = p->pending.find(handle);
      // The same buffer with other contents is a new connect: the old one was abandoned.
      if (it != p->pending.end() && memcmp(&it->second->handle, handle, sizeof(WireHandle)) != 0)
        p->pending.erase(it), it = p->pending.end();
      if (it != p->pending.end()) c = it->second.get();
    }
    if (c == nullptr) {
      ConnectEnv env;
      NF_CHECK(device_env(*p, dev, &env));
      std::unique_ptr<Comm> fresh;
      NF_CHECK(comm_connect_start(env, handle, &fresh));
      c = fresh.get();
      std::lock_guard<std::mutex> lock(p->mu);
      p->pending[handle] = std::move(fresh);
    }
    bool done = false;
    Status s = comm_connect_poll(*c, p->params, &done);
    if (!ok(s) || done) {
      std::lock_guard<std::mutex> lock(p->mu);
      auto it = p->pending.find(handle);
      if (ok(s)) {
        *send_comm = it->second.release();
      }
      p->pending.erase(it);  // a failed connect is closed here
    }
    return s;
  });
}

Status accept(void* listen_comm, void** recv_comm) {
  *recv_comm = nullptr;
  Comm* l = as_comm(listen_comm, CommRole::kListen, "accept");
  if (l == nullptr) return Status::kInternalError;
  return guarded("accept", [&] {
    std::unique_ptr<Comm> rc;
    NF_CHECK(comm_accept(*l, l->params, &rc));
    *recv_comm = rc.release();
    return Status::kOk;
  });
}

namespace {

// regMr and regMrDmaBuf: what the memory is, checked against what NCCL says it is.
Status register_for_nccl(Comm& c, void* data, size_t size, int type, int fd, uint64_t offset,
                         void** mhandle, const char* who) {
  PtrInfo info;
  MemSpec spec;
  Domain& dom = c.ep->domain();
  if (type == kPtrCuda) {
    NF_CHECK(check_gpu_buffer(dom, data, size, fd, offset, who, &info, &spec));
  } else if (type != kPtrHost) {
    NF_WARN("%s: unknown memory type %d (NCCL_PTR_HOST is 1, NCCL_PTR_CUDA 2)", who, type);
    return Status::kInternalError;
  }
  return guarded(who, [&] {
    MemHandle* mh = nullptr;
    NF_CHECK(comm_reg_mr(c, data, size, info, spec, &mh));
    *mhandle = mh;
    return Status::kOk;
  });
}

}  // namespace

Status reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
  *mhandle = nullptr;
  Comm* c = as_data_comm(comm, "regMr");
  if (c == nullptr) return Status::kInternalError;
  return register_for_nccl(*c, data, size, type, -1, 0, mhandle, "regMr");
}

Status reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                     void** mhandle) {
  *mhandle = nullptr;
  Comm* c = as_data_comm(comm, "regMrDmaBuf");
  if (c == nullptr) return Status::kInternalError;
  if (type != kPtrCuda || fd < 0) {
    NF_WARN(
        "regMrDmaBuf: type %d with fd %d: only GPU memory (NCCL_PTR_CUDA) with an open "
        "DMA-BUF fd is registered this way",
        type, fd);
    return Status::kInternalError;
  }
  return register_for_nccl(*c, data, size, type, fd, offset, mhandle, "regMrDmaBuf");
}

Status dereg_mr(void* comm, void* mhandle) {
  Comm* c = as_data_comm(comm, "deregMr");
  MemHandle* mh = static_cast<MemHandle*>(mhandle);
  if (c == nullptr) return Status::kInternalError;
  if (mh == nullptr || mh->magic != kMrMagic) {
    NF_WARN("deregMr: %p is not a registration of this plugin", mhandle);
    return Status::kInternalError;
  }
  return comm_dereg_mr(*c, mh);
}

Status isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
             void** request) {
  Comm* c = static_cast<Comm*>(send_comm);
  *request = nullptr;
  if (__builtin_expect(c == nullptr || c->magic != kCommMagic || c->role != CommRole::kSend, 0)) {
    as_comm(send_comm, CommRole::kSend, "isend");
    return Status::kInternalError;
  }
  if (__builtin_expect(size > c->max_msg_size, 0)) {
    NF_WARN("isend of %zu bytes to %s exceeds the largest message (maxP2pBytes: %llu bytes)", size,
            c->peer_name.c_str(), static_cast<unsigned long long>(c->max_msg_size));
    return Status::kInvalidUsage;
  }
  // Messages pair with receives per tag: an isend of another tag may come between a NULL answer
  // and its retry (the reference plugin's eager_multirecv test does that); one of the same tag
  // that is another message means the NULL-answered one was abandoned.
  if (__builtin_expect(c->null_open, 0) && tag == c->null_tag) {
    c->null_open = false;
    if ((data != c->null_data || size != c->null_size) && !c->null_warned) {
      c->null_warned = true;
      NF_WARN(
          "isend of %zu bytes (tag %d) to %s follows an isend of %zu bytes of the same tag that "
          "was answered NULL and not retried: a NULL answer posted nothing, so that message is "
          "not sent, and the peer's receives of the tag pair with its messages in the order "
          "their isends were accepted. NCCL retries a NULL-answered isend with the same "
          "arguments; a caller that does not shifts every later message of the tag by one "
          "receive (docs/troubleshooting.md#null-isend; said once per comm)",
          size, tag, c->peer_name.c_str(), c->null_size);
    }
  }
  Request* r = nullptr;
  // The request taken next asks the profiler (profile.h): it needs NCCL's handle and the send.
  const bool prof = c->prof_gate == 1;
  if (__builtin_expect(prof, 0)) {
    c->cur_phandle = phandle;
    c->cur_bytes = size;
    c->cur_tag = tag;
  }
  Status s = c->protocol->isend(*c, data, size, tag, static_cast<MemHandle*>(mhandle), &r);
  if (__builtin_expect(prof, 0)) c->cur_phandle = nullptr;
  if (__builtin_expect(c->prof_wait_eh != nullptr, 0) && (r != nullptr || !ok(s))) {
    std::lock_guard<TicketLock> lock(c->sep->mu);
    prof_wait_stop(*c);
  }
  if (__builtin_expect(r == nullptr, 0) && ok(s)) {
    c->null_open = true;
    c->null_data = data;
    c->null_size = size;
    c->null_tag = tag;
  }
  *request = r;
  return s;
}

Status irecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags,
             void** mhandles, void* const* phandles, void** request) {
  Comm* c = static_cast<Comm*>(recv_comm);
  // NCCL's hint (LL, LL128): it will read the data's own flags, the completion is optional.
  const bool optional = *request == reinterpret_cast<void*>(kOptionalRecvCompletion);
  *request = nullptr;  // also overwrites NCCL's 0x1 hint
  if (__builtin_expect(c == nullptr || c->magic != kCommMagic || c->role != CommRole::kRecv, 0)) {
    as_comm(recv_comm, CommRole::kRecv, "irecv");
    return Status::kInternalError;
  }
  if (__builtin_expect(n < 1 || n > kMaxGroup || n > c->max_recvs, 0)) {
    NF_WARN("irecv: %d receives in one group; this device offers 1..%d", n, c->max_recvs);
    return Status::kInternalError;
  }
  Request* r = nullptr;
  MemHandle* const* mhs = reinterpret_cast<MemHandle* const*>(mhandles);
  const bool prof = c->prof_gate == 1;
  if (__builtin_expect(prof, 0)) {
    c->cur_phandle = phandles != nullptr ? phandles[0] : nullptr;
    uint64_t total = 0;
    for (int i = 0; i < n; ++i) total += sizes[i];
    c->cur_bytes = total;
    c->cur_tag = tags != nullptr ? tags[0] : -1;
  }
  if (__builtin_expect(optional, 0)) c->cur_optional = n == 1;
  Status s = c->protocol->irecv(*c, n, data, sizes, tags, mhs, &r);
  if (__builtin_expect(prof, 0)) c->cur_phandle = nullptr;
  if (__builtin_expect(optional, 0)) c->cur_optional = false;
  *request = r;
  return s;
}

Status iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  *request = nullptr;  // NULL: nothing to wait for
  Comm* c = as_comm(recv_comm, CommRole::kRecv, "iflush");
  if (c == nullptr) return Status::kInternalError;
  if (!c->params.get_bool(ParamId::kFlush) || n < 1 || n > kMaxGroup || data == nullptr ||
      sizes == nullptr || mhandles == nullptr)
    return Status::kOk;
  // One read orders every PCIe write before it: the last non-empty GPU buffer is enough.
  for (int i = n - 1; i >= 0; --i) {
    MemHandle* mh = static_cast<MemHandle*>(mhandles[i]);
    if (sizes[i] <= 0 || mh == nullptr) continue;
    if (mh->magic != kMrMagic) {
      NF_WARN("iflush: mhandle %p is not a registration of this plugin", mhandles[i]);
      return Status::kInternalError;
    }
    if (mh->reg.kind == MemKind::kHost) return Status::kOk;  // host memory: coherent already
    Request* r = nullptr;
    NF_CHECK(comm_iflush(*c, data[i], mh, &r));
    *request = r;
    return Status::kOk;
  }
  return Status::kOk;
}

Status test(void* request, int* done, int* sizes) {
  Request* r = static_cast<Request*>(request);
  if (__builtin_expect(r == nullptr || r->magic != kReqMagic, 0)) {
    NF_WARN("test: %p is not a request in flight (already completed, or not ours)", request);
    *done = 0;
    return Status::kInternalError;
  }
  return request_test(r, done, sizes);
}

Status close_send(void* send_comm) {
  Comm* c = as_comm(send_comm, CommRole::kSend, "closeSend");
  if (c == nullptr) return Status::kInternalError;
  delete c;
  return Status::kOk;
}

Status close_recv(void* recv_comm) {
  Comm* c = as_comm(recv_comm, CommRole::kRecv, "closeRecv");
  if (c == nullptr) return Status::kInternalError;
  delete c;
  return Status::kOk;
}

Status close_listen(void* listen_comm) {
  Comm* c = as_comm(listen_comm, CommRole::kListen, "closeListen");
  if (c == nullptr) return Status::kInternalError;
  delete c;
  return Status::kOk;
}

}  // namespace api
}  // namespace nf
