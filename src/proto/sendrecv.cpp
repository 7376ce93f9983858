// The SENDRECV protocol: one tagged message per send, one tagged receive per buffer. Its data
// travels in the request's own operations, so core's generic completion handling is all it needs.
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
namespace {

// Posts the receive operations a request still owes. Stops at -FI_EAGAIN (the rest is posted by a
// later progress call, before any later receive: FIFO is kept).
Status post_recvs(Comm& c, Request* r) {
  RecvJob& j = r->recv;
  while (r->posted < r->n) {
    const int i = r->posted;
    ssize_t rc = fi_trecv(c.ep->ep(), j.bufs[i], j.caps[i], j.descs[i], FI_ADDR_UNSPEC, j.tags[i],
                          0, &r->ops[i]);
    if (rc == -FI_EAGAIN) {
      c.st.eagain.add();
      return Status::kOk;
    }
    if (rc != 0) {
      Status s = fi_fail("fi_trecv", static_cast<int>(rc), c.peer_name.c_str());
      fail_request(r, s);
      r->n = r->posted;  // what was never posted will never complete
      return s;
    }
    op_posted(r, j.mhs[i]);
  }
  return Status::kOk;
}

Status sr_isend(Comm& c, void* data, size_t size, int tag, MemHandle* mh, Request** out) {
  *out = nullptr;
  std::lock_guard<TicketLock> lock(c.sep->mu);
  if (Status s = comm_usable(c); !ok(s)) return s;
  Request* r = take_request(c, ReqType::kSend, 1);
  if (r == nullptr) {
    // Every request is out: reap completions; NCCL asks again.
    return comm_progress(c);
  }
  r->send.buf = data;
  r->send.size = size;
  const uint64_t t = data_tag(c.cookie_out, tag);
  ssize_t rc;
  const bool inject = can_inject(c, size, mh);
  if (inject) {
    // The provider copies the data before returning and reports no completion.
    rc = fi_tinject(c.ep->ep(), data, size, c.peer, t);
    if (rc == 0) {
      r->state = ReqState::kDone;
      *out = r;
      return Status::kOk;
    }
  } else {
    void* desc = mh != nullptr ? mh->reg.desc : nullptr;
    rc = fi_tsend(c.ep->ep(), data, size, desc, c.peer, t, &r->ops[0]);
  }
  if (rc == 0) {
    r->send.mh = mh;  // its use is given back by complete_op
    op_posted(r, mh);
    *out = r;
    return Status::kOk;
  }
  request_release(r);
  if (rc == -FI_EAGAIN) {
    c.st.eagain.add();
    return comm_progress(c);
  }
  return fi_fail(inject ? "fi_tinject" : "fi_tsend", static_cast<int>(rc), c.peer_name.c_str());
}

Status sr_irecv(Comm& c, int n, void** data, const size_t* sizes, const int* tags,
                MemHandle* const* mhs, Request** out) {
  *out = nullptr;
  std::lock_guard<TicketLock> lock(c.sep->mu);
  if (Status s = comm_usable(c); !ok(s)) return s;
  if (c.deferred_head != nullptr) {
    // An earlier grouped receive is still being posted; this one must come after it.
    NF_CHECK(comm_progress(c));
    if (c.deferred_head != nullptr) return Status::kOk;
  }
  Request* r = take_request(c, ReqType::kRecv, n);
  if (r == nullptr) return comm_progress(c);
  RecvJob& j = r->recv;
  for (int i = 0; i < n; ++i) {
    j.bufs[i] = data[i];
    // No message is larger than max_msg_size: a larger buffer is posted as that much (EFA refuses
    // a receive above its limit).
    j.caps[i] = sizes[i] < c.max_msg_size ? sizes[i] : static_cast<size_t>(c.max_msg_size);
    j.descs[i] = mhs[i] != nullptr ? mhs[i]->reg.desc : nullptr;
    j.mhs[i] = mhs[i];
    j.tags[i] = data_tag(c.cookie_in, tags[i]);
  }
  Status s = post_recvs(c, r);
  if (!ok(s)) {
    if (r->posted == 0) {
      request_release(r);
      return s;
    }
    *out = r;  // test() reports the failure once the posted part is accounted for
    return Status::kOk;
  }
  if (r->posted == 0) {
    request_release(r);
    return comm_progress(c);
  }
  if (r->posted < r->n) defer(c, r);
  *out = r;
  return Status::kOk;
}

// SENDRECV's data travels in the receive's own operation, so the generic handling is all it needs.
Status sr_setup(Comm&) { return Status::kOk; }
bool sr_recv_op_done(Request*) { return false; }
bool sr_recv_op_failed(Request*, Status) { return false; }
// sr_isend posts at once or hands NCCL a NULL request: a SENDRECV send is never deferred.
Status sr_post_send(Comm& c, Request*) {
  NF_WARN("a SENDRECV send to %s was deferred, which never happens: a plugin bug, please report it",
          c.peer_name.c_str());
  return Status::kInternalError;
}
void sr_tail(Comm&) {}
void sr_close(Comm&) {}
bool sr_send_waiting(const Comm&) { return false; }
const char* sr_waiting_for(const Request& r) {
  if (r.type == ReqType::kFlush) return "waiting for the flush read";
  if (r.posted < r.n) return "waiting to be posted (the provider pushed back)";
  return r.type == ReqType::kSend ? "waiting for the send's completion" : "waiting for the data";
}

}  // namespace

const Protocol kSendRecvProtocol = {
    "SENDRECV",   sr_setup,     sr_isend,   sr_irecv, sr_recv_op_done, sr_recv_op_failed,
    fail_request, sr_post_send, post_recvs, nullptr,  sr_send_waiting, sr_waiting_for,
    nullptr,      nullptr,      sr_tail,    sr_close, false,           true};

}  // namespace nf
