// A lock for the data path: one atomic exchange to take it and one store to give it back when
// nobody else holds it (std::mutex, through glibc, costs about ten times that: 57 instructions a
// lock/unlock pair under callgrind). The shared endpoint's lock is taken by NCCL's progress thread
// on every isend/irecv/test and only now and then by anyone else (the handshake on the service
// thread, the keeper's pass every few seconds, close), none of which sleeps while holding it; so
// a waiter spins briefly and then yields the CPU rather than sleeping in the kernel.
// BasicLockable: std::lock_guard<SpinLock> works. TSan sees the acquire/release pair.
#pragma once
#include <atomic>
#include <thread>

namespace nf {

class SpinLock {
 public:
  void lock() noexcept {
    if (!held_.exchange(true, std::memory_order_acquire)) return;
    lock_slow();
  }
  bool try_lock() noexcept {
    return !held_.load(std::memory_order_relaxed) &&
           !held_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  void lock_slow() noexcept {
    for (int spins = 0;; ++spins) {
      // Read until it looks free (no cache-line ping-pong of failed exchanges), then try.
      while (held_.load(std::memory_order_relaxed)) {
        if (spins < 128) {
          ++spins;
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        } else {
          std::this_thread::yield();  // the holder may be waiting for this CPU
        }
      }
      if (!held_.exchange(true, std::memory_order_acquire)) return;
    }
  }

  std::atomic<bool> held_{false};
};

}  // namespace nf
