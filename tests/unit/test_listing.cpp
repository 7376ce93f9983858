// core/: a comm is complete when its endpoint lists it (issue 34, point 4). The keeper thread and
// route() (which hands incoming messages to comms by id) read listed comms under the endpoint's
// lock. A comm listed before its connection's fields were written, and then written without that
// lock, raced with both: comm_connect_start once filled in peer_id, the handle, the nonce and the
// offer after comm_create had listed the comm. The window is a few statements wide, so a race
// detector sees it only by luck; this test looks at each comm at the moment it is listed instead
// (comm_listed_hook, called by comm_register under the lock), through the plugin's own listen,
// connect and accept in one process.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/api.h"
#include "core/comm.h"
#include "nccl/net_v11.h"

using namespace nf;

namespace {

struct Listed {
  CommRole role;
  uint32_t id;
  std::string missing;  // the fields not yet set when it was listed; empty: complete
};

std::vector<Listed>* g_listed = nullptr;

const char* role_name(CommRole r) {
  return r == CommRole::kSend ? "send" : r == CommRole::kRecv ? "recv" : "listen";
}

// What the keeper and route() read of a listed comm, by role.
void on_listed(const Comm& c) {
  std::string m;
  auto need = [&m](bool set, const char* field) {
    if (!set) m += std::string(m.empty() ? "" : ", ") + field;
  };
  need(!c.peer_name.empty(), "peer_name");
  need(c.handle.magic != 0, "handle");
  if (c.role != CommRole::kListen) {
    need(c.peer != FI_ADDR_UNSPEC, "peer");
    need(c.peer_id != 0, "peer_id");
  }
  if (c.role == CommRole::kSend) {
    need(c.nonce != 0, "nonce");
    need(c.started_ns != 0, "started_ns");
    need(c.handle.listen_id == c.peer_id, "peer_id (the listener's id from the handle)");
  }
  g_listed->push_back(Listed{c.role, c.id, m});
}

// Sets an environment variable for one scope and puts the old value back.
struct EnvVar {
  std::string key;
  bool had = false;
  std::string old;
  EnvVar(const char* k, const char* v) : key(k) {
    const char* o = getenv(k);
    had = o != nullptr;
    if (had) old = o;
    setenv(k, v, 1);
  }
  ~EnvVar() {
    if (had)
      setenv(key.c_str(), old.c_str(), 1);
    else
      unsetenv(key.c_str());
  }
};

}  // namespace

TEST_CASE("comms are complete when the endpoint lists them (issue 34, point 4)", "[listing]") {
  // The system's tcp;ofi_rxm over loopback: present wherever the suite runs.
  EnvVar prov("NCCL_FABRIC_PROVIDER", "tcp;ofi_rxm");
  EnvVar iface("FI_TCP_IFACE", getenv("FI_TCP_IFACE") ? getenv("FI_TCP_IFACE") : "lo");
  std::vector<Listed> listed;
  g_listed = &listed;
  comm_listed_hook = on_listed;

  void* ctx = nullptr;
  REQUIRE(api::init(&ctx, nullptr) == Status::kOk);
  int ndev = 0;
  REQUIRE(api::devices(&ndev) == Status::kOk);
  REQUIRE(ndev >= 1);

  // Two connections, both directions of one process, one listen comm each (as NCCL does): every
  // comm the handshake makes passes through comm_register.
  void* lc[2] = {nullptr, nullptr};
  void* sc[2] = {nullptr, nullptr};
  void* rc[2] = {nullptr, nullptr};
  char h[2][NCCL_NET_HANDLE_MAXSIZE] = {};
  for (int k = 0; k < 2; ++k) {
    REQUIRE(api::listen(ctx, 0, h[k], &lc[k]) == Status::kOk);
    REQUIRE(lc[k] != nullptr);
  }
  const auto start = std::chrono::steady_clock::now();
  bool all = false;
  while (!all && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    all = true;
    for (int k = 0; k < 2; ++k) {
      if (sc[k] == nullptr) REQUIRE(api::connect(ctx, 0, h[k], &sc[k]) == Status::kOk);
      if (rc[k] == nullptr) REQUIRE(api::accept(lc[k], &rc[k]) == Status::kOk);
      all = all && sc[k] != nullptr && rc[k] != nullptr;
    }
  }
  comm_listed_hook = nullptr;
  g_listed = nullptr;
  CHECK(all);

  int roles[3] = {0, 0, 0};
  for (const Listed& l : listed) {
    INFO(role_name(l.role) << " comm " << l.id << " was listed without: " << l.missing);
    CHECK(l.missing.empty());
    ++roles[static_cast<int>(l.role == CommRole::kSend ? 0 : l.role == CommRole::kRecv ? 1 : 2)];
  }
  // The hook saw every comm the handshakes made (it cannot pass by seeing none).
  CHECK(roles[0] == 2);
  CHECK(roles[1] == 2);
  CHECK(roles[2] == 2);

  for (int k = 0; k < 2; ++k) {
    if (sc[k] != nullptr) CHECK(api::close_send(sc[k]) == Status::kOk);
    if (rc[k] != nullptr) CHECK(api::close_recv(rc[k]) == Status::kOk);
    CHECK(api::close_listen(lc[k]) == Status::kOk);
  }
  CHECK(api::finalize(ctx) == Status::kOk);
}
