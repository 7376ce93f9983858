// fi_rma entry points. All of them feed post(); the target-side checks (key, bounds, access)
// happen when the op reaches the target, as on EFA where a bad key is an asynchronous error.
#include "mock_internal.h"

namespace mockefa {

fi_ops_rma g_rma_ops;

namespace {

ssize_t rma_post(fid_ep* f, OpKind kind, const iovec* iov, void** desc, size_t count,
                 fi_addr_t addr, const fi_rma_iov* rma, size_t rma_count, void* context,
                 uint64_t flags, uint64_t data, bool inject_call) {
  PostArgs a;
  a.kind = kind;
  a.iov = iov;
  a.desc = desc;
  a.count = count;
  a.addr = addr;
  a.rma = rma;
  a.rma_count = rma_count;
  a.context = context;
  a.flags = flags;
  a.data = data;
  a.inject_call = inject_call;
  return post(self_of<Ep>(f), a);
}

uint64_t default_flags(fid_ep* f) { return self_of<Ep>(f)->tx_op_flags & FI_COMPLETION; }

size_t iov_total(const iovec* iov, size_t count) {
  size_t n = 0;
  for (size_t i = 0; iov && i < count; ++i) n += iov[i].iov_len;
  return n;
}

ssize_t rma_read(fid_ep* ep, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t addr,
                 uint64_t key, void* context) {
  iovec iov{buf, len};
  fi_rma_iov r{addr, len, key};
  return rma_post(ep, OpKind::kRead, &iov, &desc, 1, src, &r, 1, context, default_flags(ep), 0,
                  false);
}

ssize_t rma_readv(fid_ep* ep, const iovec* iov, void** desc, size_t count, fi_addr_t src,
                  uint64_t addr, uint64_t key, void* context) {
  fi_rma_iov r{addr, iov_total(iov, count), key};
  return rma_post(ep, OpKind::kRead, iov, desc, count, src, &r, 1, context, default_flags(ep), 0,
                  false);
}

ssize_t rma_readmsg(fid_ep* ep, const fi_msg_rma* m, uint64_t flags) {
  if (!m) return -FI_EINVAL;
  return rma_post(ep, OpKind::kRead, m->msg_iov, m->desc, m->iov_count, m->addr, m->rma_iov,
                  m->rma_iov_count, m->context, flags & ~(FI_REMOTE_CQ_DATA | FI_INJECT), 0, false);
}

ssize_t rma_write(fid_ep* ep, const void* buf, size_t len, void* desc, fi_addr_t dest,
                  uint64_t addr, uint64_t key, void* context) {
  iovec iov{const_cast<void*>(buf), len};
  fi_rma_iov r{addr, len, key};
  return rma_post(ep, OpKind::kWrite, &iov, &desc, 1, dest, &r, 1, context, default_flags(ep), 0,
                  false);
}

ssize_t rma_writev(fid_ep* ep, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
                   uint64_t addr, uint64_t key, void* context) {
  fi_rma_iov r{addr, iov_total(iov, count), key};
  return rma_post(ep, OpKind::kWrite, iov, desc, count, dest, &r, 1, context, default_flags(ep), 0,
                  false);
}

ssize_t rma_writemsg(fid_ep* ep, const fi_msg_rma* m, uint64_t flags) {
  if (!m) return -FI_EINVAL;
  return rma_post(ep, OpKind::kWrite, m->msg_iov, m->desc, m->iov_count, m->addr, m->rma_iov,
                  m->rma_iov_count, m->context, flags, m->data, false);
}

ssize_t rma_inject(fid_ep* ep, const void* buf, size_t len, fi_addr_t dest, uint64_t addr,
                   uint64_t key) {
  iovec iov{const_cast<void*>(buf), len};
  fi_rma_iov r{addr, len, key};
  return rma_post(ep, OpKind::kWrite, &iov, nullptr, 1, dest, &r, 1, nullptr, FI_INJECT, 0, true);
}

ssize_t rma_writedata(fid_ep* ep, const void* buf, size_t len, void* desc, uint64_t data,
                      fi_addr_t dest, uint64_t addr, uint64_t key, void* context) {
  iovec iov{const_cast<void*>(buf), len};
  fi_rma_iov r{addr, len, key};
  return rma_post(ep, OpKind::kWrite, &iov, &desc, 1, dest, &r, 1, context,
                  default_flags(ep) | FI_REMOTE_CQ_DATA, data, false);
}

ssize_t rma_injectdata(fid_ep* ep, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                       uint64_t addr, uint64_t key) {
  iovec iov{const_cast<void*>(buf), len};
  fi_rma_iov r{addr, len, key};
  return rma_post(ep, OpKind::kWrite, &iov, nullptr, 1, dest, &r, 1, nullptr,
                  FI_INJECT | FI_REMOTE_CQ_DATA, data, true);
}

}  // namespace

void init_rma_ops() {
  g_rma_ops.size = sizeof(fi_ops_rma);
  g_rma_ops.read = rma_read;
  g_rma_ops.readv = rma_readv;
  g_rma_ops.readmsg = rma_readmsg;
  g_rma_ops.write = rma_write;
  g_rma_ops.writev = rma_writev;
  g_rma_ops.writemsg = rma_writemsg;
  g_rma_ops.inject = rma_inject;
  g_rma_ops.writedata = rma_writedata;
  g_rma_ops.injectdata = rma_injectdata;
}

}  // namespace mockefa
