// The registration cache of one domain: NCCL registers the same memory on many comms (shared P2P
// pools, user buffers registered again and again), and a GPUDirect registration costs a kernel
// call that pins GPU pages. A registration that already covers a range (same memory kind, device
// and access) is shared, with a reference count.
//
// Every entry closes with its last reference: an idle GPU registration would pin memory NCCL freed
// and keep its remote key valid (issue 35). While held, a CUDA entry whose range now belongs to
// another allocation (its buffer id, which the driver never reuses, differs) is recognised as
// stale and never handed out again; host memory has no such id, and a range freed and mapped
// again while a registration of it is held is not noticed (NCCL deregisters before it frees).
// Providers that bind registrations to an endpoint (FI_MR_ENDPOINT) get no sharing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>

#include "fabric/fabric.h"
#include "mem/cuda.h"

namespace nf {

class MrCache;

struct MrEntry final : HeldReg {
  void release() override;  // deregister_memory() of a copy of `reg`: back to `owner`
  MrCache* owner = nullptr;
  MemReg reg;  // reg.base/len: what is registered (may be wider than what was asked)
  uintptr_t start = 0, end = 0;
  MemKind kind = MemKind::kHost;
  int device = 0;
  uint64_t buffer_id = 0;
  uint64_t remote_access = 0;
  int refs = 0;
  bool stale = false;
  bool listed = false;  // in the cache's list (false: a one-off registration)
};

class MrCache final : public DomainAttachment {
 public:
  explicit MrCache(Domain* dom) : dom_(dom) {}
  ~MrCache() override;
  MrCache(const MrCache&) = delete;
  MrCache& operator=(const MrCache&) = delete;

  // A registration covering [buf, buf+len) with at least `remote_access` (FI_REMOTE_WRITE/READ),
  // for memory described by `info` (the caller classified it) and `spec` (how to register it on
  // a miss). *out is a copy whose `cached` names the entry: deregister_memory() releases it.
  Status acquire(fid_ep* ep, void* buf, size_t len, uint64_t remote_access, const PtrInfo& info,
                 const MemSpec& spec, MemReg* out);
  void release(MrEntry* e);
  // NCCL deregistered the memory while the provider still uses it (it is about to be freed): the
  // entry is never handed out again, so that memory mapped later at the same address is
  // registered afresh rather than sharing a registration of the old pages.
  void retire(MrEntry* e);

  // Entries listed for sharing (all held); 0 turns sharing off. Applies from the next acquire.
  void set_limit(size_t n);

  struct Stats {
    uint64_t hits = 0, misses = 0, stale = 0;
    size_t held = 0;  // entries listed now (every one is held: none outlives its last user)
  };
  Stats stats() const;

 private:
  void close_entry(MrEntry* e);  // under mu_

  Domain* dom_;
  mutable std::mutex mu_;
  std::list<MrEntry*> entries_;
  size_t limit_ = 1024;
  Stats stats_;
};

// Gives a domain just opened its registration cache (once, before it is shared).
void attach_mr_cache(Domain& dom);
// The cache attach_mr_cache gave `dom`.
MrCache& mr_cache(const Domain& dom);
// A registration from a cache (`held`: MemReg::cached): NCCL deregistered the memory while the
// provider still uses it, see MrCache::retire. Nothing for a registration not from a cache.
void mr_cache_retire(HeldReg* held);

}  // namespace nf
