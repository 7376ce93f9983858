// The transport over an NCCL net plugin, called the way NCCL 2.28 calls it (ABI semantics:
// docs §4.3-4.7): listen before the peer connects; connect and accept polled without blocking
// until they return a comm, the listen comm closed once it has served its connection; NULL
// requests retried with identical arguments; test() on receives with a zeroed int[64]; deregMr
// before the comms close.
#include <cstring>
#include <utility>

#include "perf/xport.h"

namespace nfp {

const char* result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    // NCCL >= 2.30 (net ABI v12): the peer stopped answering. NCCL 2.28's headers lack it.
    case static_cast<ncclResult_t>(8): return "ncclTimeout";
    default: return "unknown ncclResult_t";
  }
}

[[noreturn]] void plugin_fail(const char* call, ncclResult_t r, const std::string& who) {
  fail(who + " " + call + " returned " + result_name(r) + " (" +
       std::to_string(static_cast<int>(r)) + ")");
}

PluginXport::PluginXport(nfc::NetPlugin& p, std::string name, int rank, int comms, int slots)
    : p_(p),
      name_(std::move(name)),
      my_tag_(rank * kMaxGroup),
      peer_tag_((1 - rank) * kMaxGroup),
      listen_(static_cast<size_t>(comms), nullptr),
      send_(static_cast<size_t>(comms), nullptr),
      recv_(static_cast<size_t>(comms), nullptr),
      peer_handles_(static_cast<size_t>(comms)),
      slots_(static_cast<size_t>(slots)) {}

PluginXport::~PluginXport() {
  for (size_t c = 0; c < smr_.size(); ++c)
    if (smr_[c] != nullptr) p_.dereg_mr(send_[c], smr_[c]);
  for (size_t c = 0; c < rmr_.size(); ++c)
    if (rmr_[c] != nullptr) p_.dereg_mr(recv_[c], rmr_[c]);
  for (void* c : send_)
    if (c != nullptr) p_.close_send(c);
  for (void* c : recv_)
    if (c != nullptr) p_.close_recv(c);
  for (void* c : listen_)
    if (c != nullptr) p_.close_listen(c);
}

void PluginXport::connect(int dev, Chan& chan, Watch& w) {
  const size_t comms = send_.size();
  std::string mine(comms * NCCL_NET_HANDLE_MAXSIZE, '\0');
  for (size_t c = 0; c < comms; ++c) {
    ncclResult_t r = p_.listen(dev, &mine[c * NCCL_NET_HANDLE_MAXSIZE], &listen_[c]);
    if (r != ncclSuccess) plugin_fail("listen", r, name_);
    if (listen_[c] == nullptr) fail(name_ + " listen returned ncclSuccess but no listen comm");
  }
  const std::string what = name_ + " handle exchange";
  chan.send('H', mine, what);
  const std::string theirs = chan.recv('H', what);
  if (theirs.size() != mine.size())
    fail(what + ": rank " + std::to_string(1 - chan.rank()) + " sent " +
         std::to_string(theirs.size() / NCCL_NET_HANDLE_MAXSIZE) + " handles, expected " +
         std::to_string(comms));
  for (size_t c = 0; c < comms; ++c)
    memcpy(peer_handles_[c].data(), &theirs[c * NCCL_NET_HANDLE_MAXSIZE], NCCL_NET_HANDLE_MAXSIZE);

  w.begin(name_ + " connect/accept");
  for (;;) {
    bool all = true;
    for (size_t c = 0; c < comms; ++c) {
      // NCCL calls connect again with the same handle buffer until it returns a comm; a comm
      // returned with an error is closed (here by the destructor).
      if (send_[c] == nullptr) {
        ncclResult_t r = p_.connect(dev, peer_handles_[c].data(), &send_[c]);
        if (r != ncclSuccess) plugin_fail("connect", r, name_);
        if (send_[c] != nullptr) w.progressed();
      }
      if (recv_[c] == nullptr) {
        ncclResult_t r = p_.accept(listen_[c], &recv_[c]);
        if (r != ncclSuccess) plugin_fail("accept", r, name_);
        if (recv_[c] != nullptr) {
          p_.close_listen(listen_[c]);  // it has served its one connection
          listen_[c] = nullptr;
          w.progressed();
        }
      }
      all = all && send_[c] != nullptr && recv_[c] != nullptr;
    }
    if (all) break;
    w.tick();
  }
}

void PluginXport::reg(char* sbuf, char* rbuf, size_t len) {
  const size_t comms = send_.size();
  smr_.assign(comms, nullptr);
  rmr_.assign(comms, nullptr);
  for (size_t c = 0; c < comms; ++c) {
    ncclResult_t r = p_.reg_mr(send_[c], sbuf, len, NCCL_PTR_HOST, &smr_[c]);
    if (r != ncclSuccess) plugin_fail("regMr(send comm)", r, name_);
    r = p_.reg_mr(recv_[c], rbuf, len, NCCL_PTR_HOST, &rmr_[c]);
    if (r != ncclSuccess) plugin_fail("regMr(recv comm)", r, name_);
  }
}

Xport::Post PluginXport::post_send(int slot, int comm, char* buf, size_t len, int n) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.parts == 0) {
    s.send = true;
    s.n = n;
  }
  while (s.parts < n) {
    void* req = nullptr;
    ncclResult_t r =
        p_.isend(send_[static_cast<size_t>(comm)], buf + static_cast<size_t>(s.parts) * len, len,
                 my_tag_ + s.parts, smr_[static_cast<size_t>(comm)], &req);
    if (r != ncclSuccess) plugin_fail("isend", r, name_);
    if (req == nullptr) return Post::kRetry;
    s.reqs[s.parts] = req;
    s.done[s.parts] = false;
    ++s.parts;
  }
  return Post::kPosted;
}

Xport::Post PluginXport::post_recv(int slot, int comm, char* buf, size_t cap, int n) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  void* data[kMaxGroup];
  size_t sizes[kMaxGroup];
  int tags[kMaxGroup];
  void* mhs[kMaxGroup];
  for (int i = 0; i < n; ++i) {
    data[i] = buf + static_cast<size_t>(i) * cap;
    sizes[i] = cap;
    tags[i] = peer_tag_ + i;
    mhs[i] = rmr_[static_cast<size_t>(comm)];
  }
  void* req = nullptr;
  p_.set_optional_recv_completion(optional_ && n == 1);
  ncclResult_t r = p_.irecv(recv_[static_cast<size_t>(comm)], n, data, sizes, tags, mhs, &req);
  p_.set_optional_recv_completion(false);
  if (r != ncclSuccess) plugin_fail("irecv", r, name_);
  if (req == nullptr) return Post::kRetry;
  s.send = false;
  s.n = n;
  s.parts = 1;
  s.reqs[0] = req;
  s.done[0] = false;
  return Post::kPosted;
}

bool PluginXport::poll(int slot, size_t* lens) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  int sizes[NCCL_NET_MAX_REQUESTS * 2];  // NCCL passes int[64], zeroed
  bool all = true;
  for (int i = 0; i < s.parts; ++i) {
    if (s.done[i]) continue;
    memset(sizes, 0, sizeof(sizes));
    int done = 0;
    ncclResult_t r = p_.test(s.reqs[i], &done, sizes);
    if (r != ncclSuccess) {
      s.done[i] = true;  // the request is the plugin's again
      plugin_fail("test", r, name_);
    }
    if (!done) {
      all = false;
      continue;
    }
    s.done[i] = true;
    if (!s.send)
      for (int k = 0; k < s.n; ++k) lens[k] = static_cast<size_t>(sizes[k] < 0 ? 0 : sizes[k]);
  }
  if (!all) return false;
  if (s.send)
    for (int k = 0; k < s.n; ++k) lens[k] = 0;
  s.parts = 0;
  return true;
}

}  // namespace nfp
