#include "nccl_driver.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

namespace nft {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kCanaryBytes = 64;
constexpr unsigned char kSlotCanary = 0x5C;  // after every slot: never written
constexpr unsigned char kTailCanary = 0xA5;  // after each expected message, inside its slot
constexpr int kMaxN = 8;

// Message content: 8-byte words, each a function of (lane, message, word), so filling and checking
// 16 MiB takes milliseconds and leaves the plugin as little idle time as NCCL does.
inline uint64_t word_of(int lane, uint32_t msg, size_t w) {
  uint64_t z = (static_cast<uint64_t>(lane) << 48) ^ (static_cast<uint64_t>(msg) << 24) ^ w;
  z *= 0x9e3779b97f4a7c15ull;
  return z ^ (z >> 29);
}

void fill_fast(unsigned char* b, size_t n, int lane, uint32_t msg) {
  size_t w = 0;
  for (; (w + 1) * 8 <= n; ++w) {
    const uint64_t v = word_of(lane, msg, w);
    memcpy(b + w * 8, &v, 8);
  }
  if (w * 8 < n) {
    const uint64_t v = word_of(lane, msg, w);
    memcpy(b + w * 8, &v, n - w * 8);
  }
}

// The first wrong byte, or SIZE_MAX.
size_t verify_fast(const unsigned char* b, size_t n, int lane, uint32_t msg) {
  for (size_t w = 0; w * 8 < n; ++w) {
    const uint64_t v = word_of(lane, msg, w);
    const size_t len = n - w * 8 < 8 ? n - w * 8 : 8;
    if (memcmp(b + w * 8, &v, len) != 0) {
      const unsigned char* e = reinterpret_cast<const unsigned char*>(&v);
      for (size_t i = 0; i < len; ++i)
        if (b[w * 8 + i] != e[i]) return w * 8 + i;
    }
  }
  return SIZE_MAX;
}

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
};

// One message as the sender posts it.
struct Send {
  size_t size;
  int tag;
  uint32_t id;  // the content pattern's message number
};

// One receive group and the sends that fill it, in the sender's order.
struct GroupPlan {
  int n = 1;
  int tags[kMaxN] = {};
  std::vector<Send> sends;  // n of them
  int match[kMaxN] = {};    // buffer i receives sends[match[i]]
};

const size_t kFixedSizes[] = {0, 1, 7, 8, 63, 64, 4095, 4096, 65536, 1u << 20, 4u << 20, 16u << 20};

// Both sides derive the same plan from (seed, lane, round).
std::vector<GroupPlan> make_plan(const DriverConfig& cfg, int lane, int round, int sender_rank) {
  Rng rng(cfg.seed * 1000003ull + static_cast<uint64_t>(lane) * 7919ull +
          static_cast<uint64_t>(round) * 104729ull);
  std::vector<size_t> sizes;
  for (size_t s : kFixedSizes) {
    if (static_cast<int>(sizes.size()) == cfg.messages) break;
    sizes.push_back(std::min(s, cfg.slot_bytes));
  }
  while (static_cast<int>(sizes.size()) < cfg.messages)
    sizes.push_back(std::min<size_t>(rng.below(cfg.max_random + 1), cfg.slot_bytes));
  for (size_t i = sizes.size(); i > 1; --i) std::swap(sizes[i - 1], sizes[rng.below(i)]);

  std::vector<GroupPlan> plan;
  uint32_t id = static_cast<uint32_t>(round) * 100000u;
  size_t next = 0;
  while (next < sizes.size()) {
    GroupPlan g;
    int n = cfg.group_fixed ? cfg.group_max : 1 + static_cast<int>(rng.below(cfg.group_max));
    n = std::min<int>(n, static_cast<int>(sizes.size() - next));
    g.n = n;
    for (int i = 0; i < n; ++i) {
      switch (cfg.tags) {
        case TagMode::kRank: g.tags[i] = sender_rank; break;
        case TagMode::kDistinct: g.tags[i] = 100 + i; break;
        case TagMode::kRepeated: g.tags[i] = 200 + static_cast<int>(rng.below(2)); break;
      }
    }
    int order[kMaxN];
    for (int i = 0; i < n; ++i) order[i] = i;
    if (cfg.shuffle_sends)
      for (int i = n; i > 1; --i)
        std::swap(order[i - 1], order[rng.below(static_cast<uint64_t>(i))]);
    for (int k = 0; k < n; ++k)
      g.sends.push_back({sizes[next + static_cast<size_t>(k)], g.tags[order[k]], id++});
    next += static_cast<size_t>(n);
    // The k-th send of tag t lands in the k-th buffer of tag t.
    for (int i = 0; i < n; ++i) {
      int j = 0;  // buffer i is the j-th buffer of its tag
      for (int b = 0; b < i; ++b) j += g.tags[b] == g.tags[i];
      for (int k = 0, seen = 0; k < n; ++k) {
        if (g.sends[static_cast<size_t>(k)].tag != g.tags[i]) continue;
        if (seen++ == j) {
          g.match[i] = k;
          break;
        }
      }
    }
    plan.push_back(std::move(g));
  }
  return plan;
}

struct Outstanding {
  void* req = nullptr;
  int group = 0;
  int k = 0;  // sender: the send's index in its group
  int n = 1;
  int slots[kMaxN] = {};
};

struct Lane {
  int index = 0;
  bool sender = false;
  int sender_rank = 0;
  void* comm = nullptr;
  std::vector<unsigned char> mem;
  size_t stride = 0;
  int nslots = 0;
  std::vector<void*> mhs;  // one, or one per slot
  std::vector<int> free_slots;
  std::vector<GroupPlan> plan;
  int round = 0;
  int group = 0;  // next group to post (receiver) or whose member is next (sender)
  int k = 0;      // sender: next member of `group`
  std::deque<Outstanding> out;
  bool retry = false;  // `pending` was answered NULL: call again with the same arguments
  Outstanding pending;
  uint64_t completed = 0;
  uint64_t nulls = 0;
  bool finished = false;

  unsigned char* slot(int s) { return mem.data() + static_cast<size_t>(s) * stride; }
  void* mh_of(int s) const { return mhs.size() == 1 ? mhs[0] : mhs[static_cast<size_t>(s)]; }
};

struct Driver {
  nfc::NetPlugin& p;
  const DriverConfig& cfg;
  std::vector<Lane> lanes;
  std::string who;
  Rng gaps;  // idle gaps (idle_max_ms)
  Driver(nfc::NetPlugin& plugin, const DriverConfig& c, std::string w)
      : p(plugin), cfg(c), who(std::move(w)), gaps(c.seed * 0x2545f4914f6cdd1dull + 77) {}

  int fail_dump(const char* what) {
    fprintf(stderr, "[%s pid %d] %s\n  config: %s\n  replay: NF_STRESS_SEED=%llu\n", who.c_str(),
            static_cast<int>(getpid()), what, describe(cfg).c_str(),
            static_cast<unsigned long long>(cfg.seed));
    for (Lane& l : lanes) {
      fprintf(stderr,
              "  lane %d (%s): round %d/%d group %d/%zu member %d, completed %llu, "
              "outstanding %zu, retry pending %d, NULL answers %llu\n",
              l.index, l.sender ? "send" : "recv", l.round, cfg.rounds, l.group, l.plan.size(), l.k,
              static_cast<unsigned long long>(l.completed), l.out.size(), l.retry ? 1 : 0,
              static_cast<unsigned long long>(l.nulls));
    }
    return 1;
  }

  int reg(Lane& l) {
    l.mhs.clear();
    if (cfg.per_slot_reg) {
      for (int s = 0; s < l.nslots; ++s) {
        void* mh = nullptr;
        CHILD_CHECK(
            p.reg_mr(l.comm, l.slot(s), cfg.slot_bytes, NCCL_PTR_HOST, &mh) == ncclSuccess && mh,
            "regMr slot %d of lane %d", s, l.index);
        l.mhs.push_back(mh);
      }
    } else {
      void* mh = nullptr;
      CHILD_CHECK(
          p.reg_mr(l.comm, l.mem.data(), l.mem.size(), NCCL_PTR_HOST, &mh) == ncclSuccess && mh,
          "regMr lane %d", l.index);
      l.mhs.push_back(mh);
    }
    return 0;
  }

  int dereg(Lane& l) {
    for (void* mh : l.mhs)
      CHILD_CHECK(p.dereg_mr(l.comm, mh) == ncclSuccess, "deregMr lane %d", l.index);
    l.mhs.clear();
    return 0;
  }

  int setup(Lane& l) {
    l.nslots = l.sender ? cfg.window : cfg.window * cfg.group_max;
    l.stride = cfg.slot_bytes + kCanaryBytes;
    l.mem.assign(l.stride * static_cast<size_t>(l.nslots), 0);
    for (int s = 0; s < l.nslots; ++s) {
      memset(l.slot(s) + cfg.slot_bytes, kSlotCanary, kCanaryBytes);
      l.free_slots.push_back(l.nslots - 1 - s);
    }
    l.plan = make_plan(cfg, l.index, 0, l.sender_rank);
    return reg(l);
  }

  // Posts what the window allows; returns 0, or 1 after a failure.
  int post(Lane& l) {
    while (!l.finished && (l.retry || (static_cast<int>(l.out.size()) < cfg.window &&
                                       l.group < static_cast<int>(l.plan.size())))) {
      Outstanding o;
      if (l.retry) {
        o = l.pending;
      } else {
        const GroupPlan& g = l.plan[static_cast<size_t>(l.group)];
        o.group = l.group;
        o.k = l.k;
        o.n = l.sender ? 1 : g.n;
        if (static_cast<int>(l.free_slots.size()) < o.n) return 0;
        for (int i = 0; i < o.n; ++i) {
          o.slots[i] = l.free_slots.back();
          l.free_slots.pop_back();
        }
        // Prepare the memory once; a retry reuses it as it is.
        if (l.sender) {
          const Send& s = g.sends[static_cast<size_t>(o.k)];
          fill_fast(l.slot(o.slots[0]), s.size, l.index, s.id);
        } else {
          for (int i = 0; i < g.n; ++i) {
            const size_t sz = g.sends[static_cast<size_t>(g.match[i])].size;
            memset(l.slot(o.slots[i]) + sz, kTailCanary,
                   std::min(kCanaryBytes, cfg.slot_bytes - sz));
          }
        }
      }
      const GroupPlan& g = l.plan[static_cast<size_t>(o.group)];
      void* req = reinterpret_cast<void*>(0xdead);
      ncclResult_t rc;
      if (l.sender) {
        const Send& s = g.sends[static_cast<size_t>(o.k)];
        rc = p.isend(l.comm, l.slot(o.slots[0]), s.size, s.tag, l.mh_of(o.slots[0]), &req);
      } else {
        void* data[kMaxN];
        size_t caps[kMaxN];
        int tags[kMaxN];
        void* mhs[kMaxN];
        for (int i = 0; i < g.n; ++i) {
          data[i] = l.slot(o.slots[i]);
          caps[i] = cfg.slot_bytes;
          tags[i] = g.tags[i];
          mhs[i] = l.mh_of(o.slots[i]);
        }
        req = cfg.optional_hint && g.n == 1 ? reinterpret_cast<void*>(0x1) : nullptr;
        rc = p.irecv(l.comm, g.n, data, caps, tags, mhs, &req);
      }
      if (rc != ncclSuccess) {
        char text[160];
        snprintf(text, sizeof(text), "lane %d: %s of group %d member %d failed: %d", l.index,
                 l.sender ? "isend" : "irecv", o.group, o.k, static_cast<int>(rc));
        return fail_dump(text);
      }
      if (req == reinterpret_cast<void*>(0xdead) || req == reinterpret_cast<void*>(0x1)) {
        char text[160];
        snprintf(text, sizeof(text), "lane %d: the plugin left *request unwritten (%p)", l.index,
                 req);
        return fail_dump(text);
      }
      if (req == nullptr) {
        // NCCL calls again later with the same arguments, and posts nothing else here first.
        l.retry = true;
        l.pending = o;
        ++l.nulls;
        return 0;
      }
      l.retry = false;
      o.req = req;
      l.out.push_back(o);
      if (cfg.idle_max_ms > 0 && gaps.below(16) == 0)
        std::this_thread::sleep_for(
            std::chrono::milliseconds(gaps.below(static_cast<uint64_t>(cfg.idle_max_ms) + 1)));
      if (l.sender) {
        if (++l.k == g.n) {
          l.k = 0;
          ++l.group;
        }
      } else {
        ++l.group;
      }
    }
    return 0;
  }

  int check_recv(Lane& l, const Outstanding& o, const int* sizes) {
    const GroupPlan& g = l.plan[static_cast<size_t>(o.group)];
    for (int i = 0; i < g.n; ++i) {
      const Send& s = g.sends[static_cast<size_t>(g.match[i])];
      unsigned char* b = l.slot(o.slots[i]);
      char text[240];
      if (sizes[i] != static_cast<int>(s.size)) {
        snprintf(text, sizeof(text),
                 "lane %d round %d group %d buffer %d (tag %d): size %d reported, %zu sent",
                 l.index, l.round, o.group, i, g.tags[i], sizes[i], s.size);
        return fail_dump(text);
      }
      const size_t bad = verify_fast(b, s.size, l.index, s.id);
      if (bad != SIZE_MAX) {
        snprintf(text, sizeof(text),
                 "lane %d round %d group %d buffer %d (tag %d, %zu bytes): wrong byte at %zu",
                 l.index, l.round, o.group, i, g.tags[i], s.size, bad);
        return fail_dump(text);
      }
      const size_t tail = std::min(kCanaryBytes, cfg.slot_bytes - s.size);
      for (size_t j = 0; j < tail; ++j) {
        if (b[s.size + j] != kTailCanary) {
          snprintf(text, sizeof(text),
                   "lane %d group %d buffer %d: byte %zu past the %zu-byte message was written",
                   l.index, o.group, i, j, s.size);
          return fail_dump(text);
        }
      }
    }
    return 0;
  }

  int check_slot_canaries(Lane& l) {
    for (int s = 0; s < l.nslots; ++s) {
      const unsigned char* c = l.slot(s) + cfg.slot_bytes;
      for (size_t j = 0; j < kCanaryBytes; ++j) {
        if (c[j] != kSlotCanary) {
          char text[160];
          snprintf(text, sizeof(text), "lane %d: the canary after slot %d was overwritten", l.index,
                   s);
          return fail_dump(text);
        }
      }
    }
    return 0;
  }

  // Tests the oldest outstanding request only, as NCCL's proxy does. *progress when it completed.
  int test_oldest(Lane& l, bool* progress) {
    if (l.out.empty()) return 0;
    Outstanding& o = l.out.front();
    int done = 0;
    int sizes[64] = {0};
    ncclResult_t rc = p.test(o.req, &done, sizes);
    if (rc != ncclSuccess) {
      char text[160];
      snprintf(text, sizeof(text), "lane %d: test() of group %d member %d failed: %d", l.index,
               o.group, o.k, static_cast<int>(rc));
      return fail_dump(text);
    }
    if (!done) return 0;
    *progress = true;
    if (!l.sender && check_recv(l, o, sizes) != 0) return 1;
    for (int i = 0; i < o.n; ++i) l.free_slots.push_back(o.slots[i]);
    l.out.pop_front();
    ++l.completed;
    if (l.out.empty() && !l.retry && l.group == static_cast<int>(l.plan.size())) {
      if (check_slot_canaries(l) != 0) return 1;
      // A round is over on this lane.
      if (++l.round == cfg.rounds) {
        l.finished = true;
        return 0;
      }
      if (cfg.rereg) {
        if (dereg(l) != 0 || reg(l) != 0) return 1;
      }
      l.plan = make_plan(cfg, l.index, l.round, l.sender_rank);
      l.group = 0;
      l.k = 0;
    }
    return 0;
  }

  int run() {
    for (Lane& l : lanes)
      if (setup(l) != 0) return 1;
    std::atomic<bool> stop{false};
    std::atomic<int> reg_fail{0};
    std::atomic<uint64_t> reg_count{0};
    std::thread regger;
    if (cfg.reg_thread && !lanes.empty()) {
      void* comm = lanes[0].comm;
      regger = std::thread([&, comm] {
        std::vector<unsigned char> extra(1 << 20);
        while (!stop.load(std::memory_order_relaxed)) {
          void* mh = nullptr;
          const size_t off = static_cast<size_t>(reg_count.load() % 64) * 4096;
          if (p.reg_mr(comm, extra.data() + off, extra.size() - off, NCCL_PTR_HOST, &mh) !=
                  ncclSuccess ||
              mh == nullptr || p.dereg_mr(comm, mh) != ncclSuccess) {
            reg_fail.store(1);
            return;
          }
          reg_count.fetch_add(1);
        }
      });
    }
    int rc = 0;
    // The traffic starts once the second thread has registered once: on a loaded machine a short
    // schedule could otherwise finish before the thread first ran, and prove nothing about
    // registrations racing the data path (an explorer run in CI failed that way).
    if (regger.joinable()) {
      const auto wait0 = Clock::now();
      while (reg_count.load() == 0 && reg_fail.load() == 0) {
        if (Clock::now() - wait0 > std::chrono::milliseconds(cfg.timeout_ms)) {
          rc = fail_dump("the second thread did not register within the timeout");
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    const auto t0 = Clock::now();
    auto last = t0;
    for (; rc == 0;) {
      bool all = true;
      bool progress = false;
      for (Lane& l : lanes) {
        if (l.finished) continue;
        all = false;
        const size_t before = l.out.size();
        const bool retry_before = l.retry;
        if (post(l) != 0 || test_oldest(l, &progress) != 0) {
          rc = 1;
          break;
        }
        if (l.out.size() != before || l.retry != retry_before) progress = true;
      }
      if (rc != 0 || all) break;
      if (reg_fail.load() != 0) {
        rc = fail_dump("regMr/deregMr from the second thread failed");
        break;
      }
      if (progress) {
        last = Clock::now();
      } else if (Clock::now() - last > std::chrono::milliseconds(cfg.timeout_ms)) {
        rc = fail_dump("no progress: requests stay pending");
        break;
      }
    }
    stop.store(true);
    if (regger.joinable()) regger.join();
    if (getenv("NF_STRESS_VERBOSE") != nullptr) {
      uint64_t done = 0, nulls = 0;
      for (const Lane& l : lanes) done += l.completed, nulls += l.nulls;
      fprintf(stderr,
              "[%s] %s: %zu lanes, %llu requests completed, %llu NULL answers, %.2f s, "
              "%llu registrations from the second thread\n",
              who.c_str(), describe(cfg).c_str(), lanes.size(),
              static_cast<unsigned long long>(done), static_cast<unsigned long long>(nulls),
              std::chrono::duration<double>(Clock::now() - t0).count(),
              static_cast<unsigned long long>(reg_count.load()));
    }
    return rc;
  }

  // close_with_work: every lane posts what its window allows (one try each, NULL answers left
  // alone), of the next round's plan; nothing is waited for.
  int post_unwaited() {
    for (Lane& l : lanes) {
      l.plan = make_plan(cfg, l.index, cfg.rounds, l.sender_rank);
      l.group = l.k = 0;
      l.finished = false;
      l.retry = false;
      l.out.clear();
      l.free_slots.clear();
      for (int s = 0; s < l.nslots; ++s) l.free_slots.push_back(l.nslots - 1 - s);
      if (post(l) != 0) return 1;
    }
    return 0;
  }

  // After both sides are done: deregister, close, free the memory right away (as NCCL does).
  int teardown() {
    for (Lane& l : lanes) {
      if (dereg(l) != 0) return 1;
      CHILD_CHECK((l.sender ? p.close_send(l.comm) : p.close_recv(l.comm)) == ncclSuccess,
                  "close lane %d", l.index);
      std::vector<unsigned char>().swap(l.mem);
    }
    lanes.clear();
    return 0;
  }
};

}  // namespace

std::string describe(const DriverConfig& c) {
  char b[400];
  snprintf(b, sizeof(b),
           "seed=%llu comms=%d+%d window=%d messages=%d groups=%s%d tags=%s%s "
           "slot=%zu random<=%zu hint=%d rounds=%d%s%s%s%s%s%s",
           static_cast<unsigned long long>(c.seed), c.comms_10, c.comms_01, c.window, c.messages,
           c.group_fixed ? "" : "1..", c.group_max,
           c.tags == TagMode::kRank       ? "rank"
           : c.tags == TagMode::kDistinct ? "distinct"
                                          : "repeated",
           c.shuffle_sends ? " shuffled" : "", c.slot_bytes, c.max_random, c.optional_hint ? 1 : 0,
           c.rounds, c.rereg ? " rereg" : "", c.per_slot_reg ? " per-slot-reg" : "",
           c.reg_thread ? " reg-thread" : "", c.phandle_array ? " phandle-array" : "",
           c.idle_max_ms > 0 ? (" idle<=" + std::to_string(c.idle_max_ms) + "ms").c_str() : "",
           c.close_with_work ? " close-with-work" : "");
  return b;
}

uint64_t stress_seed(uint64_t fallback) {
  const char* s = getenv("NF_STRESS_SEED");
  return s != nullptr && *s ? strtoull(s, nullptr, 0) : fallback;
}

int stress_seeds(int fallback) {
  const char* s = getenv("NF_STRESS_SEEDS");
  return s != nullptr && *s ? atoi(s) : fallback;
}

int drive_pair_side(Side& s, const DriverConfig& cfg) {
  nfc::NetPlugin& p = s.plugin;
  p.set_phandle_array(cfg.phandle_array);
  const int total = cfg.comms_10 + cfg.comms_01;
  Driver d(p, cfg, "rank " + std::to_string(s.rank));
  // Lane L: rank 1 sends for L < comms_10, rank 0 for the rest.
  std::vector<void*> listens(static_cast<size_t>(total), nullptr);
  for (int L = 0; L < total; ++L) {
    const int sender = L < cfg.comms_10 ? 1 : 0;
    Lane l;
    l.index = L;
    l.sender = sender == s.rank;
    l.sender_rank = sender;
    d.lanes.push_back(std::move(l));
  }
  for (Lane& l : d.lanes) {
    if (l.sender) continue;
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    CHILD_CHECK(p.listen(0, handle, &listens[static_cast<size_t>(l.index)]) == ncclSuccess,
                "listen");
    CHILD_CHECK(s.oob.send(handle, sizeof(handle), kTimeoutMs), "oob send");
  }
  std::vector<std::vector<char>> handles(static_cast<size_t>(total));
  for (Lane& l : d.lanes) {
    if (!l.sender) continue;
    handles[static_cast<size_t>(l.index)].assign(NCCL_NET_HANDLE_MAXSIZE, 0);
    CHILD_CHECK(s.oob.recv(handles[static_cast<size_t>(l.index)].data(), NCCL_NET_HANDLE_MAXSIZE,
                           kTimeoutMs),
                "oob recv");
  }
  const auto start = Clock::now();
  for (;;) {
    bool all = true;
    for (Lane& l : d.lanes) {
      if (l.comm != nullptr) continue;
      if (l.sender)
        CHILD_CHECK(
            p.connect(0, handles[static_cast<size_t>(l.index)].data(), &l.comm) == ncclSuccess,
            "connect lane %d", l.index);
      else
        CHILD_CHECK(p.accept(listens[static_cast<size_t>(l.index)], &l.comm) == ncclSuccess,
                    "accept lane %d", l.index);
      all = all && l.comm != nullptr;
    }
    if (all) break;
    CHILD_CHECK(Clock::now() - start < std::chrono::milliseconds(kTimeoutMs),
                "connection setup timed out");
  }
  for (void* lc : listens)
    if (lc != nullptr) CHILD_CHECK(p.close_listen(lc) == ncclSuccess, "closeListen");
  int rc = d.run();
  // Both sides finish their data before either closes.
  CHILD_CHECK(s.oob.barrier(rc == 0 ? kTimeoutMs * 2 : 1000) || rc != 0, "barrier after the run");
  if (rc != 0) return rc;
  if (cfg.close_with_work) {
    if (d.post_unwaited() != 0) return 1;
    const auto t = Clock::now();
    if (d.teardown() != 0) return 1;
    const double took = std::chrono::duration<double>(Clock::now() - t).count();
    // Closes wait for the provider within one bound for the endpoint (NCCL_FABRIC_PEER_TIMEOUT/2,
    // 5 s at most here), plus the drain of what the peer still sends.
    CHILD_CHECK(took < 12.0, "closing %d comms with work in flight took %.1f s",
                cfg.comms_10 + cfg.comms_01, took);
    return 0;
  }
  return d.teardown();
}

int drive_single(nfc::NetPlugin& p, const DriverConfig& cfg) {
  const int total = cfg.comms_10 + cfg.comms_01;
  Driver d(p, cfg, "single");
  for (int L = 0; L < total; ++L) {
    void* sc = nullptr;
    void* rc = nullptr;
    std::string err;
    CHILD_CHECK(nfc::connect_pair(p, 0, &sc, &rc, kTimeoutMs, &err), "connect lane %d: %s", L,
                err.c_str());
    const int sender = L < cfg.comms_10 ? 1 : 0;
    Lane ls, lr;
    ls.index = lr.index = L;
    ls.sender = true;
    ls.sender_rank = lr.sender_rank = sender;
    ls.comm = sc;
    lr.comm = rc;
    d.lanes.push_back(std::move(ls));
    d.lanes.push_back(std::move(lr));
  }
  if (d.run() != 0) return 1;
  return d.teardown();
}

}  // namespace nft
