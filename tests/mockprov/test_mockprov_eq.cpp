// Tests of the mock EFA provider: event queues, and errors that belong to no operation
// (MOCKEFA_EQ_ERROR_AFTER: a failed handshake with a peer, reported on the endpoint's EQ, or a
// no_eq violation where EFA would abort()).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include "test_mockprov_util.h"

using namespace mt;

namespace {

constexpr int kEfaErrPeerHandshake = 4113;  // FI_EFA_ERR_PEER_HANDSHAKE
constexpr int kEfaUnreach = 15;

// No FI_MR_LOCAL: sends of a few bytes need no registration.
InfoPtr plain_info() {
  InfoPtr hints = make_hints(kCaps, FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR);
  InfoPtr info = getinfo(hints.get());
  REQUIRE(info);
  return info;
}

// fi_av_straddr of a node's address, as the mock prints it.
std::string straddr(const Node& via, const Node& who) {
  char buf[128] = {};
  size_t len = sizeof buf;
  REQUIRE(fi_av_straddr(via.av, who.name.data(), buf, &len) == buf);
  return buf;
}

// Three endpoints: a (bound to an EQ or not) knows b and c.
struct Trio {
  Node a, b, c;
  fi_addr_t a2b = 0, a2c = 0;
  Trio(const fi_info* info, bool with_eq) : a(info, FI_CQ_FORMAT_TAGGED, false), b(info), c(info) {
    if (with_eq) a.bind_eq();
    REQUIRE(fi_enable(a.ep) == 0);
    a2b = a.insert(b);
    a2c = a.insert(c);
    b.insert(a);
    c.insert(a);
  }
};

}  // namespace

TEST_CASE("eq: open, empty reads, user events, close refused while bound", "[mockprov][eq]") {
  Fresh fresh;
  InfoPtr info = plain_info();
  const uint64_t eqs_before = counters().open_eqs;
  Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
  fi_eq_attr attr{};
  fid_eq* eq = nullptr;
  SECTION("wait objects and flags") {
    attr.wait_obj = FI_WAIT_FD;
    CHECK(fi_eq_open(n.fabric, &attr, &eq, nullptr) == -FI_ENOSYS);
    attr.wait_obj = FI_WAIT_NONE;
    attr.flags = FI_SEND;
    CHECK(fi_eq_open(n.fabric, &attr, &eq, nullptr) == -FI_EINVAL);
    attr.flags = 0;
    attr.wait_obj = FI_WAIT_UNSPEC;
    REQUIRE(fi_eq_open(n.fabric, &attr, &eq, nullptr) == 0);
    uint32_t ev = 0;
    fi_eq_entry entry{};
    CHECK(fi_eq_sread(eq, &ev, &entry, sizeof entry, 0, 0) == -FI_ENOSYS);
    CHECK(fi_close(&eq->fid) == 0);
  }
  SECTION("empty: -FI_EAGAIN from read and readerr; fi_eq_write needs FI_WRITE") {
    attr.wait_obj = FI_WAIT_NONE;
    REQUIRE(fi_eq_open(n.fabric, &attr, &eq, nullptr) == 0);
    CHECK(counters().open_eqs == eqs_before + 1);
    uint32_t ev = 0;
    fi_eq_entry entry{};
    CHECK(fi_eq_read(eq, &ev, &entry, sizeof entry, 0) == -FI_EAGAIN);
    fi_eq_err_entry err{};
    CHECK(fi_eq_readerr(eq, &err, 0) == -FI_EAGAIN);
    CHECK(fi_eq_write(eq, FI_NOTIFY, &entry, sizeof entry, 0) == -FI_EINVAL);
    CHECK(fi_close(&eq->fid) == 0);
    CHECK(counters().open_eqs == eqs_before);
  }
  SECTION("user events with FI_WRITE, FI_PEEK keeps them") {
    attr.wait_obj = FI_WAIT_NONE;
    attr.flags = FI_WRITE;
    REQUIRE(fi_eq_open(n.fabric, &attr, &eq, nullptr) == 0);
    int ctx = 0;
    fi_eq_entry in{&n.ep->fid, &ctx, 42};
    CHECK(fi_eq_write(eq, FI_NOTIFY, &in, sizeof in, 0) == static_cast<ssize_t>(sizeof in));
    uint32_t ev = 0;
    fi_eq_entry out{};
    CHECK(fi_eq_read(eq, &ev, &out, sizeof out, FI_PEEK) == static_cast<ssize_t>(sizeof out));
    fi_eq_err_entry err{};
    CHECK(fi_eq_readerr(eq, &err, 0) == -FI_EAGAIN);  // the head is no error
    out = fi_eq_entry{};
    CHECK(fi_eq_read(eq, &ev, &out, sizeof out, 0) == static_cast<ssize_t>(sizeof out));
    CHECK(ev == FI_NOTIFY);
    CHECK(out.fid == &n.ep->fid);
    CHECK(out.context == &ctx);
    CHECK(out.data == 42);
    CHECK(fi_eq_read(eq, &ev, &out, sizeof out, 0) == -FI_EAGAIN);
    CHECK(fi_close(&eq->fid) == 0);
  }
  SECTION("bound: fi_close of the EQ and of the fabric refused until the endpoint is gone") {
    n.bind_eq();
    fid_eq* second = nullptr;
    attr.wait_obj = FI_WAIT_NONE;
    REQUIRE(fi_eq_open(n.fabric, &attr, &second, nullptr) == 0);
    CHECK(fi_ep_bind(n.ep, &second->fid, 0) == -FI_EINVAL);  // one EQ per endpoint
    CHECK(fi_close(&second->fid) == 0);
    CHECK(fi_close(&n.eq->fid) == -FI_EBUSY);
    CHECK(violations(MOCKEFA_V_BUSY_CLOSE) == 1);
    REQUIRE(fi_enable(n.ep) == 0);
    n.close_ep();
    CHECK(fi_close(&n.eq->fid) == 0);
    n.eq = nullptr;
    CHECK(counters().open_eqs == eqs_before);
  }
  SECTION("binding after fi_enable is refused and counted; an EQ of another fabric is refused") {
    REQUIRE(fi_enable(n.ep) == 0);
    attr.wait_obj = FI_WAIT_NONE;
    REQUIRE(fi_eq_open(n.fabric, &attr, &eq, nullptr) == 0);
    CHECK(fi_ep_bind(n.ep, &eq->fid, 0) == -FI_EOPBADSTATE);
    CHECK(violations(MOCKEFA_V_OPT_STATE) == 1);
    Node other(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK(fi_ep_bind(other.ep, &eq->fid, 0) == -FI_EINVAL);
    CHECK(fi_close(&eq->fid) == 0);
  }
  SECTION("an open EQ keeps its fabric open") {
    attr.wait_obj = FI_WAIT_NONE;
    REQUIRE(fi_eq_open(n.fabric, &attr, &eq, nullptr) == 0);
    n.close_ep();
    for (fid* f : {&n.av->fid, &n.tx->fid, &n.rx->fid, &n.domain->fid}) REQUIRE(fi_close(f) == 0);
    n.av = nullptr;
    n.tx = n.rx = nullptr;
    n.domain = nullptr;
    CHECK(fi_close(&n.fabric->fid) == -FI_EBUSY);
    CHECK(fi_close(&eq->fid) == 0);
  }
}

TEST_CASE("eq: MOCKEFA_EQ_ERROR_AFTER writes an error naming the peer; ops to that peer fail",
          "[mockprov][eq][faults]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_EQ_ERROR_AFTER", "1");
  InfoPtr info = plain_info();
  Trio t(info.get(), true);
  Node& a = t.a;
  const std::string c_addr = straddr(a, t.c);
  REQUIRE(c_addr.find("fi_addr_efa://") == 0);
  uint64_t v1 = 1, v2 = 2, v3 = 3, v4 = 4;
  int ctx1 = 0, ctx2 = 0, ctx3 = 0, ctx4 = 0;
  uint64_t rb = 0, rc = 0;
  REQUIRE(fi_trecv(t.b.ep, &rb, sizeof rb, nullptr, FI_ADDR_UNSPEC, 1, 0, nullptr) == 0);
  REQUIRE(fi_trecv(t.c.ep, &rc, sizeof rc, nullptr, FI_ADDR_UNSPEC, 1, 0, nullptr) == 0);
  REQUIRE(fi_tsend(a.ep, &v1, 8, nullptr, t.a2b, 1, &ctx1) == 0);  // the first op: no event yet
  REQUIRE(fi_tsend(a.ep, &v2, 8, nullptr, t.a2c, 1, &ctx2) ==
          0);  // the second: its handshake fails
  uint32_t ev = 0;
  fi_eq_entry entry{};
  CHECK(fi_eq_read(a.eq, &ev, &entry, sizeof entry, 0) == -FI_EAGAIN);  // raised at a's progress
  CHECK(faults(MOCKEFA_F_EQ_ERROR) == 0);

  std::vector<Completion> got;
  for (int i = 0; i < 2; ++i) {
    Completion c;
    REQUIRE(wait_cq(a.tx, &c, {&t.b, &t.c}));
    got.push_back(c);
  }
  std::sort(got.begin(), got.end(),
            [](const Completion& x, const Completion& y) { return x.error < y.error; });
  CHECK_FALSE(got[0].error);
  CHECK(got[0].e.op_context == &ctx1);
  REQUIRE(got[1].error);
  CHECK(got[1].err.op_context == &ctx2);
  CHECK(got[1].err.err == FI_EHOSTUNREACH);
  CHECK(got[1].err.prov_errno == kEfaUnreach);
  CHECK(rb == 1);
  CHECK(stays_quiet(t.c.rx, 5));  // the op that triggered it never reached c
  CHECK(faults(MOCKEFA_F_EQ_ERROR) == 1);

  CHECK(fi_eq_read(a.eq, &ev, &entry, sizeof entry, 0) == -FI_EAVAIL);
  fi_eq_err_entry err{};
  SECTION("as EFA writes it: err and prov_errno, nothing that names a peer or an endpoint") {
    CHECK(fi_eq_readerr(a.eq, &err, FI_PEEK) == static_cast<ssize_t>(sizeof err));
    CHECK(fi_eq_read(a.eq, &ev, &entry, sizeof entry, 0) == -FI_EAVAIL);  // FI_PEEK left it there
    err = fi_eq_err_entry{};
    CHECK(fi_eq_readerr(a.eq, &err, 0) == static_cast<ssize_t>(sizeof err));
    CHECK(err.fid == nullptr);  // efa_base_ep_write_eq_error zeroes the entry
    CHECK(err.context == nullptr);
    CHECK(err.data == 0);
    CHECK(err.err == FI_EIO);
    CHECK(err.prov_errno == kEfaErrPeerHandshake);
    CHECK(err.err_data == nullptr);
    CHECK(err.err_data_size == 0);
    CHECK(std::string(fi_eq_strerror(a.eq, err.prov_errno, err.err_data, nullptr, 0)) ==
          "Failure posting handshake to peer");
    char sbuf[256];
    const std::string text(fi_eq_strerror(a.eq, err.prov_errno, nullptr, sbuf, sizeof sbuf));
    CHECK(text.find(c_addr) == std::string::npos);
  }
  SECTION("a caller buffer: left as it was, err_data_size 0") {
    char small[16] = "untouched";
    err.err_data = small;
    err.err_data_size = sizeof small;
    CHECK(fi_eq_readerr(a.eq, &err, 0) == static_cast<ssize_t>(sizeof err));
    CHECK(err.err_data == small);
    CHECK(err.err_data_size == 0);
    CHECK(std::string(small) == "untouched");
  }
  CHECK(fi_eq_readerr(a.eq, &err, 0) == -FI_EAGAIN);  // one event only
  CHECK(fi_eq_read(a.eq, &ev, &entry, sizeof entry, 0) == -FI_EAGAIN);

  // Later: to c every op fails (FI_EHOSTUNREACH), to b they go through.
  REQUIRE(fi_tsend(a.ep, &v3, 8, nullptr, t.a2c, 1, &ctx3) == 0);
  Completion c3;
  REQUIRE(wait_cq(a.tx, &c3, {&t.c}));
  REQUIRE(c3.error);
  CHECK(c3.err.op_context == &ctx3);
  CHECK(c3.err.err == FI_EHOSTUNREACH);
  CHECK(rc == 0);
  REQUIRE(fi_trecv(t.b.ep, &rb, sizeof rb, nullptr, FI_ADDR_UNSPEC, 1, 0, nullptr) == 0);
  REQUIRE(fi_tsend(a.ep, &v4, 8, nullptr, t.a2b, 1, &ctx4) == 0);
  Completion c4;
  REQUIRE(wait_cq(a.tx, &c4, {&t.b}));
  CHECK_FALSE(c4.error);
  CHECK(rb == 4);
  CHECK(faults(MOCKEFA_F_EQ_ERROR) == 1);
  CHECK(violations(MOCKEFA_V_NO_EQ) == 0);
  CHECK(std::string(api().fault_name(MOCKEFA_F_EQ_ERROR)) == "eq_error");
}

TEST_CASE("eq: RMA to the lost peer fails too; closing the endpoint leaves the fid-less error",
          "[mockprov][eq][faults]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_HANDSHAKE", "none");
  InfoPtr info = plain_info();
  Trio t(info.get(), true);
  mockefa_faults f{};
  api().get_faults(&f);
  f.eq_error_after = 0;  // the next op of every open endpoint
  CHECK(api().set_faults_all(&f) >= 3);
  std::vector<uint8_t> remote(64, 0), local = pattern(64, 5);
  Mr rmr(t.c.domain, remote.data(), remote.size());
  Mr lmr(t.a.domain, local.data(), local.size());
  REQUIRE(fi_write(t.a.ep, local.data(), 64, lmr.desc(), t.a2c,
                   reinterpret_cast<uint64_t>(remote.data()), rmr.key(), nullptr) == 0);
  Completion w;
  REQUIRE(wait_cq(t.a.tx, &w, {&t.c}));
  REQUIRE(w.error);
  CHECK(w.err.err == FI_EHOSTUNREACH);
  CHECK(w.err.flags == (FI_RMA | FI_WRITE));
  CHECK(std::all_of(remote.begin(), remote.end(), [](uint8_t x) { return x == 0; }));
  fi_eq_entry entry{};
  uint32_t ev = 0;
  CHECK(fi_eq_read(t.a.eq, &ev, &entry, sizeof entry, 0) == -FI_EAVAIL);
  // libfabric's util endpoint takes the events of its fid off the EQ when it closes; EFA's error
  // entries carry no fid, so they stay.
  t.a.close_ep();
  CHECK(fi_eq_read(t.a.eq, &ev, &entry, sizeof entry, 0) == -FI_EAVAIL);
  fi_eq_err_entry err{};
  CHECK(fi_eq_readerr(t.a.eq, &err, 0) == static_cast<ssize_t>(sizeof err));
  CHECK(err.prov_errno == kEfaErrPeerHandshake);
  CHECK(fi_eq_read(t.a.eq, &ev, &entry, sizeof entry, 0) == -FI_EAGAIN);
}

TEST_CASE("eq: without an EQ the error is a no_eq violation where EFA would abort()",
          "[mockprov][eq][faults]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_EQ_ERROR_AFTER", "0");
  InfoPtr info = plain_info();
  Trio t(info.get(), false);
  uint64_t v = 7;
  REQUIRE(fi_tsend(t.a.ep, &v, 8, nullptr, t.a2b, 1, nullptr) == 0);
  CHECK(violations(MOCKEFA_V_NO_EQ) == 0);  // raised at the endpoint's progress, not at post
  Completion c;
  REQUIRE(wait_cq(t.a.tx, &c, {&t.b}));
  REQUIRE(c.error);
  CHECK(c.err.err == FI_EHOSTUNREACH);
  CHECK(violations(MOCKEFA_V_NO_EQ) == 1);
  CHECK(faults(MOCKEFA_F_EQ_ERROR) == 1);
  CHECK(std::string(api().violation_name(MOCKEFA_V_NO_EQ)) == "no_eq");
  std::string text(512, '\0');
  text.resize(api().last_violation(&text[0], text.size()));
  CHECK(text.find("no_eq: ") == 0);
  CHECK(text.find(straddr(t.a, t.b)) != std::string::npos);
  // Still lost: the next op to b fails, without a second event.
  REQUIRE(fi_tsend(t.a.ep, &v, 8, nullptr, t.a2b, 1, nullptr) == 0);
  REQUIRE(wait_cq(t.a.tx, &c, {&t.b}));
  CHECK(c.error);
  CHECK(violations(MOCKEFA_V_NO_EQ) == 1);
}

TEST_CASE("eq: no EQ with MOCKEFA_ABORT_ON_VIOLATION aborts, as EFA does",
          "[mockprov][eq][faults]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_EQ_ERROR_AFTER", "0");
  InfoPtr info = plain_info();
  Trio t(info.get(), false);
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Catch2 and libfabric catch SIGABRT to report it; the parent wants to see the signal itself.
    std::signal(SIGABRT, SIG_DFL);
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDERR_FILENO);  // the child's "EFA would abort()" lines
    setenv("MOCKEFA_ABORT_ON_VIOLATION", "1", 1);
    uint64_t v = 7;
    if (fi_tsend(t.a.ep, &v, 8, nullptr, t.a2b, 1, nullptr) != 0) _exit(2);
    fi_cq_tagged_entry e;
    for (int i = 0; i < 10; ++i) fi_cq_read(t.a.tx, &e, 1);
    _exit(0);  // not reached when the mock aborts
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
}
