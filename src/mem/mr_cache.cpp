#include "mem/mr_cache.h"

#include "util/log.h"

namespace nf {
namespace {

constexpr uintptr_t kPage = 4096;

}  // namespace

void attach_mr_cache(Domain& dom) {
  dom.attach(std::unique_ptr<DomainAttachment>(new MrCache(&dom)));
}
MrCache& mr_cache(const Domain& dom) { return *static_cast<MrCache*>(dom.attachment()); }
void MrEntry::release() {
  if (owner != nullptr) {
    owner->release(this);
    return;
  }
  // Its cache (domain) went first: close it on its own.
  MemReg r = reg;
  r.cached = nullptr;
  deregister_memory(&r);
  delete this;
}
void mr_cache_retire(HeldReg* held) {
  // Every HeldReg is an MrEntry: mem/ is the only layer that hands them out.
  auto* e = static_cast<MrEntry*>(held);
  if (e != nullptr && e->owner != nullptr) e->owner->retire(e);
}

MrCache::~MrCache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (MrEntry* e : entries_) {
    if (e->refs > 0) {
      // A registration NCCL never released: closing it under a live handle would be worse.
      NF_INFO(kSubsysNet, "domain %s closes with %d reference(s) to a registration of %zu bytes",
              dom_->name().c_str(), e->refs, e->reg.len);
      e->owner = nullptr;
      continue;
    }
    deregister_memory(&e->reg);
    delete e;
  }
  entries_.clear();
}

void MrCache::set_limit(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  limit_ = n;  // listed entries past it stay until their last user (none is idle)
}

MrCache::Stats MrCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.held = entries_.size();
  return s;
}

void MrCache::close_entry(MrEntry* e) {
  if (e->listed) entries_.remove(e);
  MemReg r = e->reg;
  r.cached = nullptr;
  deregister_memory(&r);
  delete e;
}

Status MrCache::acquire(fid_ep* ep, void* buf, size_t len, uint64_t remote_access,
                        const PtrInfo& info, const MemSpec& spec, MemReg* out) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(buf);
  const bool cuda = info.kind != MemKind::kHost;
  std::lock_guard<std::mutex> lock(mu_);
  const bool share = limit_ > 0 && (dom_->mr_mode() & FI_MR_ENDPOINT) == 0 && len > 0;
  // Offset addressing (no FI_MR_VIRT_ADDR): peers address from the registration's start, which
  // must then be the buffer's on every rail: exact ranges only.
  const bool exact = (dom_->mr_mode() & FI_MR_VIRT_ADDR) == 0;
  if (share) {
    for (auto it = entries_.begin(); it != entries_.end();) {
      MrEntry* e = *it++;
      if (e->stale || e->kind != info.kind || e->device != (cuda ? info.device : 0)) continue;
      const bool overlaps = e->start < b + len && b < e->end;
      if (cuda && overlaps && e->buffer_id != info.buffer_id) {
        // The memory under this entry was freed and the range handed out again.
        e->stale = true;
        ++stats_.stale;  // closed by its last user
        continue;
      }
      if (e->start <= b && b + len <= e->end && (!exact || e->start == b) &&
          (e->remote_access & remote_access) == remote_access) {
        ++e->refs;
        ++stats_.hits;
        *out = e->reg;
        out->cached = e;
        return Status::kOk;
      }
    }
  }
  // Register: host memory by whole pages (its neighbours in those pages then share it); CUDA
  // memory likewise but within its allocation; a DMA-BUF exactly as given. Host memory that peers
  // may write into exactly as given too: a peer's write may reach whatever the key covers, and
  // the bytes around NCCL's buffer in its first and last page are not NCCL's to offer (a hostile
  // peer's write to them was accepted before: tests/plugin/test_hostile.cpp).
  uintptr_t start = b, end = b + len;
  const bool peers_write = !cuda && (remote_access & FI_REMOTE_WRITE) != 0;
  if (spec.dmabuf_fd < 0 && len > 0 && !exact && !peers_write) {
    start = b & ~(kPage - 1);
    end = (b + len + kPage - 1) & ~(kPage - 1);
    if (cuda && info.alloc_size > 0) {
      if (start < info.alloc_base) start = info.alloc_base;
      if (end > info.alloc_base + info.alloc_size) end = info.alloc_base + info.alloc_size;
    }
  }
  MemSpec s = spec;
  s.kind = info.kind;
  s.device = cuda ? info.device : 0;
  std::unique_ptr<MrEntry> e(new MrEntry());
  NF_CHECK(register_memory_spec(*dom_, ep, reinterpret_cast<void*>(start), end - start,
                                remote_access, s, &e->reg));
  ++stats_.misses;
  e->owner = this;
  e->start = start;
  e->end = end;
  e->kind = info.kind;
  e->device = s.device;
  e->buffer_id = info.buffer_id;
  e->remote_access = remote_access;
  e->refs = 1;
  if (share) {
    if (entries_.size() < limit_) {
      e->listed = true;
      entries_.push_back(e.get());
    }
  }
  *out = e->reg;
  out->cached = e.release();
  return Status::kOk;
}

void MrCache::release(MrEntry* e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (--e->refs > 0) return;
  // Closed with its last user, whatever the memory (issue 35): an idle GPU registration kept for
  // reuse pinned memory NCCL had freed (a DMA-BUF MR holds the dma-buf) and left its remote key
  // valid, a leak under communicator churn. Sharing stays for registrations held at once.
  close_entry(e);
}

void MrCache::retire(MrEntry* e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!e->stale) ++stats_.stale;
  e->stale = true;
}

}  // namespace nf
