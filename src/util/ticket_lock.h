// The shared endpoint's lock (SharedEp::mu): a ticket lock. NCCL's progress thread takes it on
// every isend/irecv/test; NCCL's service thread (handshake, close) and the plugin's keeper take it
// now and then, and nobody sleeps while holding it.
// - Cheap when free: one atomic add to take a ticket, one load that finds it served, one store to
//   hand over (glibc's std::mutex costs several times that per lock/unlock pair, callgrind:
//   docs/performance.md).
// - Fair: tickets are served in the order they were taken. An unfair spin lock (cfffa45, reverted)
//   let the progress thread retake the lock the moment it gave it back, so the keeper never got it
//   and a stopped peer went undetected; here a waiting keeper is served at the next hand-over.
// - A waiter spins briefly, then yields its CPU (the holder may need it: 2 cores, 3 threads).
// - But a ticket makes the next holder wait for its owner even while that owner is off its CPU: a
//   thread that can afford to wait (the keeper) uses lock_politely().
// BasicLockable (std::lock_guard works); TSan sees the acquire/release pair on serving_.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace nf {

class TicketLock {
 public:
  void lock() noexcept {
    const uint32_t ticket = next_.fetch_add(1, std::memory_order_relaxed);
    if (serving_.load(std::memory_order_acquire) == ticket) return;
    wait_for(ticket);
  }
  // Takes it only when nobody holds it or waits for it: no ticket is taken otherwise, so a caller
  // that can wait (the keeper) does not make the next holder queue behind it.
  bool try_lock() noexcept {
    uint32_t serving = serving_.load(std::memory_order_acquire);
    return next_.compare_exchange_strong(serving, serving + 1, std::memory_order_acquire,
                                         std::memory_order_relaxed);
  }
  // Threads holding or waiting for it now (tests, diagnostics): 0 when free.
  uint32_t queued() const noexcept {
    return next_.load(std::memory_order_relaxed) - serving_.load(std::memory_order_relaxed);
  }
  // try_lock a few times, sleeping in between, then queue (fair: it cannot be starved). On an
  // endpoint NCCL's progress thread keeps busy, a queued keeper cost large tcp transfers 5-7 %
  // (docs/performance.md).
  void lock_politely() noexcept {
    for (int i = 0; i < 64; ++i) {
      if (try_lock()) return;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    lock();
  }
  void unlock() noexcept {
    // Only the holder writes serving_.
    serving_.store(serving_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

 private:
  void wait_for(uint32_t ticket) noexcept {
    for (int spins = 0; serving_.load(std::memory_order_acquire) != ticket; ++spins) {
      if (spins < 128) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      } else {
        std::this_thread::yield();
      }
    }
  }

  std::atomic<uint32_t> next_{0};     // the next ticket handed out
  std::atomic<uint32_t> serving_{0};  // the ticket that holds the lock
};

}  // namespace nf
