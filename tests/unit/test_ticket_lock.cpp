// The shared endpoint's lock must be fair: a thread that waits for it gets it at the next
// hand-over, even when the holder takes it again at once (as NCCL's progress thread does in its
// test() loop). An unfair lock starved the keeper thread (docs/performance.md).
#include <atomic>
#include <chrono>
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

TEST_CASE("ticket lock: try_lock never passes a holder or a waiter", "[lock]") {
  TicketLock lock;
  REQUIRE(lock.try_lock());
  REQUIRE_FALSE(lock.try_lock());  // held
  std::thread waiter([&] {
    lock.lock();
    lock.unlock();
  });
  while (lock.queued() < 2) std::this_thread::yield();
  lock.unlock();
  // The waiter's ticket is served next: try_lock may succeed only once it is done.
  waiter.join();
  REQUIRE(lock.try_lock());
  lock.unlock();
  REQUIRE(lock.queued() == 0);
}

TEST_CASE("ticket lock: lock_politely gets in while another thread retakes it at once", "[lock]") {
  // The keeper's way in (core/liveness.cpp): a thread in a tight lock/unlock loop, as NCCL's
  // progress thread is, must not keep it out (the unfair spin lock of cfffa45 did).
  TicketLock lock;
  std::atomic<bool> stop{false};
  std::atomic<bool> polite_in{false};
  std::atomic<long> loops{0};
  std::thread busy([&] {
    while (!stop.load()) {
      lock.lock();
      loops.fetch_add(1);
      lock.unlock();
    }
  });
  while (loops.load() < 1000) std::this_thread::yield();
  std::atomic<bool> keeper_done{false};
  std::thread keeper([&] {
    for (int i = 0; i < 20; ++i) {
      lock.lock_politely();
      polite_in.store(true);
      lock.unlock();
    }
    keeper_done.store(true);
  });
  // Bounded: a starved keeper fails the test (the busy thread then stops, letting it finish).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!keeper_done.load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool in_while_busy = keeper_done.load();
  stop.store(true);
  busy.join();
  keeper.join();
  REQUIRE(polite_in.load());
  REQUIRE(in_while_busy);
}
