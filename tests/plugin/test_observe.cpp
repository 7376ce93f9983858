// What NCCL >= 2.30 and a person debugging a job see of the plugin (issue 19): net ABI v12's rail
// and plane ids, setNetAttr's hints acted on, profiler events per request and per operation, the
// statistics file and the stall report. docs/nccl-abi.md, docs/profiler.md and docs/stats.md
// describe what these tests hold the plugin to.
#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "info/json.h"
#include "mockprov/mockefa.h"

using namespace nft;

namespace {

PairOptions observe_mock(const char* protocol, int nics = 1) {
  PairOptions opt = mock_options();
  opt.env.push_back({"NCCL_FABRIC_PROTOCOL", protocol});
  opt.env.push_back({"MOCKEFA_NDOMAINS", std::to_string(nics)});
  opt.env.push_back({"NCCL_FABRIC_RAILS", std::to_string(nics)});
  return opt;
}

// One transfer of `size` bytes with tag 7; both requests waited for.
int transfer(nfc::NetPlugin& p, void* sc, void* rc, void* sbuf, void* smh, void* rbuf, void* rmh,
             size_t size, size_t cap, int msg) {
  fill(sbuf, size, 1, msg);
  void* data[1] = {rbuf};
  size_t caps[1] = {cap};
  int tags[1] = {7};
  void* mhs[1] = {rmh};
  void* rr = nullptr;
  void* sr = nullptr;
  CHILD_CHECK(post_recv(p, rc, 1, data, caps, tags, mhs, &rr) == 0, "irecv");
  CHILD_CHECK(post_send(p, sc, sbuf, size, 7, smh, &sr) == 0, "isend");
  std::vector<void*> reqs = {rr, sr};
  std::vector<int> got;
  CHILD_CHECK(wait_all(p, reqs, &got) == 0, "transfer of %zu bytes", size);
  CHILD_CHECK(static_cast<size_t>(got[0]) == size, "received %d of %zu bytes", got[0], size);
  CHILD_CHECK(verify(rbuf, size, 1, msg) == SIZE_MAX, "content of message %d", msg);
  return 0;
}

// ---- a fake profiler: records every call (the plugin may call it from its keeper thread) ----
struct Descr {  // nfProfilerNetFabricDescr_v1, as docs/profiler.md lays it out
  uint8_t type, op, proto, rail;
  uint32_t comm;
  uint64_t bytes;
  uint32_t index;
  int32_t tag;
};
static_assert(sizeof(Descr) == 24, "docs/profiler.md: 24 bytes");
constexpr int64_t kPluginId = (0x4e46LL << 16) | 1;

struct Event {
  int kind;  // 0 start, 1 stop
  uintptr_t eh;
  void* phandle;
  int64_t plugin_id;
  Descr d;
};
std::mutex g_prof_mu;
std::vector<Event> g_events;
uintptr_t g_next_eh = 0x1000;
bool g_collect = true;  // false: behave as NCCL does with no profiler loaded
int g_calls = 0;

ncclResult_t fake_profiler(void** eh, int type, void* phandle, int64_t plugin_id, void* ext) {
  std::lock_guard<std::mutex> lock(g_prof_mu);
  ++g_calls;
  if (!g_collect) return ncclSuccess;  // NCCL's callback returns at once: *eh untouched
  Event e{};
  e.kind = type;
  e.phandle = phandle;
  e.plugin_id = plugin_id;
  if (type == 0) {
    e.eh = g_next_eh++;
    *eh = reinterpret_cast<void*>(e.eh);
    if (ext != nullptr) memcpy(&e.d, ext, sizeof(Descr));
  } else {
    e.eh = reinterpret_cast<uintptr_t>(*eh);
  }
  g_events.push_back(e);
  return ncclSuccess;
}

std::vector<Event> take_events() {
  std::lock_guard<std::mutex> lock(g_prof_mu);
  std::vector<Event> v;
  v.swap(g_events);
  return v;
}

// Every start has one stop after it, and nothing stops that did not start.
int check_pairs(const std::vector<Event>& ev) {
  for (size_t i = 0; i < ev.size(); ++i) {
    if (ev[i].kind != 0) continue;
    CHILD_CHECK(ev[i].plugin_id == kPluginId, "pluginId 0x%llx",
                (unsigned long long)ev[i].plugin_id);
    int stops = 0;
    for (size_t j = i + 1; j < ev.size(); ++j) stops += ev[j].kind == 1 && ev[j].eh == ev[i].eh;
    CHILD_CHECK(stops == 1, "event %zu (type %d op %d) stopped %d times", i, ev[i].d.type,
                ev[i].d.op, stops);
  }
  for (size_t j = 0; j < ev.size(); ++j) {
    if (ev[j].kind != 1) continue;
    bool started = false;
    for (size_t i = 0; i < j; ++i) started = started || (ev[i].kind == 0 && ev[i].eh == ev[j].eh);
    CHILD_CHECK(started, "a stop of a handle that never started");
  }
  return 0;
}

// The events started with phandle ph, in order.
std::vector<Event> starts_of(const std::vector<Event>& ev, void* ph) {
  std::vector<Event> out;
  for (const Event& e : ev)
    if (e.kind == 0 && e.phandle == ph) out.push_back(e);
  return out;
}

// Position of the stop of start event s.
size_t stop_at(const std::vector<Event>& ev, const Event& s) {
  for (size_t j = 0; j < ev.size(); ++j)
    if (ev[j].kind == 1 && ev[j].eh == s.eh) return j;
  return SIZE_MAX;
}

int profiled_run(nfc::NetPlugin& p, bool rdma) {
  mockefa_api api;
  void* sc = nullptr;
  void* rc = nullptr;
  CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
  const size_t kBig = 1 << 20;
  std::vector<unsigned char> sbuf(kBig), rbuf(kBig);
  void* smh = nullptr;
  void* rmh = nullptr;
  CHILD_CHECK(p.reg_mr(sc, sbuf.data(), kBig, NCCL_PTR_HOST, &smh) == ncclSuccess, "regMr");
  CHILD_CHECK(p.reg_mr(rc, rbuf.data(), kBig, NCCL_PTR_HOST, &rmh) == ncclSuccess, "regMr");
  int send_ph = 0, recv_ph = 0;  // their addresses are the handles
  take_events();
  // 1: a small message (RDMA: eager), 2: a large one (RDMA: written over both rails).
  const size_t sizes[2] = {1000, kBig};
  for (int m = 0; m < 2; ++m) {
    fill(sbuf.data(), sizes[m], 1, m);
    void* data[1] = {rbuf.data()};
    size_t caps[1] = {kBig};
    int tags[1] = {7};
    void* mhs[1] = {rmh};
    void* rr = nullptr;
    void* sr = nullptr;
    p.set_phandle(&recv_ph);
    CHILD_CHECK(post_recv(p, rc, 1, data, caps, tags, mhs, &rr) == 0, "irecv");
    p.set_phandle(&send_ph);
    CHILD_CHECK(post_send(p, sc, sbuf.data(), sizes[m], 7, smh, &sr) == 0, "isend");
    p.set_phandle(nullptr);
    std::vector<void*> reqs = {rr, sr};
    std::vector<int> got;
    CHILD_CHECK(wait_all(p, reqs, &got) == 0, "transfer");
    CHILD_CHECK(verify(rbuf.data(), sizes[m], 1, m) == SIZE_MAX, "content");
    const std::vector<Event> ev = take_events();
    if (check_pairs(ev) != 0) return 1;
    const std::vector<Event> s = starts_of(ev, &send_ph);
    const std::vector<Event> r = starts_of(ev, &recv_ph);
    CHILD_CHECK(!s.empty() && s[0].d.type == 1 && s[0].d.op == 1 && s[0].d.bytes == sizes[m] &&
                    s[0].d.tag == 7 && s[0].d.proto == (rdma ? 1 : 0),
                "message %d: the send's first event is not its request (type %d op %d bytes %llu)",
                m, s.empty() ? -1 : s[0].d.type, s.empty() ? -1 : s[0].d.op,
                s.empty() ? 0ull : (unsigned long long)s[0].d.bytes);
    CHILD_CHECK(!r.empty() && r[0].d.type == 1 && r[0].d.op == 2 && r[0].d.bytes == kBig,
                "message %d: the receive's first event is not its request", m);
    // Every operation's event ends before its request's.
    for (const std::vector<Event>* side : {&s, &r})
      for (size_t k = 1; k < side->size(); ++k)
        CHILD_CHECK(stop_at(ev, (*side)[k]) < stop_at(ev, (*side)[0]),
                    "message %d: an event of type %d ends after its request", m, (*side)[k].d.type);
    uint64_t written = 0;
    int rails_seen = 0;
    int ops = 0, eager = 0, delivered = 0, landed = 0, cts = 0, tagged_recv = 0;
    for (size_t k = 1; k < s.size(); ++k) {
      if (s[k].d.type != 2) continue;
      ++ops;
      if (s[k].d.op == 3) {
        written += s[k].d.bytes;
        rails_seen |= 1 << s[k].d.rail;
      }
      eager += s[k].d.op == 4;
    }
    for (size_t k = 1; k < r.size(); ++k) {
      landed += r[k].d.type == 5;
      delivered += r[k].d.type == 4;
      cts += r[k].d.type == 2 && r[k].d.op == 5;
      tagged_recv += r[k].d.type == 2 && r[k].d.op == 2;
    }
    // A small send is injected (no operation, so no operation event); a large one is not.
    if (!rdma) {
      CHILD_CHECK(ops == (m == 0 ? 0 : 1) && (m == 0 || s[1].d.op == 1),
                  "SENDRECV: the send has %d operations", ops);
      CHILD_CHECK(tagged_recv == 1, "SENDRECV: the receive has %d tagged receives", tagged_recv);
    } else if (m == 0) {
      CHILD_CHECK(delivered == 1 && eager == ops, "RDMA eager: %d deliveries, %d of %d sends eager",
                  delivered, eager, ops);
    } else {
      CHILD_CHECK(written == kBig && rails_seen == 3,
                  "RDMA: writes carry %llu bytes over rails 0x%x, expected 1 MiB over both",
                  (unsigned long long)written, rails_seen);
      // Its clear-to-send is an operation unless the provider took it inline (injected).
      CHILD_CHECK(cts <= 1 && landed == 1, "RDMA receive: %d CTS and %d landed events", cts,
                  landed);
    }
  }
  CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess, "deregMr");
  CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
  dlclose(api.handle);
  return 0;
}

// A 1 MiB message's bytes: half on each rail, or all on one (rail 0 also carries a CTS).
bool both_rails(const mockefa_counters& c) {
  return c.nic_tx_bytes[0] >= (512u << 10) && c.nic_tx_bytes[1] >= (512u << 10);
}
bool one_rail(const mockefa_counters& c) {
  const uint64_t lo = c.nic_tx_bytes[0] < c.nic_tx_bytes[1] ? c.nic_tx_bytes[0] : c.nic_tx_bytes[1];
  return lo < 4096 && c.nic_tx_bytes[0] + c.nic_tx_bytes[1] >= (1u << 20);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const nfi::JsonValue* at(const nfi::JsonValue& v, const char* key) {
  const nfi::JsonValue* x = v.find(key);
  static const nfi::JsonValue null_value;
  return x != nullptr ? x : &null_value;
}

}  // namespace

TEST_CASE("v12: railId and planeId come from NCCL_FABRIC_RAIL_ID / _PLANE_ID or are undefined",
          "[plugin][mock][observe]") {
  for (const char* rail : {"", "5", "none"}) {
    INFO("NCCL_FABRIC_RAIL_ID=" << rail);
    PairOptions opt = observe_mock("auto");
    opt.abi_version = 12;
    opt.env.push_back({"NCCL_FABRIC_RAIL_ID", rail});
    opt.env.push_back({"NCCL_FABRIC_PLANE_ID", std::string(rail) == "5" ? "2" : ""});
    const std::string want = rail;
    std::string log;
    CHECK(run_single(
        opt,
        [want](nfc::NetPlugin& p) {
          nfc::NetProps props;
          CHILD_CHECK(p.properties(0, &props) == ncclSuccess, "getProperties");
          const int rail_want = want == "5" ? 5 : -1;
          const int plane_want = want == "5" ? 2 : -1;
          CHILD_CHECK(props.rail_id == rail_want && props.plane_id == plane_want,
                      "railId %d planeId %d, expected %d %d", props.rail_id, props.plane_id,
                      rail_want, plane_want);
          return 0;
        },
        &log));
    INFO(log);
  }
  // A list whose length is not the device count, or a bad id, fails init with a WARN.
  for (const char* bad : {"1,2", "x", "40000"}) {
    INFO("NCCL_FABRIC_RAIL_ID=" << bad);
    PairOptions opt = observe_mock("auto");
    opt.abi_version = 12;
    opt.env.push_back({"NCCL_FABRIC_RAIL_ID", bad});
    std::string log;
    CHECK_FALSE(run_single(
        opt, [](nfc::NetPlugin&) { return 0; }, &log));
  }
}

TEST_CASE("profiler: request and operation events, in order, on both protocols",
          "[plugin][mock][observe]") {
  for (const char* proto : {"sendrecv", "rdma"}) {
    INFO(proto);
    PairOptions opt = observe_mock(proto, 2);
    opt.profiler = fake_profiler;
    opt.env.push_back({"NCCL_FABRIC_WRITE_CHUNK", "0"});
    const bool rdma = std::string(proto) == "rdma";
    std::string log;
    CHECK(run_single(
        opt, [rdma](nfc::NetPlugin& p) { return profiled_run(p, rdma); }, &log));
    INFO(log);
  }
}

TEST_CASE(
    "profiler: a send's wait for the clear-to-send is an event; nobody collecting costs one "
    "call per comm",
    "[plugin][mock][observe]") {
  PairOptions opt = observe_mock("rdma");
  opt.profiler = fake_profiler;
  std::string log;
  CHECK(run_single(
      opt,
      [](nfc::NetPlugin& p) {
        mockefa_api api;
        void* sc = nullptr;
        void* rc = nullptr;
        CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
        const size_t kBig = 256 << 10;
        std::vector<unsigned char> sbuf(kBig), rbuf(kBig);
        void* smh = nullptr;
        void* rmh = nullptr;
        CHILD_CHECK(p.reg_mr(sc, sbuf.data(), kBig, NCCL_PTR_HOST, &smh) == ncclSuccess, "regMr");
        CHILD_CHECK(p.reg_mr(rc, rbuf.data(), kBig, NCCL_PTR_HOST, &rmh) == ncclSuccess, "regMr");
        int send_ph = 0;
        // The isend comes first: NULL (no CTS yet) with the wait's event started.
        fill(sbuf.data(), kBig, 1, 0);
        void* sr = nullptr;
        p.set_phandle(&send_ph);
        CHILD_CHECK(p.isend(sc, sbuf.data(), kBig, 7, smh, &sr) == ncclSuccess && sr == nullptr,
                    "isend before the receive");
        void* data[1] = {rbuf.data()};
        size_t caps[1] = {kBig};
        int tags[1] = {7};
        void* mhs[1] = {rmh};
        void* rr = nullptr;
        p.set_phandle(nullptr);
        CHILD_CHECK(post_recv(p, rc, 1, data, caps, tags, mhs, &rr) == 0, "irecv");
        p.set_phandle(&send_ph);
        CHILD_CHECK(post_send(p, sc, sbuf.data(), kBig, 7, smh, &sr) == 0, "isend");
        std::vector<void*> reqs = {rr, sr};
        std::vector<int> got;
        CHILD_CHECK(wait_all(p, reqs, &got) == 0, "transfer");
        std::vector<Event> ev = take_events();
        if (check_pairs(ev) != 0) return 1;
        const std::vector<Event> s = starts_of(ev, &send_ph);
        bool waited = false;
        for (const Event& e : s) waited = waited || (e.d.type == 3 && e.d.bytes == kBig);
        CHILD_CHECK(waited, "no clear-to-send wait event among %zu", s.size());
        // Nobody collects: each comm asks once (its next request), then not for 4096 requests.
        {
          std::lock_guard<std::mutex> lock(g_prof_mu);
          g_collect = false;
          g_calls = 0;
        }
        for (int m = 0; m < 50; ++m)
          if (transfer(p, sc, rc, sbuf.data(), smh, rbuf.data(), rmh, 1000, kBig, m) != 0) return 1;
        {
          std::lock_guard<std::mutex> lock(g_prof_mu);
          CHILD_CHECK(g_calls == 2, "%d profiler calls for 50 messages nobody collects", g_calls);
        }
        CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess,
                    "deregMr");
        CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
        dlclose(api.handle);
        return 0;
      },
      &log));
  INFO(log);
}

TEST_CASE("setNetAttr: as many flows as rails keep a large RDMA message on one rail",
          "[plugin][mock][observe]") {
  for (const char* enabled : {"1", "0"}) {
    INFO("NCCL_FABRIC_NET_ATTR=" << enabled);
    PairOptions opt = observe_mock("rdma", 2);
    opt.env.push_back({"NCCL_FABRIC_WRITE_CHUNK", "0"});
    opt.env.push_back({"NCCL_FABRIC_NET_ATTR", enabled});
    const bool on = std::string(enabled) == "1";
    std::string log;
    CHECK(run_single(
        opt,
        [on](nfc::NetPlugin& p) {
          mockefa_api api;
          void* sc = nullptr;
          void* rc = nullptr;
          CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
          const size_t kBig = 1 << 20;
          std::vector<unsigned char> sbuf(kBig), rbuf(kBig);
          void* smh = nullptr;
          void* rmh = nullptr;
          CHILD_CHECK(p.reg_mr(sc, sbuf.data(), kBig, NCCL_PTR_HOST, &smh) == ncclSuccess, "reg");
          CHILD_CHECK(p.reg_mr(rc, rbuf.data(), kBig, NCCL_PTR_HOST, &rmh) == ncclSuccess, "reg");
          mockefa_counters c;
          // No hints: one write per rail.
          api.reset_counters();
          if (transfer(p, sc, rc, sbuf.data(), smh, rbuf.data(), rmh, kBig, kBig, 0) != 0) return 1;
          api.get_counters(&c);
          // (Rail 0 also carries the receiver's clear-to-send: a few bytes.)
          CHILD_CHECK(both_rails(c), "without hints: %llu + %llu bytes, expected half on each rail",
                      (unsigned long long)c.nic_tx_bytes[0], (unsigned long long)c.nic_tx_bytes[1]);
          // NCCL says: 4 peers x 1 flow (an alltoall): at least as many flows as rails.
          ncclNetAttr_v11_t a;
          memset(&a, 0xff, sizeof(a));
          a.sendCommAttr.maxConcurrentPeers = 4;
          a.sendCommAttr.minConcurrentPeers = 4;
          a.sendCommAttr.maxFlowsPerPeer = 1;
          a.sendCommAttr.minFlowsPerPeer = 1;
          a.op = 1u << 9;
          CHILD_CHECK(p.set_net_attr(a) == ncclSuccess, "setNetAttr");
          for (int m = 1; m <= 4; ++m) {
            api.reset_counters();
            if (transfer(p, sc, rc, sbuf.data(), smh, rbuf.data(), rmh, kBig, kBig, m) != 0)
              return 1;
            api.get_counters(&c);
            const uint64_t b0 = c.nic_tx_bytes[0], b1 = c.nic_tx_bytes[1];
            if (on)
              CHILD_CHECK(one_rail(c), "with 4 flows on 2 rails: %llu + %llu bytes",
                          (unsigned long long)b0, (unsigned long long)b1);
            else
              CHILD_CHECK(both_rails(c), "hints off: %llu + %llu bytes", (unsigned long long)b0,
                          (unsigned long long)b1);
          }
          // Hints withdrawn (NCCL's -1): cut over the rails again.
          memset(&a, 0xff, sizeof(a));
          CHILD_CHECK(p.set_net_attr(a) == ncclSuccess, "setNetAttr");
          api.reset_counters();
          if (transfer(p, sc, rc, sbuf.data(), smh, rbuf.data(), rmh, kBig, kBig, 9) != 0) return 1;
          api.get_counters(&c);
          CHILD_CHECK(both_rails(c), "after the hints went");
          CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess,
                      "deregMr");
          CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
          dlclose(api.handle);
          return 0;
        },
        &log));
    INFO(log);
  }
}

TEST_CASE("statistics file: periodic and final, counts equal the traffic sent",
          "[plugin][mock][observe]") {
  for (const char* proto : {"sendrecv", "rdma"}) {
    INFO(proto);
    char dir_tmpl[] = "/tmp/nf-stats-XXXXXX";
    REQUIRE(mkdtemp(dir_tmpl) != nullptr);
    const std::string dir = dir_tmpl;
    PairOptions opt = observe_mock(proto);
    opt.env.push_back({"NCCL_FABRIC_STATS", dir + "/stats-%h-%p.json"});
    opt.env.push_back({"NCCL_FABRIC_STATS_INTERVAL", "1"});
    std::string log;
    CHECK(run_single(
        opt,
        [dir](nfc::NetPlugin& p) {
          mockefa_api api;
          void* sc = nullptr;
          void* rc = nullptr;
          CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
          const size_t kBig = 100000;
          std::vector<unsigned char> sbuf(kBig), rbuf(kBig);
          void* smh = nullptr;
          void* rmh = nullptr;
          CHILD_CHECK(p.reg_mr(sc, sbuf.data(), kBig, NCCL_PTR_HOST, &smh) == ncclSuccess, "reg");
          CHILD_CHECK(p.reg_mr(rc, rbuf.data(), kBig, NCCL_PTR_HOST, &rmh) == ncclSuccess, "reg");
          for (int m = 0; m < 10; ++m)
            if (transfer(p, sc, rc, sbuf.data(), smh, rbuf.data(), rmh, 4000, kBig, m) != 0)
              return 1;
          for (int m = 10; m < 13; ++m)
            if (transfer(p, sc, rc, sbuf.data(), smh, rbuf.data(), rmh, kBig, kBig, m) != 0)
              return 1;
          // A receive left pending while the periodic write happens.
          void* data[1] = {rbuf.data()};
          size_t caps[1] = {kBig};
          int tags[1] = {7};
          void* mhs[1] = {rmh};
          void* rr = nullptr;
          CHILD_CHECK(post_recv(p, rc, 1, data, caps, tags, mhs, &rr) == 0, "irecv");
          char host[256] = {};
          gethostname(host, sizeof(host) - 1);
          const std::string path =
              dir + "/stats-" + host + "-" + std::to_string(getpid()) + ".json";
          // The keeper writes it within a second or two.
          bool seen = false;
          for (int i = 0; i < 40 && !seen; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            nfi::JsonValue v;
            std::string err;
            const std::string text = read_text(path);
            if (text.empty()) continue;
            CHILD_CHECK(nfi::json_parse(text, &v, &err), "periodic file: %s", err.c_str());
            CHILD_CHECK(!at(v, "final")->boolean(), "the periodic file says final");
            const nfi::JsonValue* comms = at(v, "comms");
            CHILD_CHECK(comms->items().size() == 2, "%zu comms", comms->items().size());
            for (const nfi::JsonValue& c : comms->items()) {
              if (at(c, "role")->str() != "recv") continue;
              seen = at(c, "pending")->integer() == 1;
              CHILD_CHECK(at(c, "msgs")->integer() == 13, "recv comm: %lld messages",
                          (long long)at(c, "msgs")->integer());
            }
          }
          CHILD_CHECK(seen, "no periodic file with the pending receive at %s", path.c_str());
          // The pending receive completes; then the comms close and the context finalizes.
          void* sr = nullptr;
          fill(sbuf.data(), 10, 1, 99);
          CHILD_CHECK(post_send(p, sc, sbuf.data(), 10, 7, smh, &sr) == 0, "isend");
          std::vector<void*> reqs = {rr, sr};
          std::vector<int> got;
          CHILD_CHECK(wait_all(p, reqs, &got) == 0, "last transfer");
          CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess,
                      "deregMr");
          CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
          dlclose(api.handle);
          return 0;
        },
        &log));
    INFO(log);
    // The final file (finalize), in the parent: the counts are the traffic.
    DIR* d = opendir(dir.c_str());
    REQUIRE(d != nullptr);
    std::vector<std::string> files;
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') files.push_back(dir + "/" + e->d_name);
    closedir(d);
    REQUIRE(files.size() == 1);
    nfi::JsonValue v;
    std::string err;
    REQUIRE(nfi::json_parse(read_text(files[0]), &v, &err));
    CHECK(at(v, "format")->str() == "nccl-fabric-stats");
    CHECK(at(v, "version")->integer() == 1);
    CHECK(at(v, "final")->boolean());
    const nfi::JsonValue* devs = at(v, "devices");
    REQUIRE(devs->items().size() == 1);
    const nfi::JsonValue& dev = devs->items()[0];
    const int64_t bytes = 10 * 4000 + 3 * 100000 + 10;
    CHECK(at(*at(dev, "send"), "msgs")->integer() == 14);
    CHECK(at(*at(dev, "send"), "bytes")->integer() == bytes);
    CHECK(at(*at(dev, "recv"), "msgs")->integer() == 14);
    CHECK(at(*at(dev, "recv"), "bytes")->integer() == bytes);
    CHECK(at(dev, "errors")->integer() == 0);
    CHECK(at(dev, "comms_closed")->integer() == 2);
    CHECK(at(dev, "provider")->str() == "mockefa");
    if (std::string(proto) == "rdma") {
      // 100000 bytes go by writes (one rail, one write each); the rest eagerly, both sides.
      CHECK(at(dev, "writes")->items().at(0).integer() == 3);
      CHECK(at(dev, "eager")->integer() == 2 * 11);
    }
    CHECK(at(v, "comms")->items().empty());
    for (const std::string& f : files) unlink(f.c_str());
    rmdir(dir.c_str());
  }
}

TEST_CASE(
    "stall report: a receive that never gets its data, and a send with no receive, "
    "each get one WARN with the state",
    "[plugin][mock][observe]") {
  for (const char* proto : {"sendrecv", "rdma"}) {
    INFO(proto);
    PairOptions opt = observe_mock(proto);
    opt.env.push_back({"NCCL_FABRIC_STALL_WARN", "1"});
    const bool rdma = std::string(proto) == "rdma";
    std::string log;
    CHECK(run_single(
        opt,
        [rdma](nfc::NetPlugin& p) {
          nfc::set_log_sink(capture_log);
          mockefa_api api;
          void* sc = nullptr;
          void* rc = nullptr;
          CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
          const size_t kBig = 300000;
          std::vector<unsigned char> sbuf(kBig), rbuf(kBig);
          void* smh = nullptr;
          void* rmh = nullptr;
          CHILD_CHECK(p.reg_mr(sc, sbuf.data(), kBig, NCCL_PTR_HOST, &smh) == ncclSuccess, "reg");
          CHILD_CHECK(p.reg_mr(rc, rbuf.data(), kBig, NCCL_PTR_HOST, &rmh) == ncclSuccess, "reg");
          void* data[1] = {rbuf.data()};
          size_t caps[1] = {kBig};
          int tags[1] = {7};
          void* mhs[1] = {rmh};
          void* rr = nullptr;
          CHILD_CHECK(post_recv(p, rc, 1, data, caps, tags, mhs, &rr) == 0, "irecv");
          // Nobody sends: NCCL keeps testing for 3 s.
          const auto t0 = std::chrono::steady_clock::now();
          int done = 0;
          int sz[8] = {};
          while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(3000)) {
            CHILD_CHECK(p.test(rr, &done, sz) == ncclSuccess && !done, "test");
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
          std::string l = captured_log();
          const char* state =
              rdma ? "waiting for the data (clear-to-send sent)" : "waiting for the data";
          CHILD_CHECK(l.find("WARN NET/FABRIC comm ") != std::string::npos &&
                          l.find("recv from") != std::string::npos &&
                          l.find("oldest: recv of 300000 bytes, " + std::string(state)) !=
                              std::string::npos &&
                          l.find("0 messages") != std::string::npos,
                      "no stall WARN with the receive's state in:\n%s", l.c_str());
          size_t warns = 0;
          for (size_t at = l.find("no request completed"); at != std::string::npos;
               at = l.find("no request completed", at + 1))
            ++warns;
          CHILD_CHECK(warns == 1, "%zu stall WARNs, expected one", warns);
          // The data comes: the comm says it completes again.
          fill(sbuf.data(), 1000, 1, 5);
          void* sr = nullptr;
          CHILD_CHECK(post_send(p, sc, sbuf.data(), 1000, 7, smh, &sr) == 0, "isend");
          std::vector<void*> reqs = {rr, sr};
          std::vector<int> got;
          CHILD_CHECK(wait_all(p, reqs, &got) == 0, "transfer");
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          l = captured_log();
          CHILD_CHECK(l.find("completes requests again") != std::string::npos,
                      "no INFO that the comm completes again:\n%s", l.c_str());
          if (rdma) {
            // A large isend with no receive: it waits for the clear-to-send.
            fill(sbuf.data(), kBig, 1, 6);
            void* sr2 = nullptr;
            const auto t1 = std::chrono::steady_clock::now();
            while (std::chrono::steady_clock::now() - t1 < std::chrono::milliseconds(3000)) {
              CHILD_CHECK(
                  p.isend(sc, sbuf.data(), kBig, 7, smh, &sr2) == ncclSuccess && sr2 == nullptr,
                  "isend without a receive");
              std::this_thread::sleep_for(std::chrono::milliseconds(5));
            }
            l = captured_log();
            CHILD_CHECK(l.find("send to") != std::string::npos &&
                            l.find("waiting for the receiver's clear-to-send") != std::string::npos,
                        "no stall WARN for the send waiting for its CTS:\n%s", l.c_str());
            void* rr2 = nullptr;
            CHILD_CHECK(post_recv(p, rc, 1, data, caps, tags, mhs, &rr2) == 0, "irecv");
            CHILD_CHECK(post_send(p, sc, sbuf.data(), kBig, 7, smh, &sr2) == 0, "isend");
            std::vector<void*> reqs2 = {rr2, sr2};
            CHILD_CHECK(wait_all(p, reqs2, &got) == 0, "transfer");
          }
          nfc::set_log_sink(nullptr);
          CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess,
                      "deregMr");
          CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
          dlclose(api.handle);
          return 0;
        },
        &log));
    INFO(log);
  }
}

TEST_CASE(
    "optional receive completion: reported once the CTS left, data lands after; only "
    "where no eager message can come",
    "[plugin][mock][observe]") {
  struct Case {
    const char* proto;
    const char* early;
    const char* eager;
    bool expect_early;
  } cases[] = {{"rdma", "on", "0", true},
               {"rdma", "on", "8192", false},
               {"rdma", "off", "0", false},
               {"rdma", "auto", "0", false},  // the mock emulates writes: not EFA device RDMA
               {"sendrecv", "on", "0", false}};
  for (const Case& k : cases) {
    INFO(k.proto << " NCCL_FABRIC_EARLY_COMPLETION=" << k.early << " EAGER_MAX=" << k.eager);
    PairOptions opt = observe_mock(k.proto);
    opt.env.push_back({"NCCL_FABRIC_EARLY_COMPLETION", k.early});
    opt.env.push_back({"NCCL_FABRIC_EAGER_MAX", k.eager});
    const bool expect_early = k.expect_early;
    std::string log;
    CHECK(run_single(
        opt,
        [expect_early](nfc::NetPlugin& p) {
          mockefa_api api;
          void* sc = nullptr;
          void* rc = nullptr;
          CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
          const size_t kCap = 64 << 10;
          std::vector<unsigned char> sbuf(kCap), rbuf(kCap);
          void* smh = nullptr;
          void* rmh = nullptr;
          CHILD_CHECK(p.reg_mr(sc, sbuf.data(), kCap, NCCL_PTR_HOST, &smh) == ncclSuccess, "reg");
          CHILD_CHECK(p.reg_mr(rc, rbuf.data(), kCap, NCCL_PTR_HOST, &rmh) == ncclSuccess, "reg");
          p.set_optional_recv_completion(true);
          // More rounds than a comm has requests: an early receive must go back to the pool.
          for (int m = 0; m < 80; ++m) {
            const size_t size = m % 2 == 0 ? 4000 : kCap;
            memset(rbuf.data(), 0, kCap);
            void* data[1] = {rbuf.data()};
            size_t caps[1] = {kCap};
            int tags[1] = {7};
            void* mhs[1] = {rmh};
            void* rr = nullptr;
            CHILD_CHECK(post_recv(p, rc, 1, data, caps, tags, mhs, &rr) == 0, "irecv");
            CHILD_CHECK(rr != reinterpret_cast<void*>(1), "the hint came back as the request");
            // Nothing sent yet: done only if it completes early.
            int done = 0;
            int sz[8] = {-1};
            for (int i = 0; i < 200 && !done; ++i)
              CHILD_CHECK(p.test(rr, &done, sz) == ncclSuccess, "test");
            CHILD_CHECK(done == (expect_early ? 1 : 0), "round %d: done %d before any send", m,
                        done);
            fill(sbuf.data(), size, 2, m);
            void* sr = nullptr;
            CHILD_CHECK(post_send(p, sc, sbuf.data(), size, 7, smh, &sr) == 0, "isend");
            std::vector<void*> reqs = {sr};
            if (!done) reqs.push_back(rr);
            std::vector<int> got;
            CHILD_CHECK(wait_all(p, reqs, &got) == 0, "transfer");
            // As NCCL's LL does: read the data itself, calling nothing of the plugin (whose
            // background thread progresses an endpoint nobody else does), within a bound.
            const auto t0 = std::chrono::steady_clock::now();
            while (verify(rbuf.data(), size, 2, m) != SIZE_MAX) {
              CHILD_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10),
                          "round %d: the data never landed", m);
              std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
          }
          p.set_optional_recv_completion(false);
          CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess,
                      "deregMr");
          CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
          dlclose(api.handle);
          return 0;
        },
        &log));
    INFO(log);
  }
}
