// Helpers for the mock provider's own tests: RAII over the libfabric objects of one endpoint,
// bounded CQ polling, scoped environment variables and the mock's exported API.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mockefa.h"

namespace mt {

constexpr uint32_t kApi = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
// Every wait in these tests is bounded by this many CQ reads: the mock needs a handful.
constexpr int kMaxPolls = 500;
constexpr int kMrAll = FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
constexpr uint64_t kCaps = FI_MSG | FI_TAGGED | FI_RMA | FI_DIRECTED_RECV;

// Sets environment variables for one scope and puts the old values back.
class Env {
 public:
  Env() = default;
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;
  ~Env() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second)
        setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        unsetenv(it->first.c_str());
    }
  }
  Env& set(const char* key, const std::string& value) {
    const char* old = std::getenv(key);
    saved_.emplace_back(key, old ? std::optional<std::string>(old) : std::nullopt);
    setenv(key, value.c_str(), 1);
    return *this;
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

struct InfoFree {
  void operator()(fi_info* i) const { fi_freeinfo(i); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoFree>;

inline void ensure_provider_path() {
  // `make check` exports FI_PROVIDER_PATH; by hand, NF_MOCKPROV_LIB alone is enough.
  if (std::getenv("FI_PROVIDER_PATH")) return;
  const char* lib = std::getenv("NF_MOCKPROV_LIB");
  if (!lib) return;
  std::string dir(lib);
  dir = dir.substr(0, dir.find_last_of('/'));
  setenv("FI_PROVIDER_PATH", dir.c_str(), 1);
}

inline InfoPtr make_hints(uint64_t caps = kCaps, int mr_mode = kMrAll) {
  fi_info* h = fi_allocinfo();
  h->caps = caps;
  h->ep_attr->type = FI_EP_RDM;
  h->domain_attr->mr_mode = mr_mode;
  h->fabric_attr->prov_name = strdup("mockefa");
  return InfoPtr(h);
}

inline InfoPtr getinfo(const fi_info* hints, int* rc = nullptr, uint32_t api = kApi) {
  ensure_provider_path();
  fi_info* out = nullptr;
  int r = fi_getinfo(api, nullptr, nullptr, 0, hints, &out);
  if (rc) *rc = r;
  return InfoPtr(r == 0 ? out : nullptr);
}

// The newest API version fi_getinfo can really be asked for here: libfabric refuses a version
// newer than the library (-FI_ENOSYS) and skips a provider whose fi_version (the headers it was
// built against, the same as ours) is older than the version asked for.
inline uint32_t max_api() {
  const uint32_t lib = fi_version();
  return lib < kApi ? lib : kApi;
}

// An fi_info as an application asking fi_getinfo for `api` gets it. When `api` is newer than
// max_api() (1.18 or 1.20 on Debian's 1.17), fi_getinfo is asked at max_api() and `api` is then
// written into each fabric_attr->api_version: that field is what libfabric's core hands the
// provider's fi_fabric (it copies the requested version there), so the mock behaves as under a
// newer core. *stamped tells which way it went.
inline InfoPtr getinfo_at(const fi_info* hints, uint32_t api, bool* stamped = nullptr) {
  const bool stamp = api > max_api();
  if (stamped) *stamped = stamp;
  InfoPtr info = getinfo(hints, nullptr, stamp ? max_api() : api);
  if (info && stamp)
    for (fi_info* i = info.get(); i; i = i->next) i->fabric_attr->api_version = api;
  return info;
}

inline const mockefa_api& api() {
  static mockefa_api a = [] {
    InfoPtr hints = make_hints();
    InfoPtr info = getinfo(hints.get());  // makes libfabric load its DL providers
    mockefa_api loaded{};
    std::string path;
    if (const char* lib = std::getenv("NF_MOCKPROV_LIB"))
      path = lib;
    else if (const char* dir = std::getenv("FI_PROVIDER_PATH"))
      path = std::string(dir) + "/libmockefa-fi.so";
    if (mockefa_load_api(path.c_str(), &loaded) != 0) {
      FAIL("cannot reach the mock's API at '" << path
                                              << "': set NF_MOCKPROV_LIB or FI_PROVIDER_PATH");
    }
    return loaded;
  }();
  return a;
}

inline mockefa_counters counters() {
  mockefa_counters c{};
  api().get_counters(&c);
  return c;
}
inline uint64_t violations(int kind) { return counters().violations[kind]; }
inline uint64_t faults(int kind) { return counters().faults[kind]; }

// Resets counters and fault overrides so each test starts from the environment's defaults.
struct Fresh {
  Fresh() {
    api().set_faults(nullptr);
    api().reset_counters();
  }
  ~Fresh() { api().set_faults(nullptr); }
};

struct Mr {
  fid_mr* mr = nullptr;
  Mr(fid_domain* d, const void* buf, size_t len,
     uint64_t access = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE) {
    REQUIRE(fi_mr_reg(d, buf, len, access, 0, 0, 0, &mr, nullptr) == 0);
  }
  Mr(const Mr&) = delete;
  Mr& operator=(const Mr&) = delete;
  ~Mr() { close(); }
  void close() {
    if (mr) CHECK(fi_close(&mr->fid) == 0);
    mr = nullptr;
  }
  void* desc() const { return fi_mr_desc(mr); }
  uint64_t key() const { return fi_mr_key(mr); }
};

// One endpoint with its own fabric, domain, AV and separate tx/rx CQs.
struct Node {
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* tx = nullptr;
  fid_cq* rx = nullptr;
  fid_ep* ep = nullptr;
  fid_eq* eq = nullptr;  // bind_eq(): closed after the endpoint
  std::vector<uint8_t> name;

  explicit Node(const fi_info* info, fi_cq_format fmt = FI_CQ_FORMAT_TAGGED, bool enable = true) {
    REQUIRE(info);
    REQUIRE(fi_fabric(info->fabric_attr, &fabric, nullptr) == 0);
    REQUIRE(fi_domain(fabric, const_cast<fi_info*>(info), &domain, nullptr) == 0);
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    REQUIRE(fi_av_open(domain, &av_attr, &av, nullptr) == 0);
    fi_cq_attr cq_attr{};
    cq_attr.format = fmt;
    cq_attr.wait_obj = FI_WAIT_NONE;
    REQUIRE(fi_cq_open(domain, &cq_attr, &tx, nullptr) == 0);
    REQUIRE(fi_cq_open(domain, &cq_attr, &rx, nullptr) == 0);
    REQUIRE(fi_endpoint(domain, const_cast<fi_info*>(info), &ep, nullptr) == 0);
    REQUIRE(fi_ep_bind(ep, &av->fid, 0) == 0);
    REQUIRE(fi_ep_bind(ep, &tx->fid, FI_TRANSMIT) == 0);
    REQUIRE(fi_ep_bind(ep, &rx->fid, FI_RECV) == 0);
    if (enable) REQUIRE(fi_enable(ep) == 0);
    size_t len = 64;
    name.resize(len);
    REQUIRE(fi_getname(&ep->fid, name.data(), &len) == 0);
    REQUIRE(len == 32);
    name.resize(len);
  }
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node() { close(); }

  void close_ep() {
    if (ep) CHECK(fi_close(&ep->fid) == 0);
    ep = nullptr;
  }
  // Opens an EQ on this node's fabric and binds it to the endpoint (before fi_enable).
  void bind_eq() {
    fi_eq_attr attr{};
    attr.wait_obj = FI_WAIT_NONE;
    REQUIRE(fi_eq_open(fabric, &attr, &eq, nullptr) == 0);
    REQUIRE(fi_ep_bind(ep, &eq->fid, 0) == 0);
  }
  void close() {
    close_ep();
    if (eq) CHECK(fi_close(&eq->fid) == 0);
    eq = nullptr;
    for (fid* f : {av ? &av->fid : nullptr, tx ? &tx->fid : nullptr, rx ? &rx->fid : nullptr,
                   domain ? &domain->fid : nullptr, fabric ? &fabric->fid : nullptr}) {
      if (f) CHECK(fi_close(f) == 0);
    }
    av = nullptr;
    tx = rx = nullptr;
    domain = nullptr;
    fabric = nullptr;
  }
  fi_addr_t insert(const Node& peer) const {
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    REQUIRE(fi_av_insert(av, peer.name.data(), 1, &a, 0, nullptr) == 1);
    return a;
  }
  // One progress pass: a CQ read that consumes nothing.
  void progress() const {
    fi_cq_read(tx, nullptr, 0);
    fi_cq_read(rx, nullptr, 0);
  }
};

// Two endpoints that know each other.
struct Pair {
  Node a, b;
  fi_addr_t a2b, b2a;
  explicit Pair(const fi_info* info, fi_cq_format fmt = FI_CQ_FORMAT_TAGGED)
      : a(info, fmt), b(info, fmt) {
    a2b = a.insert(b);
    b2a = b.insert(a);
  }
  void progress() const {
    a.progress();
    b.progress();
  }
};

struct Completion {
  bool error = false;
  fi_cq_tagged_entry e{};
  fi_cq_err_entry err{};
  std::string err_data;
};

// Reads one entry from `cq` (tagged format), running `others` each time; false when the bound
// runs out. An error entry is fetched with fi_cq_readerr into c->err.
inline bool wait_cq(fid_cq* cq, Completion* c, std::initializer_list<const Node*> others = {},
                    int max = kMaxPolls) {
  for (int i = 0; i < max; ++i) {
    for (const Node* n : others) n->progress();
    ssize_t r = fi_cq_read(cq, &c->e, 1);
    if (r == 1) {
      c->error = false;
      return true;
    }
    if (r == -FI_EAVAIL) {
      c->err = fi_cq_err_entry{};
      REQUIRE(fi_cq_readerr(cq, &c->err, 0) == 1);
      c->error = true;
      c->err_data = c->err.err_data ? static_cast<const char*>(c->err.err_data) : "";
      return true;
    }
    REQUIRE(r == -FI_EAGAIN);
  }
  return false;
}

// True if `cq` stays empty for n reads while `others` progress.
inline bool stays_quiet(fid_cq* cq, int n, std::initializer_list<const Node*> others = {}) {
  fi_cq_tagged_entry e;
  for (int i = 0; i < n; ++i) {
    for (const Node* o : others) o->progress();
    ssize_t r = fi_cq_read(cq, &e, 1);
    if (r != -FI_EAGAIN) return false;
  }
  return true;
}

// Retries `post` while it answers -FI_EAGAIN, progressing `nodes` in between; returns the
// final return code (bounded).
inline ssize_t post_retry(const std::function<ssize_t()>& post,
                          std::initializer_list<const Node*> nodes, int max = kMaxPolls) {
  ssize_t r = -FI_EAGAIN;
  for (int i = 0; i < max && r == -FI_EAGAIN; ++i) {
    r = post();
    if (r == -FI_EAGAIN)
      for (const Node* n : nodes) n->progress();
  }
  return r;
}

inline std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return v;
}

}  // namespace mt
