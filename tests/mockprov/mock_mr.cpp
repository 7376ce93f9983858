// Memory registration: fi_mr_reg / fi_mr_regv / fi_mr_regattr with provider-chosen keys.
// The descriptor (fi_mr_desc) is the Mr object itself; the checker accepts a descriptor only if
// it is in the live set, so a stale or foreign pointer is caught without dereferencing it.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "mock_internal.h"

namespace mockefa {

fi_ops g_mr_fi_ops;
fi_ops_mr g_mr_ops;

namespace {

constexpr uint64_t kKnownAccess =
    FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

bool seg_uses(const std::vector<Seg>& segs, const Mr* mr) {
  for (const Seg& s : segs)
    if (s.mr == mr) return true;
  return false;
}

int mr_close(fid* f) {
  Lock lk(g().mu);
  Mr* mr = self_of<Mr>(reinterpret_cast<fid_mr*>(f));
  mr_closing(mr);
  g().live_mrs.erase(mr);
  g().mr_by_key.erase(mr->key);
  mr->domain->children--;
  if (mr->dmabuf_ref >= 0) close(mr->dmabuf_ref);
  if (mr->unflushed) g().counters.gpu_unflushed_mrs--;
  delete mr;
  g().counters.open_mrs--;
  return 0;
}

// FI_MR_DMABUF: the region is [base_addr + offset, +len) of the caller's address space, and
// must be what bytes [offset, offset + len) of the dma-buf hold. The fd is only looked at: the
// caller may close it as soon as we return (NCCL does), so it is not kept.
int check_dmabuf(const Domain* d, const fi_mr_dmabuf* db) {
  // EFA passes FI_MR_DMABUF to ibv_reg_dmabuf_mr; a kernel without dma-buf MR support answers
  // EOPNOTSUPP, which EFA returns as -FI_EOPNOTSUPP.
  if (!d->profile.dmabuf) return -FI_EOPNOTSUPP;
  if (fcntl(db->fd, F_GETFD) == -1) {
    violation(MOCKEFA_V_DMABUF_FD, "FI_MR_DMABUF with fd %d, which is not open", db->fd);
    return -FI_EINVAL;
  }
  // A fakecuda dma-buf (tests/fakecuda) is a memfd named after the device range it exports.
  char link[64], target[256];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", db->fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return 0;
  target[n] = '\0';
  unsigned long long start = 0, size = 0;
  if (std::sscanf(target, "/memfd:fakecuda-dmabuf:%llx:%llx", &start, &size) != 2) return 0;
  const uintptr_t va = reinterpret_cast<uintptr_t>(db->base_addr) + db->offset;
  if (db->offset > size || db->len > size - db->offset) {
    violation(MOCKEFA_V_DMABUF_RANGE,
              "FI_MR_DMABUF offset %llu + len %zu past the end of the dma-buf (fd %d, %llu bytes)",
              static_cast<unsigned long long>(db->offset), db->len, db->fd, size);
    return -FI_EINVAL;
  }
  if (reinterpret_cast<uintptr_t>(db->base_addr) != start) {
    violation(MOCKEFA_V_DMABUF_RANGE,
              "FI_MR_DMABUF base_addr %p is not the address of the dma-buf's first byte (0x%llx): "
              "the region "
              "[0x%llx, +%zu) would name other memory than it holds",
              db->base_addr, start, static_cast<unsigned long long>(va), db->len);
    return -FI_EINVAL;
  }
  return 0;
}

int mr_reg_common(fid* fdom, const iovec* iov, size_t count, uint64_t access, uint64_t flags,
                  int iface, int device, void* context, fid_mr** out) {
  if (!fdom || !out) return -FI_EINVAL;
  if (flags & ~(FI_HMEM_DEVICE_ONLY | FI_MR_DMABUF)) return -FI_EBADFLAGS;
  Lock lk(g().mu);
  if (fdom->fclass != FI_CLASS_DOMAIN || fdom->ops != &g_domain_fi_ops) return -FI_EINVAL;
  Domain* d = self_of<Domain>(reinterpret_cast<fid_domain*>(fdom));
  const uint32_t api = d->fabric->api_version;
  if ((flags & FI_MR_DMABUF) && api < kApi120) {
    // EFA adds FI_MR_DMABUF to the flags it accepts only at API >= 1.20 (efa_mr_regattr).
    violation(MOCKEFA_V_API_VERSION,
              "FI_MR_DMABUF on a fabric opened at API %u.%u: EFA takes it from 1.20 on",
              FI_MAJOR(api), FI_MINOR(api));
    return -FI_EBADFLAGS;
  }
  const fi_mr_dmabuf* dmabuf = nullptr;
  iovec dmabuf_iov{};
  if (flags & FI_MR_DMABUF) {
    // mr_iov and dmabuf share a union in fi_mr_attr (1.20+); EFA still checks iov_count <= 1.
    dmabuf = reinterpret_cast<const fi_mr_dmabuf*>(static_cast<const void*>(iov));
    if (!dmabuf || count > kMrIovLimit) return -FI_EINVAL;
    const uintptr_t va = reinterpret_cast<uintptr_t>(dmabuf->base_addr) + dmabuf->offset;
    dmabuf_iov.iov_base = reinterpret_cast<void*>(va);
    dmabuf_iov.iov_len = dmabuf->len;
    iov = &dmabuf_iov;
    count = 1;
  }
  if (count != kMrIovLimit || !iov) return -FI_EINVAL;  // EFA: mr_iov_limit is 1
  if (!iov[0].iov_base && iov[0].iov_len) return -FI_EINVAL;
  bool cuda_soft_key = false;
  if (iface == FI_HMEM_CUDA) {
    // The mock pretends a CUDA runtime exists (host memory stands in for device memory)
    // unless MOCKEFA_GDR=nocuda, where EFA answers -FI_ENOSYS.
    if (d->profile.gdr == GdrMode::kNoCuda) return -FI_ENOSYS;
    if (!(d->caps & FI_HMEM))
      iface = FI_HMEM_SYSTEM;  // EFA logs and treats it as host memory
    else
      cuda_soft_key = d->profile.gdr == GdrMode::kNoP2p;
  } else if (iface != FI_HMEM_SYSTEM) {
    return (iface > FI_HMEM_SYSTEM && iface <= FI_HMEM_SYNAPSEAI) ? -FI_ENOSYS : -FI_EINVAL;
  }
  if (dmabuf) {
    if (int rc = check_dmabuf(d, dmabuf)) return rc;
  }
  auto* mr = new Mr();
  mr->h.self = mr;
  mr->h.fid.fid.fclass = FI_CLASS_MR;
  mr->h.fid.fid.context = context;
  mr->h.fid.fid.ops = &g_mr_fi_ops;
  mr->h.fid.mem_desc = mr;
  mr->domain = d;
  mr->base = reinterpret_cast<uintptr_t>(iov[0].iov_base);
  mr->len = iov[0].iov_len;
  mr->access = access & kKnownAccess;
  if (!mr->access) mr->access = FI_SEND | FI_RECV;
  mr->iface = iface;
  mr->device = device;
  if (dmabuf) mr->dmabuf_ref = fcntl(dmabuf->fd, F_DUPFD_CLOEXEC, 0);
  if (cuda_soft_key) {
    // EFA without P2P keeps CUDA registrations in its own map with keys from 2^32 up.
    mr->key = g().next_cuda_key++;
  } else {
    do {
      mr->key = g().next_key;
      g().next_key = g().next_key == UINT32_MAX ? 0x1000 : g().next_key + 1;
    } while (g().mr_by_key.count(mr->key));
  }
  mr->h.fid.key = mr->key;
  g().live_mrs.insert(mr);
  g().mr_by_key[mr->key] = mr;
  d->children++;
  g().counters.open_mrs++;
  g().counters.mr_registrations++;
  *out = &mr->h.fid;
  return 0;
}

int mr_reg(fid* fdom, const void* buf, size_t len, uint64_t access, uint64_t /*offset*/,
           uint64_t /*requested_key*/, uint64_t flags, fid_mr** mr, void* context) {
  if (flags & FI_MR_DMABUF) return -FI_EBADFLAGS;  // a dma-buf can only be described by fi_mr_attr
  iovec iov{const_cast<void*>(buf), len};
  return mr_reg_common(fdom, &iov, 1, access, flags, FI_HMEM_SYSTEM, 0, context, mr);
}

int mr_regv(fid* fdom, const iovec* iov, size_t count, uint64_t access, uint64_t /*offset*/,
            uint64_t /*requested_key*/, uint64_t flags, fid_mr** mr, void* context) {
  if (flags & FI_MR_DMABUF) return -FI_EBADFLAGS;
  return mr_reg_common(fdom, iov, count, access, flags, FI_HMEM_SYSTEM, 0, context, mr);
}

int mr_regattr(fid* fdom, const fi_mr_attr* attr, uint64_t flags, fid_mr** mr) {
  if (!attr) return -FI_EINVAL;
  int device = attr->iface == FI_HMEM_CUDA ? attr->device.cuda : 0;
  return mr_reg_common(fdom, attr->mr_iov, attr->iov_count, attr->access, flags, attr->iface,
                       device, attr->context, mr);
}

}  // namespace

Mr* live_mr(const void* desc) {
  auto it = g().live_mrs.find(static_cast<const Mr*>(desc));
  return it == g().live_mrs.end() ? nullptr : const_cast<Mr*>(*it);
}

Mr* mr_for_key(uint64_t key) {
  auto it = g().mr_by_key.find(key);
  return it == g().mr_by_key.end() ? nullptr : it->second;
}

void mr_closing(Mr* mr) {
  // Deregistering memory an op still uses is an application bug; the op then fails when it
  // would touch the memory (the mock never copies from or into memory it no longer trusts).
  auto flag_op = [mr](Op* op) {
    bool uses = seg_uses(op->segs, mr) || seg_uses(op->recv.segs, mr);
    bool rma_target = (op->kind == OpKind::kWrite || op->kind == OpKind::kRead) &&
                      op->st == OpState::kLanding && op->rma_key == mr->key && op->len;
    if ((uses || rma_target) && !op->mr_lost) {
      op->mr_lost = true;
      violation(MOCKEFA_V_MR_IN_USE, "fi_close(mr key=0x%llx) while op %llu still uses it",
                static_cast<unsigned long long>(mr->key), static_cast<unsigned long long>(op->id));
    }
  };
  for (Op* op : g().wire) flag_op(op);
  for (auto& kv : g().eps_by_serial) {
    Ep* ep = kv.second;
    for (Op* op : ep->unexpected_msg) flag_op(op);
    for (Op* op : ep->unexpected_tagged) flag_op(op);
    for (auto* lst : {&ep->posted_msg, &ep->posted_tagged}) {
      for (RecvReq& r : *lst) {
        if (seg_uses(r.segs, mr) && !r.mr_lost) {
          r.mr_lost = true;
          violation(MOCKEFA_V_MR_IN_USE, "fi_close(mr key=0x%llx) while a posted receive uses it",
                    static_cast<unsigned long long>(mr->key));
        }
      }
    }
  }
}

void init_mr_ops() {
  fill_object_fi_ops(&g_mr_fi_ops, mr_close);
  g_mr_ops.size = sizeof(fi_ops_mr);
  g_mr_ops.reg = mr_reg;
  g_mr_ops.regv = mr_regv;
  g_mr_ops.regattr = mr_regattr;
}

}  // namespace mockefa
