// The shared endpoint's lock must be fair: a thread that waits for it gets it at the next
// hand-over, even when the holder takes it again at once (as NCCL's progress thread does in its
// test() loop). An unfair lock starved the keeper thread (docs/performance.md).
#include <atomic>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "util/ticket_lock.h"

using nf::TicketLock;

TEST_CASE("ticket lock: a waiter is served before the holder takes it again", "[lock]") {
  TicketLock lock;
  for (int round = 0; round < 200; ++round) {
    std::atomic<int> order{0};
    int waiter_turn = -1;
    int holder_turn = -1;
    lock.lock();
    std::thread waiter([&] {
      lock.lock();
      waiter_turn = order.fetch_add(1);
      lock.unlock();
    });
    while (lock.queued() < 2) std::this_thread::yield();  // the waiter holds a ticket
    lock.unlock();
    lock.lock();  // straight back, like a tight test() loop
    holder_turn = order.fetch_add(1);
    lock.unlock();
    waiter.join();
    REQUIRE(waiter_turn == 0);
    REQUIRE(holder_turn == 1);
  }
}

TEST_CASE("ticket lock: mutual exclusion under contention", "[lock]") {
  TicketLock lock;
  long counter = 0;  // guarded by lock only: a lost update (or TSan) shows a broken lock
  constexpr int kThreads = 3;
  constexpr int kIters = 20000;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < kIters; ++i) {
        lock.lock();
        ++counter;
        lock.unlock();
      }
    });
  for (auto& t : ts) t.join();
  REQUIRE(counter == static_cast<long>(kThreads) * kIters);
  REQUIRE(lock.queued() == 0);  // free: nobody holds it, nobody waits
}
