// Profiler events (profile.h, docs/profiler.md).
#include "core/profile.h"

#include "core/comm.h"

namespace nf {
namespace {

void* start(const Comm& c, void* phandle, ProfDescr* d) {
  void* eh = nullptr;
  c.prof.call(c.prof.fn, &eh, kProfStart, phandle, kProfPluginId, d);
  return eh;
}

void stop(const Comm& c, void** eh) {
  if (*eh == nullptr) return;
  c.prof.call(c.prof.fn, eh, kProfStop, nullptr, kProfPluginId, nullptr);
  *eh = nullptr;
}

ProfDescr describe(const Comm& c, uint8_t type, uint8_t op) {
  ProfDescr d{};
  d.type = type;
  d.op = op;
  d.proto = c.protocol->writes ? 1 : 0;
  d.comm = c.id;
  d.tag = -1;
  return d;
}

}  // namespace

void prof_take(Comm& c, Request* r) {
  // Called when the gate reached 0: ask (again) whether a profiler collects our events.
  c.prof_gate = kProfRecheck;
  if (c.prof.fn == nullptr) {
    c.prof_gate = UINT32_MAX;  // no callback (NCCL < 2.26 or the plugin's own tools)
    return;
  }
  if (c.cur_phandle == nullptr) {
    c.prof_gate = 1;  // not one of NCCL's isend/irecv (a notice): ask on the next request
    return;
  }
  if (!c.prof_slots) c.prof_slots.reset(new ProfReq[c.pool->capacity()]);
  ProfReq& p = c.prof_slots[c.pool->index_of(r)];
  p = ProfReq();
  p.phandle = c.cur_phandle;
  p.req = describe(c, kProfReq, r->type == ReqType::kSend ? 1 : 2);
  p.req.bytes = c.cur_bytes;
  p.req.tag = c.cur_tag;
  p.req_eh = start(c, p.phandle, &p.req);
  if (p.req_eh == nullptr) return;  // nobody collects: ask again kProfRecheck requests later
  c.prof_gate = 1;                  // a profiler collects: every request
  r->prof = &p;
}

void prof_op_start(Request* r, int idx) {
  ProfReq& p = *r->prof;
  const Comm& c = *r->comm;
  uint8_t op;
  ProfDescr d;
  if (r->type == ReqType::kSend) {
    const bool write = r->send.op_len[idx] != 0;
    op = !c.protocol->writes ? kOpTaggedSend : write ? kOpWrite : kOpEagerSend;
    d = describe(c, kProfOp, op);
    d.rail = write ? r->send.op_rail[idx] : 0;
    d.bytes = write ? r->send.op_len[idx] : r->send.size;
  } else {
    op = c.protocol->writes ? kOpCts : kOpTaggedRecv;
    d = describe(c, kProfOp, op);
    d.bytes = c.protocol->writes ? 0 : r->recv.caps[idx];
  }
  d.index = static_cast<uint32_t>(idx);
  p.op[idx] = d;
  p.op_eh[idx] = start(c, p.phandle, &p.op[idx]);
}

void prof_op_stop(Request* r, int idx) { stop(*r->comm, &r->prof->op_eh[idx]); }

void prof_mark(Request* r, uint8_t type, int idx, uint64_t bytes) {
  ProfReq& p = *r->prof;
  const Comm& c = *r->comm;
  ProfDescr d = describe(c, type, 0);
  d.index = static_cast<uint32_t>(idx);
  d.bytes = bytes;
  void* eh = start(c, p.phandle, &d);
  stop(c, &eh);
}

void prof_finish(Request* r) {
  ProfReq& p = *r->prof;
  const Comm& c = *r->comm;
  for (void*& eh : p.op_eh) stop(c, &eh);
  stop(c, &p.req_eh);
  r->prof = nullptr;
}

void prof_wait_start(Comm& c, uint64_t bytes, int tag) {
  if (c.prof.fn == nullptr || c.cur_phandle == nullptr || c.prof_wait_eh != nullptr) return;
  if (c.prof_gate != 1) return;  // nobody collects (as far as the last request showed)
  c.prof_wait = describe(c, kProfCtsWait, 0);
  c.prof_wait.bytes = bytes;
  c.prof_wait.tag = tag;
  c.prof_wait_eh = start(c, c.cur_phandle, &c.prof_wait);
}

void prof_wait_stop(Comm& c) { stop(c, &c.prof_wait_eh); }

}  // namespace nf
