// Completion queues. Reading a CQ is what drives progress: fi_cq_read/readfrom first run a
// progress pass on every endpoint bound to the CQ, then hand out the entries that are visible.
#include <cstdio>

#include "mock_internal.h"

namespace mockefa {

fi_ops g_cq_fi_ops;
fi_ops_cq g_cq_ops;

namespace {

void release_ctx(const CqEntry& e) {
  if (!e.track_ctx) return;
  Ep* ep = ep_by_serial(e.ep_serial);
  if (!ep) return;
  auto one = ep->inflight_ctx.find(e.op_context);
  if (one != ep->inflight_ctx.end()) ep->inflight_ctx.erase(one);
  auto it = ep->ctx_marks.find(e.op_context);
  if (it == ep->ctx_marks.end()) return;
  uintptr_t w[2];
  std::memcpy(w, e.op_context, sizeof w);
  if (w[0] != it->second.first || w[1] != it->second.second)
    violation(MOCKEFA_V_CTX_CLOBBERED,
              "efa-direct context %p was written by the application while its op was in flight "
              "(FI_CONTEXT2: the provider owns it until the completion is read)",
              e.op_context);
  ep->ctx_marks.erase(it);
}

void write_entry(const Cq* cq, const CqEntry& e, uint8_t* out) {
  switch (cq->format) {
    case FI_CQ_FORMAT_MSG: {
      fi_cq_msg_entry m{e.op_context, e.flags, e.len};
      std::memcpy(out, &m, sizeof m);
      break;
    }
    case FI_CQ_FORMAT_DATA: {
      fi_cq_data_entry d{e.op_context, e.flags, e.len, e.buf, e.data};
      std::memcpy(out, &d, sizeof d);
      break;
    }
    case FI_CQ_FORMAT_TAGGED: {
      fi_cq_tagged_entry t{e.op_context, e.flags, e.len, e.buf, e.data, e.tag};
      std::memcpy(out, &t, sizeof t);
      break;
    }
    default: {
      fi_cq_entry c{e.op_context};
      std::memcpy(out, &c, sizeof c);
      break;
    }
  }
}

size_t entry_size(fi_cq_format f) {
  switch (f) {
    case FI_CQ_FORMAT_MSG: return sizeof(fi_cq_msg_entry);
    case FI_CQ_FORMAT_DATA: return sizeof(fi_cq_data_entry);
    case FI_CQ_FORMAT_TAGGED: return sizeof(fi_cq_tagged_entry);
    default: return sizeof(fi_cq_entry);
  }
}

ssize_t cq_read_common(fid_cq* fcq, void* buf, size_t count, fi_addr_t* src) {
  if (!buf && count) return -FI_EINVAL;
  Lock lk(g().mu);
  PassGuard pass;
  Cq* cq = self_of<Cq>(fcq);
  g().counters.cq_reads++;
  bool reorder = false;
  for (Ep* ep : std::vector<Ep*>(cq->eps)) {
    progress_ep(ep);
    reorder = reorder || ep->faults.cq_reorder || ep->reorder;
  }
  std::vector<size_t> visible;
  for (size_t i = 0; i < cq->entries.size(); ++i)
    if (cq->entries[i].hidden == 0 && !cq->entries[i].held) visible.push_back(i);
  if (reorder && visible.size() > 1) {
    std::shuffle(visible.begin(), visible.end(), cq->rng);
    if (!std::is_sorted(visible.begin(), visible.end())) count_fault(MOCKEFA_F_CQ_REORDER);
  }
  size_t out = 0;
  bool eavail = false;
  std::vector<size_t> taken;
  auto* dst = static_cast<uint8_t*>(buf);
  for (size_t idx : visible) {
    const CqEntry& e = cq->entries[idx];
    if (e.is_error) {
      // Entries ahead of an error are returned; the error itself needs fi_cq_readerr.
      eavail = out == 0;
      break;
    }
    if (out == count) break;
    write_entry(cq, e, dst + out * cq->entry_size);
    if (src) src[out] = e.src;
    ++out;
    taken.push_back(idx);
  }
  std::sort(taken.begin(), taken.end(), std::greater<size_t>());
  for (size_t idx : taken) {
    release_ctx(cq->entries[idx]);
    cq->entries.erase(cq->entries.begin() + static_cast<std::ptrdiff_t>(idx));
  }
  for (CqEntry& e : cq->entries)
    if (e.hidden) --e.hidden;
  if (out) return static_cast<ssize_t>(out);
  return eavail ? -FI_EAVAIL : -FI_EAGAIN;
}

ssize_t cq_read(fid_cq* cq, void* buf, size_t count) {
  return cq_read_common(cq, buf, count, nullptr);
}

ssize_t cq_readfrom(fid_cq* cq, void* buf, size_t count, fi_addr_t* src_addr) {
  return cq_read_common(cq, buf, count, src_addr);
}

ssize_t cq_readerr(fid_cq* fcq, fi_cq_err_entry* out, uint64_t /*flags*/) {
  if (!out) return -FI_EINVAL;
  Lock lk(g().mu);
  Cq* cq = self_of<Cq>(fcq);
  auto it = std::find_if(cq->entries.begin(), cq->entries.end(),
                         [](const CqEntry& e) { return e.is_error && e.hidden == 0; });
  if (it == cq->entries.end()) return -FI_EAGAIN;
  const CqEntry& e = *it;
  void* user_buf = out->err_data;
  size_t user_size = out->err_data_size;
  out->op_context = e.op_context;
  out->flags = e.flags;
  out->len = e.len;
  out->buf = e.buf;
  out->data = e.data;
  out->tag = e.tag;
  out->olen = e.olen;
  out->err = e.err;
  out->prov_errno = e.prov_errno;
  const size_t need = e.err_data.size() + 1;
  if (user_size && user_buf) {
    // fi_cq(3): copy into the caller's buffer and say how much was copied; keep it a string.
    size_t n = std::min(user_size, need);
    std::memcpy(user_buf, e.err_data.c_str(), n);
    static_cast<char*>(user_buf)[n - 1] = '\0';
    out->err_data_size = n;
  } else {
    // Provider-owned copy, valid until the next read on this CQ.
    cq->err_buf = e.err_data;
    out->err_data = const_cast<char*>(cq->err_buf.c_str());
    out->err_data_size = need;
  }
  release_ctx(e);
  cq->entries.erase(it);
  return 1;
}

ssize_t cq_sread(fid_cq*, void*, size_t, const void*, int) { return -FI_ENOSYS; }
ssize_t cq_sreadfrom(fid_cq*, void*, size_t, fi_addr_t*, const void*, int) { return -FI_ENOSYS; }
int cq_signal(fid_cq*) { return -FI_ENOSYS; }

const char* cq_strerror(fid_cq*, int prov_errno, const void* err_data, char* buf, size_t len) {
  const char* s = err_data ? static_cast<const char*>(err_data) : efa_strerror(prov_errno);
  if (buf && len) {
    std::snprintf(buf, len, "%s", s);
    return buf;
  }
  return s;
}

int cq_close(fid* f) {
  Lock lk(g().mu);
  Cq* cq = self_of<Cq>(reinterpret_cast<fid_cq*>(f));
  if (!cq->eps.empty()) {
    violation(MOCKEFA_V_BUSY_CLOSE, "fi_close(cq) with %zu endpoint(s) bound", cq->eps.size());
    return -FI_EBUSY;
  }
  cq->domain->children--;
  delete cq;
  g().counters.open_cqs--;
  return 0;
}

}  // namespace

void complete_entry(Ep* ep, Cq* cq, CqEntry e, bool want_completion) {
  if ((!e.is_error && !want_completion) || !cq) {
    release_ctx(e);
    return;
  }
  e.hidden = ep ? ep->faults.cq_delay : 0;
  e.held = ep && ep->faults.hold_send_completions && !e.is_error && (e.flags & FI_SEND) &&
           !(e.flags & FI_RMA);
  if (e.hidden) count_fault(MOCKEFA_F_CQ_DELAY);
  if (e.is_error)
    g().counters.error_completions++;
  else
    g().counters.completions++;
  cq->entries.push_back(std::move(e));
}

int mock_cq_open(fid_domain* domain, fi_cq_attr* attr, fid_cq** fcq, void* context) {
  if (!domain || !attr || !fcq) return -FI_EINVAL;
  switch (attr->format) {
    case FI_CQ_FORMAT_UNSPEC:
    case FI_CQ_FORMAT_CONTEXT:
    case FI_CQ_FORMAT_MSG:
    case FI_CQ_FORMAT_DATA:
    case FI_CQ_FORMAT_TAGGED: break;
    default: return -FI_EINVAL;
  }
  // No wait objects: fi_cq_sread is not supported (EFA's RDM users poll).
  if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC) return -FI_ENOSYS;
  if (attr->wait_cond != FI_CQ_COND_NONE) return -FI_ENOSYS;
  Lock lk(g().mu);
  Domain* d = self_of<Domain>(domain);
  auto* cq = new Cq();
  cq->h.self = cq;
  cq->h.fid.fid.fclass = FI_CLASS_CQ;
  cq->h.fid.fid.context = context;
  cq->h.fid.fid.ops = &g_cq_fi_ops;
  cq->h.fid.ops = &g_cq_ops;
  cq->domain = d;
  cq->format = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format;
  cq->entry_size = entry_size(cq->format);
  cq->rng.seed(faults_for_new_endpoint().seed ^ (g().next_serial++ * 0xC2B2AE3D27D4EB4Full));
  d->children++;
  g().counters.open_cqs++;
  *fcq = &cq->h.fid;
  return 0;
}

void init_cq_ops() {
  fill_object_fi_ops(&g_cq_fi_ops, cq_close);
  g_cq_ops.size = sizeof(fi_ops_cq);
  g_cq_ops.read = cq_read;
  g_cq_ops.readfrom = cq_readfrom;
  g_cq_ops.readerr = cq_readerr;
  g_cq_ops.sread = cq_sread;
  g_cq_ops.sreadfrom = cq_sreadfrom;
  g_cq_ops.signal = cq_signal;
  g_cq_ops.strerror = cq_strerror;
}

}  // namespace mockefa
