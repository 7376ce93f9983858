// RAII over the libfabric objects of one NIC: domain, memory registration, endpoint. Which NICs
// there are, and of which provider and fabric, is discover.cpp's business.
#include "fabric/fabric.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include <rdma/fi_errno.h>

#include "fabric/errors.h"
#include "fabric/fi_compat.h"
#include "util/log.h"

namespace nf {

Status Domain::open(const Nic& nic, std::shared_ptr<Domain>* out) {
  std::shared_ptr<Domain> d(new Domain());
  d->info_.reset(fi_dupinfo(nic.info.get()));
  if (!d->info_) return Status::kSystemError;
  d->name_ = nic.domain;
  if (d->info_->fabric_attr != nullptr && d->info_->fabric_attr->name != nullptr)
    d->fabric_name_ = d->info_->fabric_attr->name;
  int rc = fi_fabric(d->info_->fabric_attr, &d->fabric_, nullptr);
  if (rc != 0) return fi_fail("fi_fabric", rc, nic.domain.c_str());
  rc = fi_domain(d->fabric_, d->info_.get(), &d->domain_, nullptr);
  if (rc != 0) return fi_fail("fi_domain", rc, nic.domain.c_str());
  *out = std::move(d);
  return Status::kOk;
}

Domain::~Domain() {
  attachment_.reset();  // its registrations first: a domain with MRs will not close
  if (domain_ != nullptr) fi_close(&domain_->fid);
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
}

Status register_memory(Domain& dom, fid_ep* ep, void* buf, size_t len, MemReg* out, bool remote) {
  return register_memory_spec(dom, ep, buf, len, remote ? FI_REMOTE_WRITE : 0, MemSpec(), out);
}

Status register_memory_spec(Domain& dom, fid_ep* ep, void* buf, size_t len, uint64_t remote_access,
                            const MemSpec& spec, MemReg* out, std::string* quiet) {
  *out = MemReg();
  out->base = reinterpret_cast<uintptr_t>(buf);
  out->len = len;
  out->kind = spec.kind;
  const uint64_t mode = dom.mr_mode();
  const bool cuda = spec.kind != MemKind::kHost;
  // Without FI_MR_LOCAL the provider needs no descriptor for sends and receives of host memory;
  // memory a peer reaches always needs a registration (its key), and so does GPU memory (the
  // provider must learn what it is).
  if (((mode & FI_MR_LOCAL) == 0 && remote_access == 0 && !cuda) || len == 0) return Status::kOk;
  const uint64_t key = (mode & FI_MR_PROV_KEY) ? 0 : dom.next_requested_key();
  uint64_t access = FI_SEND | FI_RECV | remote_access;
  // The local end of RMA too (a flush reads into host memory) where the domain does RMA at all.
  if (dom.info()->caps & FI_RMA) access |= FI_READ | FI_WRITE;
  if (remote_access & FI_REMOTE_WRITE) access |= FI_WRITE;
  if (remote_access & FI_REMOTE_READ) access |= FI_READ;
  int rc;
  const char* what = "fi_mr_reg";
  if (!cuda && spec.dmabuf_fd < 0) {
    rc = fi_mr_reg(dom.domain(), buf, len, access, 0, key, 0, &out->mr, nullptr);
  } else {
    iovec iov = {buf, len};
    FiMrDmabuf dmabuf = {spec.dmabuf_fd, spec.dmabuf_offset, len,
                         static_cast<uint8_t*>(buf) - spec.dmabuf_offset};
    FiMrAttrDmabuf attr = {};
    uint64_t flags = 0;
    if (spec.dmabuf_fd >= 0) {
      attr.dmabuf = &dmabuf;
      flags = kFiMrDmabuf;
      what = "fi_mr_regattr(FI_MR_DMABUF)";
    } else {
      attr.mr_iov = &iov;
      what = "fi_mr_regattr(FI_HMEM_CUDA)";
    }
    attr.iov_count = 1;
    attr.access = access;
    attr.requested_key = key;
    attr.iface = cuda ? FI_HMEM_CUDA : FI_HMEM_SYSTEM;
    attr.device.cuda = cuda ? spec.device : 0;
    rc = fi_mr_regattr(dom.domain(), reinterpret_cast<const fi_mr_attr*>(&attr), flags, &out->mr);
  }
  if (rc != 0) {
    char ctx[200];
    snprintf(ctx, sizeof(ctx), "registering %zu bytes of %s memory at %p on %s", len,
             mem_kind_name(spec.kind), buf, dom.name().c_str());
    out->mr = nullptr;
    if (quiet != nullptr) {
      *quiet = std::string(ctx) + ": " + fi_error_text(what, rc);
      return Status::kSystemError;
    }
    return fi_fail(what, rc, ctx);
  }
  if (mode & FI_MR_ENDPOINT) {
    rc = fi_mr_bind(out->mr, &ep->fid, 0);
    if (rc == 0) rc = fi_mr_enable(out->mr);
    if (rc != 0) {
      fi_close(&out->mr->fid);
      out->mr = nullptr;
      if (quiet != nullptr) {
        *quiet = fi_error_text("fi_mr_bind/fi_mr_enable", rc);
        return Status::kSystemError;
      }
      return fi_fail("fi_mr_bind/fi_mr_enable", rc, dom.name().c_str());
    }
  }
  out->desc = (mode & (FI_MR_LOCAL | FI_MR_HMEM)) || cuda ? fi_mr_desc(out->mr) : nullptr;
  out->key = fi_mr_key(out->mr);
  out->remote_base = (mode & FI_MR_VIRT_ADDR) ? 0 : out->base;
  return Status::kOk;
}

void deregister_memory(MemReg* reg) {
  if (reg->cached != nullptr) {
    reg->cached->release();
  } else if (reg->mr != nullptr) {
    int rc = fi_close(&reg->mr->fid);
    if (rc != 0) fi_fail("fi_close(mr)", rc, nullptr);
  }
  *reg = MemReg();
}

namespace {

int getopt_bool(fid_ep* ep, int opt, bool* out) {
  size_t len = sizeof(*out);
  return fi_getopt(&ep->fid, FI_OPT_ENDPOINT, opt, out, &len);
}

// A size_t option after fi_enable; 0 when the provider does not answer (unknown).
size_t getopt_size(fid_ep* ep, int opt) {
  size_t v = 0;
  size_t len = sizeof(v);
  if (fi_getopt(&ep->fid, FI_OPT_ENDPOINT, opt, &v, &len) != 0 || len != sizeof(v)) return 0;
  return v;
}

int setopt_bool(fid_ep* ep, int opt, bool v) {
  return fi_setopt(&ep->fid, FI_OPT_ENDPOINT, opt, &v, sizeof(v));
}

// The EFA endpoint options, before fi_enable. A provider that does not know them answers the
// first setopt with -FI_ENOPROTOOPT and is left alone. (Not detected with fi_getopt: libfabric
// 2.1's shm dereferences a NULL pointer in fi_getopt before fi_enable.) EFA itself may not know
// them either at API < 1.18: it counts as EFA-like by its name then, with nothing granted.
void efa_options(fid_ep* ep, const fi_info* info, EpFeatures* f) {
  const char* prov = info->fabric_attr != nullptr ? info->fabric_attr->prov_name : nullptr;
  const bool efa_name = prov != nullptr && strncmp(prov, "efa", 3) == 0;
  const uint32_t api = info->fabric_attr != nullptr ? info->fabric_attr->api_version : 0;
  auto answer = [](int rc) {
    return rc == 0 ? std::string("granted") : std::string("-") + fi_errno_name(rc);
  };
  bool known = false;
  if (getenv("FI_EFA_USE_DEVICE_RDMA") != nullptr) {
    f->device_rdma_note = "FI_EFA_USE_DEVICE_RDMA is set: the provider follows it";
  } else if (api < kFiApi118) {
    f->device_rdma_note = "API " + api_version_str(api) + " predates FI_OPT_EFA_USE_DEVICE_RDMA";
  } else {
    const int rc = setopt_bool(ep, kFiOptEfaUseDeviceRdma, true);
    if (rc == -FI_ENOPROTOOPT && !efa_name) return;
    known = rc != -FI_ENOPROTOOPT;
    f->device_rdma_set = rc == 0;
    if (rc != 0)
      f->device_rdma_note = fi_error_text("fi_setopt(FI_OPT_EFA_USE_DEVICE_RDMA=true)", rc);
  }
  int rc = setopt_bool(ep, kFiOptEfaWriteInOrder128, true);
  if (rc == -FI_ENOPROTOOPT && !known && !efa_name) return;
  f->efa_options = true;
  f->write_in_order_128 = rc == 0;
  f->in_order_note = "writes " + answer(rc);
  rc = setopt_bool(ep, kFiOptEfaSendrecvInOrder128, true);
  f->sendrecv_in_order_128 = rc == 0;
  f->in_order_note += ", send/recv " + answer(rc);
}

}  // namespace

// One try of open(): the endpoint, its bindings and options, enabled. Returns 0, or the failed
// call's code with *call naming it; what was opened stays for close_ep() or the destructor.
int Endpoint::enable(const char** call) {
  const fi_info* info = dom_->info();
  EpFeatures& f = features_;
  f = EpFeatures();
  int rc = fi_endpoint(dom_->domain(), const_cast<fi_info*>(info), &ep_, nullptr);
  if (rc != 0) {
    ep_ = nullptr;
    *call = "fi_endpoint";
    return rc;
  }
  rc = fi_ep_bind(ep_, &av_->fid, 0);
  if (rc != 0) {
    *call = "fi_ep_bind(av)";
    return rc;
  }
  rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV);
  if (rc != 0) {
    *call = "fi_ep_bind(cq)";
    return rc;
  }
  efa_options(ep_, info, &f);
  fi_eq_attr eq_attr = {};
  eq_attr.size = 64;
  eq_attr.wait_obj = FI_WAIT_NONE;
  rc = fi_eq_open(dom_->fabric(), &eq_attr, &eq_, nullptr);
  const char* eq_call = "fi_eq_open";
  if (rc == 0) {
    rc = fi_ep_bind(ep_, &eq_->fid, 0);
    eq_call = "fi_ep_bind(eq)";
  } else {
    eq_ = nullptr;
  }
  f.eq = rc == 0;
  if (rc != 0) {
    if (eq_ != nullptr) fi_close(&eq_->fid);
    eq_ = nullptr;
    // EFA calls abort() when an error that belongs to no operation finds no event queue.
    if (f.efa_options) {
      *call = eq_call;
      return rc;
    }
    static std::once_flag once;
    std::call_once(once, [&] {
      NF_INFO(kSubsysInit | kSubsysNet,
              "provider '%s' takes no event queue on its endpoints "
              "(%s): errors that belong to no operation are not seen",
              info->fabric_attr->prov_name, fi_error_text(eq_call, rc).c_str());
    });
  }
  if (dom_->forbid_cuda()) {
    bool permitted = false;
    rc = fi_setopt(&ep_->fid, FI_OPT_ENDPOINT, kFiOptCudaApiPermitted, &permitted,
                   sizeof(permitted));
    if (rc != 0) {
      *call = "fi_setopt(FI_OPT_CUDA_API_PERMITTED=false)";
      return rc;
    }
  }
  *call = "fi_enable";
  return fi_enable(ep_);
}

// Closes the endpoint and its event queue, for another try; the completion queue and address
// vector stay (closing the endpoint released its bindings to them).
void Endpoint::close_ep() {
  if (ep_ != nullptr) fi_close(&ep_->fid);
  ep_ = nullptr;
  if (eq_ != nullptr) fi_close(&eq_->fid);
  eq_ = nullptr;
}

// Endpoints open() tries in a row while fi_enable answers -FI_EBUSY. libfabric's shm (before 2.3)
// answers so when the region its endpoint is named after (/dev/shm/<pid>:<uid>:<n>) exists and
// names a live process, or a live one's pid: a region left by a process that was killed (SIGKILL,
// SIGABRT: no clean-up runs) names its own pid, which this process may now have. shm removes that
// region as it refuses, and another endpoint gets another name (n + 1), so a later try succeeds
// unless that name is stale too; a dead process had few endpoints.
constexpr int kEnableTries = 8;

Status Endpoint::open(std::shared_ptr<Domain> dom, size_t cq_size, std::unique_ptr<Endpoint>* out) {
  std::unique_ptr<Endpoint> e(new Endpoint());
  e->dom_ = std::move(dom);
  const fi_info* info = e->dom_->info();
  const char* where = e->dom_->name().c_str();

  fi_cq_attr cq_attr = {};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  cq_attr.size = cq_size;
  cq_attr.wait_obj = FI_WAIT_NONE;
  int rc = fi_cq_open(e->dom_->domain(), &cq_attr, &e->cq_, nullptr);
  if (rc != 0) return fi_fail("fi_cq_open", rc, where);

  // FI_AV_TABLE always: FI_AV_MAP is deprecated in libfabric 2.x, and every provider has tables.
  fi_av_attr av_attr = {};
  av_attr.type = FI_AV_TABLE;
  av_attr.count = 4;
  rc = fi_av_open(e->dom_->domain(), &av_attr, &e->av_, nullptr);
  if (rc != 0) return fi_fail("fi_av_open", rc, where);

  EpFeatures& f = e->features_;
  for (int tries = 1;; ++tries) {
    const char* call = nullptr;
    rc = e->enable(&call);
    if (rc == 0) break;
    if (rc != -FI_EBUSY || strcmp(call, "fi_enable") != 0) return fi_fail(call, rc, where);
    // The endpoint's name before it goes (shm: "fi_shm://<pid>:<uid>:<n>"), for the WARN.
    uint8_t addr[256] = {};
    size_t len = sizeof(addr);
    const std::string name = fi_getname(&e->ep_->fid, addr, &len) == 0 && len <= sizeof(addr)
                                 ? e->address_text(addr, len)
                                 : std::string("(unknown)");
    e->close_ep();
    if (tries == kEnableTries) {
      NF_WARN(
          "%s: %s on %d endpoints in a row, the last named '%s': the provider finds "
          "each name in use. On shm: files in /dev/shm named after this process's pid "
          "(/dev/shm/%d:*) that it did not create were left by a killed process that had its "
          "pid (remove them), or belong to a process in another pid namespace that shares "
          "/dev/shm (give each container its own /dev/shm)",
          where, fi_error_text("fi_enable", rc).c_str(), kEnableTries, name.c_str(),
          static_cast<int>(getpid()));
      return Status::kSystemError;
    }
    NF_WARN(
        "%s: fi_enable: endpoint name '%s' is in use (-FI_EBUSY); opening another endpoint. On "
        "shm the name is a file in /dev/shm: one left by a killed process that had this "
        "process's pid (shm removes it as it refuses it), or one of a process in another pid "
        "namespace that shares /dev/shm",
        where, name.c_str());
  }
  if (f.efa_options) {
    getopt_bool(e->ep_, kFiOptEfaEmulatedWrite, &f.write_emulated);
    getopt_bool(e->ep_, kFiOptEfaEmulatedRead, &f.read_emulated);
  }
  // The size limits as the endpoint states them (efa-direct: sends of one MTU, although
  // ep_attr->max_msg_size is the RDMA limit when FI_RMA was granted). The options exist from
  // API 1.20; an older fabric is not asked.
  const uint32_t api = info->fabric_attr != nullptr ? info->fabric_attr->api_version : 0;
  if (api >= kFiOptMaxSizeVersion) {
    f.max_msg = getopt_size(e->ep_, kFiOptMaxMsgSize);
    f.max_rma = getopt_size(e->ep_, kFiOptMaxRmaSize);
  }
  *out = std::move(e);
  return Status::kOk;
}

Endpoint::~Endpoint() {
  // The endpoint first: closing it cancels what is still in flight; then what was bound to it.
  if (ep_ != nullptr) fi_close(&ep_->fid);
  if (av_ != nullptr) fi_close(&av_->fid);
  if (cq_ != nullptr) fi_close(&cq_->fid);
  if (eq_ != nullptr) fi_close(&eq_->fid);
}

int Endpoint::read_eq(EqError* err) {
  if (eq_ == nullptr) return 0;
  for (;;) {
    uint32_t event = 0;
    uint8_t buf[256];
    ssize_t rc = fi_eq_read(eq_, &event, buf, sizeof(buf), 0);
    if (rc >= 0) continue;  // an event that is not an error: nothing of ours waits for one
    if (rc == -FI_EAGAIN) return 0;
    if (rc == -FI_EAVAIL) {
      fi_eq_err_entry e = {};
      rc = fi_eq_readerr(eq_, &e, 0);
      if (rc == -FI_EAGAIN) return 0;
      if (rc >= 0) {
        err->err = e.err != 0 ? e.err : FI_EOTHER;
        err->prov_errno = e.prov_errno;
        char text[512];
        const char* t = fi_eq_strerror(eq_, e.prov_errno, e.err_data, text, sizeof(text));
        err->text = std::string(fi_strerror(err->err)) + " (" + fi_errno_name(-err->err) + ")";
        if (t != nullptr && t[0] != '\0')
          err->text += ", provider error " + std::to_string(e.prov_errno) + ": " + t;
        return 1;
      }
    }
    err->err = static_cast<int>(-rc);
    err->prov_errno = 0;
    err->text = fi_error_text("fi_eq_read", static_cast<int>(rc));
    return -1;
  }
}

size_t Endpoint::msg_limit() const {
  return features_.max_msg != 0 ? features_.max_msg : dom_->info()->ep_attr->max_msg_size;
}

size_t Endpoint::rma_limit() const {
  return features_.max_rma != 0 ? features_.max_rma : dom_->info()->ep_attr->max_msg_size;
}

Status Endpoint::name(uint8_t* buf, size_t* len) const {
  int rc = fi_getname(&ep_->fid, buf, len);
  if (rc != 0) return fi_fail("fi_getname", rc, dom_->name().c_str());
  return Status::kOk;
}

Status Endpoint::insert_peer(const uint8_t* addr, size_t len, fi_addr_t* out) {
  (void)len;  // the provider knows its address length; we checked it against ours
  int rc = fi_av_insert(av_, addr, 1, out, 0, nullptr);
  if (rc != 1) return fi_fail("fi_av_insert", rc < 0 ? rc : -FI_EINVAL, dom_->name().c_str());
  return Status::kOk;
}

std::string Endpoint::address_text(const uint8_t* addr, size_t len) const {
  char buf[256];
  size_t n = sizeof(buf);
  const char* t = fi_av_straddr(av_, addr, buf, &n);
  if (t != nullptr && buf[0] != '\0') return std::string(buf, strnlen(buf, sizeof(buf)));
  std::string hex;
  char two[3];
  for (size_t i = 0; i < len; ++i) {
    snprintf(two, sizeof(two), "%02x", addr[i]);
    hex += two;
  }
  return hex;
}

int Endpoint::read(fi_cq_tagged_entry* entries, int max, CqError* err) {
  ssize_t rc = fi_cq_read(cq_, entries, static_cast<size_t>(max));
  if (rc > 0) return static_cast<int>(rc);
  if (rc == -FI_EAGAIN) return 0;
  if (rc == -FI_EAVAIL) {
    fi_cq_err_entry e = {};
    ssize_t r2 = fi_cq_readerr(cq_, &e, 0);
    if (r2 == 1) {
      err->err = e.err != 0 ? e.err : FI_EOTHER;
      err->prov_errno = e.prov_errno;
      err->op_context = e.op_context;
      err->text = cq_error_text(cq_, e);
      err->entry = true;
      err->flags = e.flags;
      err->data = e.data;
      err->tag = e.tag;
      return -1;
    }
    if (r2 == -FI_EAGAIN) return 0;
    rc = r2;
  }
  err->err = static_cast<int>(rc < 0 ? -rc : rc);
  err->op_context = nullptr;
  err->entry = false;
  err->text = fi_error_text("fi_cq_read", static_cast<int>(rc));
  return -1;
}

}  // namespace nf
