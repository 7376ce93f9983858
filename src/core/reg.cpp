// Registration of NCCL's buffers (on every rail, through the domain's cache) and the GPUDirect
// flush: one place for both protocols.
#include "core/comm.h"

#include <climits>
#include <cstring>
#include <thread>

#include <rdma/fi_errno.h>

#include "core/liveness.h"
#include "fabric/errors.h"
#include "mem/mr_cache.h"

#include "util/clock.h"
#include "util/log.h"

namespace nf {

// One read per rail of the connection, rail k through rail k's endpoint from its own address: a
// read orders only the earlier PCIe writes of the NIC that issues it, and the peer's writes into
// this buffer came through every rail (issue 35: the read went through rail 0 only). Posts from
// r->posted on; -FI_EAGAIN leaves the rest for test().
Status post_flush(Comm& c, Request* r) {
  MemHandle* mh = r->flush.mh;
  const uintptr_t a = reinterpret_cast<uintptr_t>(r->flush.buf);
  while (r->posted < r->n) {
    const int k = r->posted;
    Endpoint* ep = c.sep->rail(k);
    const MemReg& dst = mh->rail_reg(k);
    void* desc = k == 0 ? c.ctrl_reg.desc : c.flush_reg[k - 1].desc;
    const fi_addr_t self = k == 0 ? c.sep->self : c.sep->self_rail[k];
    ssize_t rc = fi_read(ep->ep(), c.ctrl->flush, r->flush.len, desc, self, a - dst.remote_base,
                         dst.key, &r->ops[k]);
    if (rc == -FI_EAGAIN) return Status::kOk;  // posted later, from test()
    if (rc != 0) {
      r->n = r->posted;  // only what was posted will complete
      Status s = fi_fail("fi_read(GPUDirect flush)", static_cast<int>(rc), "our own endpoint");
      fail_request(r, s);
      return s;
    }
    op_posted(r, mh);
  }
  return Status::kOk;
}

Status comm_reg_mr(Comm& c, void* data, size_t size, const PtrInfo& info, const MemSpec& spec,
                   MemHandle** out) {
  std::unique_ptr<MemHandle> mh(new MemHandle());
  mh->magic = kMrMagic;
  mh->comm = &c;
  const bool rdma = c.protocol->writes;
  uint64_t remote = 0;
  if (rdma && c.role == CommRole::kRecv) remote |= FI_REMOTE_WRITE;  // the peer writes into it
  // The GPUDirect flush reads received GPU memory back through our own endpoint.
  if (info.kind != MemKind::kHost && c.role == CommRole::kRecv &&
      c.params.get_bool(ParamId::kFlush))
    remote |= FI_REMOTE_READ;
  for (int r = 0; r < (rdma ? c.nrails : 1); ++r) {
    Endpoint* ep = c.sep->rail(r);
    Status s =
        mr_cache(ep->domain()).acquire(ep->ep(), data, size, remote, info, spec, &mh->rail_reg(r));
    if (!ok(s)) {
      mh->deregister();  // the rails before this one (the others hold nothing)
      return s;
    }
    if (c.params.get_bool(ParamId::kTestDropDesc)) mh->rail_reg(r).desc = nullptr;  // see its doc
  }
  *out = mh.release();
  return Status::kOk;
}

Status comm_iflush(Comm& c, void* data, MemHandle* mh, Request** out) {
  *out = nullptr;
  std::lock_guard<TicketLock> lock(c.sep->mu);
  if (!ok(c.sep->failed)) return c.sep->failed;
  // Our own address on every rail of the connection, and the landing bytes registered there.
  const int rails = c.protocol->writes ? c.nrails : 1;
  for (int k = 0; k < rails; ++k) {
    fi_addr_t* self = k == 0 ? &c.sep->self : &c.sep->self_rail[k];
    if (*self == FI_ADDR_UNSPEC) {
      uint8_t name[kMaxAddrLen];
      size_t len = sizeof(name);
      NF_CHECK(c.sep->rail(k)->name(name, &len));
      if (k == 0)
        NF_CHECK(c.sep->insert_peer(name, len, self));
      else
        NF_CHECK(c.sep->insert_rail_peer(k, name, len, self));
    }
    if (k > 0 && c.flush_reg[k - 1].mr == nullptr) {
      Endpoint* ep = c.sep->rail(k);
      NF_CHECK(register_memory(ep->domain(), ep->ep(), c.ctrl->flush, sizeof(c.ctrl->flush),
                               &c.flush_reg[k - 1]));
    }
  }
  Request* r = take_request(c, ReqType::kFlush, rails);
  if (r == nullptr) {
    // A NULL flush request means "flushed" to NCCL: running out must be an error.
    NF_WARN("iflush with %s: every request of the comm is in use", c.peer_name.c_str());
    return Status::kInternalError;
  }
  r->flush.buf = data;
  r->flush.len = 4;  // a few bytes are enough to order the earlier PCIe writes
  r->flush.mh = mh;
  Status s = post_flush(c, r);
  if (!ok(s)) {
    request_release(r);
    return s;
  }
  *out = r;
  return Status::kOk;
}

Status comm_dereg_mr(Comm& c, MemHandle* mh) {
  if (mh->uses.load(std::memory_order_acquire) > 0) {
    // NCCL deregisters before it closes, also after an abort with receives still posted into this
    // memory. Closing the registration under them would let the NIC write into memory that is
    // about to be freed: it goes when the comm closes, after its operations are reaped.
    NF_INFO(kSubsysNet,
            "deregMr of memory still used by %d operation(s) with %s: released when "
            "the comm closes",
            mh->uses.load(std::memory_order_relaxed), c.peer_name.c_str());
    // The handle stays too: a completion dispatched by another comm's progress still counts on it.
    // Its registrations are never shared again: NCCL frees the memory next.
    mr_cache_retire(mh->reg.cached);
    for (MemReg& m : mh->more) mr_cache_retire(m.cached);
    mh->magic = 0;
    c.retired.emplace_back(mh);
    return Status::kOk;
  }
  mh->deregister();
  mh->magic = 0;
  delete mh;
  return Status::kOk;
}

}  // namespace nf
