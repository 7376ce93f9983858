#include "harness.h"

#include <dirent.h>
#include <unistd.h>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NFT_LSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define NFT_LSAN 1
#endif
#ifdef NFT_LSAN
#include <sanitizer/lsan_interface.h>
#endif

namespace nft {
namespace {

// Children leave through _exit, where LeakSanitizer does not look: ask it here. A leak fails the
// child like any other check.
int child_exit_code(int rc) {
#ifdef NFT_LSAN
  if (rc == 0 && __lsan_do_recoverable_leak_check() != 0) {
    fprintf(stderr, "[pid %d] LeakSanitizer found leaks\n", static_cast<int>(getpid()));
    return 9;
  }
#endif
  return rc;
}

using Clock = std::chrono::steady_clock;

// libfabric's shm names its region after the process id (/dev/shm/<pid>:0:0) and removes it when
// the endpoint closes. A child that was killed, or that used an ABI before v11 (no finalize: the
// endpoint lives until _exit), leaves it behind, and a later process that gets the same pid (CI
// forks thousands) meets it at fi_enable (-FI_EBUSY: the plugin WARNs and takes another endpoint,
// issue 33). The parent removes what its children left.
void remove_shm_of(int pid) {
  if (pid <= 0) return;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return;
  const std::string prefix = std::to_string(pid) + ":";
  while (dirent* e = readdir(d)) {
    if (strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0)
      unlink((std::string("/dev/shm/") + e->d_name).c_str());
  }
  closedir(d);
}

bool expired(Clock::time_point start, int timeout_ms) {
  return Clock::now() - start > std::chrono::milliseconds(timeout_ms);
}

}  // namespace

const std::vector<std::string>& real_providers() {
  static const std::vector<std::string> p = {"tcp;ofi_rxm", "shm"};
  return p;
}

PairOptions mock_options() {
  PairOptions opt;
  opt.provider = "mockefa";
  opt.env = {{"FI_PROVIDER", "mockefa"}};
  return opt;
}

std::string plugin_path() {
  const char* p = getenv("NF_PLUGIN_LIB");
  return p != nullptr ? p : ".libs/libnccl-net-fabric.so";
}

void fill(void* buf, size_t n, int rank, int msg) {
  unsigned char* b = static_cast<unsigned char*>(buf);
  for (size_t i = 0; i < n; ++i) b[i] = pattern(rank, msg, i);
}

size_t verify(const void* buf, size_t n, int rank, int msg) {
  const unsigned char* b = static_cast<const unsigned char*>(buf);
  for (size_t i = 0; i < n; ++i)
    if (b[i] != pattern(rank, msg, i)) return i;
  return SIZE_MAX;
}

int child_setup(const PairOptions& opt, nfc::NetPlugin* p) {
  if (!opt.provider.empty()) setenv("NCCL_FABRIC_PROVIDER", opt.provider.c_str(), 1);
  for (const auto& kv : opt.env) {
    if (kv.second.empty())
      unsetenv(kv.first.c_str());  // "" means: not set at all
    else
      setenv(kv.first.c_str(), kv.second.c_str(), 1);
  }
  if (opt.before_init) CHILD_CHECK(opt.before_init() == 0, "before_init");
  std::string err;
  CHILD_CHECK(p->load(plugin_path(), opt.abi_version, &err), "%s", err.c_str());
  p->set_profiler(opt.profiler);
  CHILD_CHECK(p->init() == ncclSuccess, "init failed on provider '%s'", opt.provider.c_str());
  int ndev = 0;
  CHILD_CHECK(p->devices(&ndev) == ncclSuccess && ndev >= 1, "no devices (%d)", ndev);
  return 0;
}

int mock_pair(nfc::NetPlugin& p, mockefa_api* api, void** send_comm, void** recv_comm) {
  if (api != nullptr)
    CHILD_CHECK(mockefa_load_api(getenv("NF_MOCKPROV_LIB"), api) == 0, "mock API from %s",
                getenv("NF_MOCKPROV_LIB") ? getenv("NF_MOCKPROV_LIB") : "(NF_MOCKPROV_LIB unset)");
  std::string err;
  CHILD_CHECK(nfc::connect_pair(p, 0, send_comm, recv_comm, kTimeoutMs, &err), "connect: %s",
              err.c_str());
  return 0;
}

int wait_request(nfc::NetPlugin& p, void* req, int* sizes, int timeout_ms) {
  const auto start = Clock::now();
  int done = 0;
  while (!done) {
    ncclResult_t r = p.test(req, &done, sizes);
    if (r != ncclSuccess) return static_cast<int>(r);
    if (!done && expired(start, timeout_ms)) return -1;
  }
  return 0;
}

int settle(nfc::NetPlugin& p, std::vector<void*>& reqs, std::vector<int>* sizes,
           std::vector<bool>* failed, int timeout_ms) {
  const auto start = Clock::now();
  sizes->assign(reqs.size(), -1);
  failed->assign(reqs.size(), false);
  std::vector<bool> fin(reqs.size(), false);
  size_t left = reqs.size();
  int errors = 0;
  while (left > 0) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (fin[i]) continue;
      int done = 0;
      int sz[64] = {0};
      if (p.test(reqs[i], &done, sz) != ncclSuccess) {
        fin[i] = true;
        (*failed)[i] = true;
        ++errors;
        --left;
      } else if (done) {
        fin[i] = true;
        (*sizes)[i] = sz[0];
        --left;
      }
    }
    if (left > 0 && expired(start, timeout_ms)) return -1;
  }
  return errors;
}

namespace {
std::mutex g_log_mu;
std::string g_log;
}  // namespace

void capture_log(bool warn, const char* text) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log += warn ? "WARN " : "INFO ";
  g_log += text;
  g_log += "\n";
}

std::string captured_log() {
  std::lock_guard<std::mutex> lock(g_log_mu);
  return g_log;
}

int wait_all(nfc::NetPlugin& p, std::vector<void*>& reqs, std::vector<int>* sizes, int timeout_ms) {
  std::vector<int> got;
  std::vector<bool> failed;
  const int errors = settle(p, reqs, &got, &failed, timeout_ms);
  if (errors < 0) return -1;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (failed[i]) return static_cast<int>(ncclSystemError);
  }
  if (sizes) *sizes = std::move(got);
  return 0;
}

int post_send(nfc::NetPlugin& p, void* comm, void* buf, size_t size, int tag, void* mh,
              void** req) {
  const auto start = Clock::now();
  for (;;) {
    *req = reinterpret_cast<void*>(0xdead);  // the plugin must always write it
    ncclResult_t r = p.isend(comm, buf, size, tag, mh, req);
    if (r != ncclSuccess) return static_cast<int>(r);
    if (*req != nullptr) return 0;
    if (expired(start, kTimeoutMs)) return -1;
  }
}

int post_recv(nfc::NetPlugin& p, void* comm, int n, void** bufs, size_t* sizes, int* tags,
              void** mhs, void** req) {
  const auto start = Clock::now();
  for (;;) {
    *req = reinterpret_cast<void*>(0x1);  // NCCL's optional-completion hint: must be overwritten
    ncclResult_t r = p.irecv(comm, n, bufs, sizes, tags, mhs, req);
    if (r != ncclSuccess) return static_cast<int>(r);
    if (*req != nullptr) return 0;
    if (expired(start, kTimeoutMs)) return -1;
  }
}

int post_recv1(nfc::NetPlugin& p, void* comm, void* buf, size_t cap, int tag, void* mh,
               void** req) {
  return post_recv(p, comm, 1, &buf, &cap, &tag, &mh, req);
}

int transfer1(nfc::NetPlugin& p, void* sc, void* sbuf, size_t size, void* smh, void* rc, void* rbuf,
              size_t cap, void* rmh, int tag, int* got) {
  void* rr = nullptr;
  void* sr = nullptr;
  if (post_recv1(p, rc, rbuf, cap, tag, rmh, &rr) != 0) return 1;
  if (post_send(p, sc, sbuf, size, tag, smh, &sr) != 0) return 2;
  std::vector<void*> reqs = {rr, sr};
  std::vector<int> sizes;
  if (wait_all(p, reqs, &sizes) != 0) return 3;
  *got = sizes[0];
  return 0;
}

namespace {

// Both sides listen `comms` times, swap handles, then poll connect and accept alternately.
int connect_side(const PairOptions& opt, Side& s) {
  const int n = opt.comms;
  std::vector<std::vector<char>> mine(n, std::vector<char>(NCCL_NET_HANDLE_MAXSIZE, 0));
  std::vector<std::vector<char>> theirs(n, std::vector<char>(NCCL_NET_HANDLE_MAXSIZE, 0));
  std::vector<void*> listens(n, nullptr);
  for (int i = 0; i < n; ++i) {
    CHILD_CHECK(s.plugin.listen(0, mine[i].data(), &listens[i]) == ncclSuccess && listens[i],
                "listen %d failed", i);
    CHILD_CHECK(s.oob.send(mine[i].data(), NCCL_NET_HANDLE_MAXSIZE, kTimeoutMs), "oob send");
  }
  for (int i = 0; i < n; ++i)
    CHILD_CHECK(s.oob.recv(theirs[i].data(), NCCL_NET_HANDLE_MAXSIZE, kTimeoutMs), "oob recv");
  s.send_comms.assign(n, nullptr);
  s.recv_comms.assign(n, nullptr);
  const auto start = Clock::now();
  for (;;) {
    bool all = true;
    for (int i = 0; i < n; ++i) {
      if (!s.send_comms[i]) {
        CHILD_CHECK(s.plugin.connect(0, theirs[i].data(), &s.send_comms[i]) == ncclSuccess,
                    "connect %d failed", i);
      }
      if (!s.recv_comms[i]) {
        CHILD_CHECK(s.plugin.accept(listens[i], &s.recv_comms[i]) == ncclSuccess,
                    "accept %d failed", i);
        if (s.recv_comms[i]) s.plugin.close_listen(listens[i]);
      }
      all = all && s.send_comms[i] && s.recv_comms[i];
    }
    if (all) break;
    CHILD_CHECK(!expired(start, kTimeoutMs), "connection setup timed out");
  }
  nfc::NetProps props;
  CHILD_CHECK(s.plugin.properties(0, &props) == ncclSuccess, "getProperties");
  s.max_recvs = props.max_recvs;
  return 0;
}

int close_side(const PairOptions& opt, Side& s) {
  // Both sides are done with data before anything closes: nothing is lost in flight.
  if (!opt.rank1_may_die) CHILD_CHECK(s.oob.barrier(kTimeoutMs), "final barrier");
  for (void* c : s.send_comms) CHILD_CHECK(s.plugin.close_send(c) == ncclSuccess, "closeSend");
  for (void* c : s.recv_comms) CHILD_CHECK(s.plugin.close_recv(c) == ncclSuccess, "closeRecv");
  CHILD_CHECK(s.plugin.finalize() == ncclSuccess, "finalize");
  return 0;
}

// One side's whole life in a child: set up, connect, run, close, leave.
[[noreturn]] void run_side(const PairOptions& opt, const std::function<int(Side&)>& body, int rank,
                           nfc::Oob oob) {
  Side s;
  s.rank = rank;
  s.oob = std::move(oob);
  int rc = child_setup(opt, &s.plugin);
  if (rc == 0) rc = connect_side(opt, s);
  if (rc == 0) rc = body(s);
  if (rc == 0) rc = close_side(opt, s);
  fflush(nullptr);
  _exit(child_exit_code(rc));
}

}  // namespace

int connect_more(Side& s, void** send_comm, void** recv_comm) {
  std::vector<char> mine(NCCL_NET_HANDLE_MAXSIZE, 0), theirs(NCCL_NET_HANDLE_MAXSIZE, 0);
  void* listen = nullptr;
  *send_comm = *recv_comm = nullptr;
  CHILD_CHECK(s.plugin.listen(0, mine.data(), &listen) == ncclSuccess && listen, "listen failed");
  CHILD_CHECK(s.oob.send(mine.data(), mine.size(), kTimeoutMs), "oob send");
  CHILD_CHECK(s.oob.recv(theirs.data(), theirs.size(), kTimeoutMs), "oob recv");
  const auto start = Clock::now();
  while (!*send_comm || !*recv_comm) {
    if (!*send_comm)
      CHILD_CHECK(s.plugin.connect(0, theirs.data(), send_comm) == ncclSuccess, "connect failed");
    if (!*recv_comm) {
      CHILD_CHECK(s.plugin.accept(listen, recv_comm) == ncclSuccess, "accept failed");
      if (*recv_comm) s.plugin.close_listen(listen);
    }
    CHILD_CHECK(!expired(start, kTimeoutMs), "connection setup timed out");
  }
  return 0;
}

bool run_pair(const PairOptions& opt, const std::function<int(Side&)>& body, std::string* log) {
  nfc::Oob a, b;
  // One socketpair joins the two children (rank 1 gets b at the fork, rank 0 a at the next).
  const int pid1 = nfc::socketpair_fork(&a, &b);
  if (pid1 == 0) run_side(opt, body, 1, std::move(b));
  fflush(nullptr);
  const int pid0 = fork();
  if (pid0 == 0) run_side(opt, body, 0, std::move(a));
  a = nfc::Oob();  // the parent closes its copy: a dead child then ends the other's waits
  const int rc0 = pid0 > 0 ? nfc::wait_child(pid0, kTimeoutMs * 2) : -1;
  int rc1 = pid1 > 0 ? nfc::wait_child(pid1, kTimeoutMs * 2) : -1;
  if (opt.rank1_may_die) rc1 = 0;
  remove_shm_of(pid0);
  remove_shm_of(pid1);
  if (rc0 != 0 || rc1 != 0) {
    *log = "provider '" + opt.provider + "' abi v" + std::to_string(opt.abi_version) +
           ": rank 0 exit " + std::to_string(rc0) + ", rank 1 exit " + std::to_string(rc1);
    return false;
  }
  return true;
}

bool run_single(const PairOptions& opt, const std::function<int(nfc::NetPlugin&)>& body,
                std::string* log) {
  fflush(nullptr);
  int pid = fork();
  if (pid == 0) {
    nfc::NetPlugin p;
    int rc = child_setup(opt, &p);
    if (rc == 0) rc = body(p);
    if (rc == 0 && p.finalize() != ncclSuccess) rc = 1;
    fflush(nullptr);
    _exit(child_exit_code(rc));
  }
  int rc = pid > 0 ? nfc::wait_child(pid, kTimeoutMs * 2) : -1;
  remove_shm_of(pid);
  if (rc != 0) {
    *log = "provider '" + opt.provider + "': child exit " + std::to_string(rc);
    return false;
  }
  return true;
}

}  // namespace nft
