// Event queues (fi_eq_open on the fabric). On EFA's RDM endpoint an EQ carries only errors that
// belong to no operation (a failed handshake with a peer, internal packet failures); with none
// bound, EFA prints the error and calls abort(). The mock writes such errors for
// MOCKEFA_EQ_ERROR_AFTER (see raise_eq_errors in mock_progress.cpp). fi_eq_write adds user
// events when the EQ was opened with FI_WRITE. Reading an EQ never drives progress.
#include <cstdio>

#include "mock_internal.h"

namespace mockefa {

fi_ops g_eq_fi_ops;
fi_ops_eq g_eq_ops;

namespace {

Eq* eq_of(fid_eq* f) { return self_of<Eq>(f); }

int eq_close(fid* f) {
  Lock lk(g().mu);
  Eq* eq = eq_of(reinterpret_cast<fid_eq*>(f));
  if (eq->bound_eps) {
    violation(MOCKEFA_V_BUSY_CLOSE, "fi_close(eq) with %d endpoint(s) bound", eq->bound_eps);
    return -FI_EBUSY;
  }
  eq->fabric->eqs--;
  delete eq;
  g().counters.open_eqs--;
  return 0;
}

int eq_control(fid*, int, void*) { return -FI_ENOSYS; }  // no wait object to hand out

// fi_eq_read: one event per call, its payload copied up to len bytes (as libfabric's util EQ).
// An error at the head makes every read answer -FI_EAVAIL until fi_eq_readerr takes it.
ssize_t eq_read(fid_eq* feq, uint32_t* event, void* buf, size_t len, uint64_t flags) {
  Lock lk(g().mu);
  Eq* eq = eq_of(feq);
  if (eq->entries.empty()) return -FI_EAGAIN;
  const EqEntry& e = eq->entries.front();
  if (e.is_error) return -FI_EAVAIL;
  if (event) *event = e.event;
  ssize_t n = 0;
  if (buf) {
    n = static_cast<ssize_t>(std::min(len, e.bytes.size()));
    if (n) std::memcpy(buf, e.bytes.data(), static_cast<size_t>(n));
  }
  if (!(flags & FI_PEEK)) eq->entries.pop_front();
  return n;
}

// fi_eq_readerr: the head entry if it is an error, else -FI_EAGAIN. err_data follows fi_eq(3):
// with err_data_size 0 on input (or no buffer) the pointer is the provider's copy, valid until the
// next fi_eq_readerr on this EQ; otherwise min(sizes) bytes are copied into the caller's buffer
// (always NUL-terminated) and err_data_size says how many.
ssize_t eq_readerr(fid_eq* feq, fi_eq_err_entry* out, uint64_t flags) {
  if (!out) return -FI_EINVAL;
  Lock lk(g().mu);
  Eq* eq = eq_of(feq);
  if (eq->entries.empty() || !eq->entries.front().is_error) return -FI_EAGAIN;
  const EqEntry& e = eq->entries.front();
  void* user_buf = out->err_data;
  const size_t user_size = out->err_data_size;
  out->fid = e.fid;
  out->context = e.context;
  out->data = e.data;
  out->err = e.err;
  out->prov_errno = e.prov_errno;
  const size_t need = e.err_data.size() + 1;
  if (e.err_data.empty()) {
    // No provider data (EFA's EQ errors): err_data_size 0, and no pointer of ours.
    out->err_data_size = 0;
    if (!(user_size && user_buf)) out->err_data = nullptr;
  } else if (user_size && user_buf) {
    const size_t n = std::min(user_size, need);
    std::memcpy(user_buf, e.err_data.c_str(), n);
    static_cast<char*>(user_buf)[n - 1] = '\0';
    out->err_data_size = n;
  } else {
    eq->err_buf = e.err_data;
    out->err_data = const_cast<char*>(eq->err_buf.c_str());
    out->err_data_size = need;
  }
  if (!(flags & FI_PEEK)) eq->entries.pop_front();
  return static_cast<ssize_t>(sizeof(fi_eq_err_entry));
}

ssize_t eq_write(fid_eq* feq, uint32_t event, const void* buf, size_t len, uint64_t /*flags*/) {
  if (len && !buf) return -FI_EINVAL;
  Lock lk(g().mu);
  Eq* eq = eq_of(feq);
  if (!(eq->flags & FI_WRITE)) return -FI_EINVAL;  // fi_eq(3): only on an EQ opened with FI_WRITE
  EqEntry e;
  e.event = event;
  if (len) e.bytes.assign(static_cast<const uint8_t*>(buf), static_cast<const uint8_t*>(buf) + len);
  eq->entries.push_back(std::move(e));
  return static_cast<ssize_t>(len);
}

ssize_t eq_sread(fid_eq*, uint32_t*, void*, size_t, int, uint64_t) { return -FI_ENOSYS; }

const char* eq_strerror(fid_eq*, int prov_errno, const void* err_data, char* buf, size_t len) {
  const char* s = err_data ? static_cast<const char*>(err_data) : efa_strerror(prov_errno);
  if (buf && len) {
    std::snprintf(buf, len, "%s", s);
    return buf;
  }
  return s;
}

}  // namespace

int mock_eq_open(fid_fabric* fabric, fi_eq_attr* attr, fid_eq** feq, void* context) {
  if (!fabric || !attr || !feq) return -FI_EINVAL;
  // Polling only: no wait objects (fi_eq_sread answers -FI_ENOSYS), as the mock's CQs.
  if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC) return -FI_ENOSYS;
  if (attr->flags & ~(FI_WRITE | FI_AFFINITY)) return -FI_EINVAL;  // util EQ's check
  Lock lk(g().mu);
  Fabric* fab = self_of<Fabric>(fabric);
  auto* eq = new Eq();
  eq->h.self = eq;
  eq->h.fid.fid.fclass = FI_CLASS_EQ;
  eq->h.fid.fid.context = context;
  eq->h.fid.fid.ops = &g_eq_fi_ops;
  eq->h.fid.ops = &g_eq_ops;
  eq->fabric = fab;
  eq->flags = attr->flags;
  fab->eqs++;
  g().counters.open_eqs++;
  *feq = &eq->h.fid;
  return 0;
}

void eq_write_error(Eq* eq, fid_t fid, void* context, int err, int prov_errno,
                    std::string err_data) {
  EqEntry e;
  e.event = FI_NOTIFY;
  e.is_error = true;
  e.fid = fid;
  e.context = context;
  e.err = err;
  e.prov_errno = prov_errno;
  e.err_data = std::move(err_data);
  eq->entries.push_back(std::move(e));
}

void eq_forget_fid(Eq* eq, fid_t fid) {
  // libfabric's util endpoint drops its events from the EQ when it closes.
  auto& v = eq->entries;
  v.erase(std::remove_if(v.begin(), v.end(), [fid](const EqEntry& e) { return e.fid == fid; }),
          v.end());
}

void init_eq_ops() {
  fill_object_fi_ops(&g_eq_fi_ops, eq_close);
  g_eq_fi_ops.control = eq_control;
  g_eq_ops.size = sizeof(fi_ops_eq);
  g_eq_ops.read = eq_read;
  g_eq_ops.readerr = eq_readerr;
  g_eq_ops.write = eq_write;
  g_eq_ops.sread = eq_sread;
  g_eq_ops.strerror = eq_strerror;
}

}  // namespace mockefa
