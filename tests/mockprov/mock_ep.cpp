// Endpoint lifecycle: fi_endpoint, fi_ep_bind, fi_enable, fi_close (with ops in flight),
// fi_getname, fi_setopt/fi_getopt with EFA's option semantics, fi_cancel.
#include <cstdio>

#include "mock_internal.h"

namespace mockefa {

fi_ops g_ep_fi_ops;
fi_ops_ep g_ep_ops;
fi_ops_cm g_cm_ops;

namespace {

uint32_t mix32(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>(x ^ (x >> 31));
}

uint16_t next_qpn(int domain_index, const uint8_t* gid) {
  uint16_t& q = g().next_qpn[domain_index];
  for (;;) {
    q = static_cast<uint16_t>(q + 1);
    if (q == 0) continue;
    bool used = false;
    for (auto& kv : g().eps_by_serial)
      used = used || (kv.second->addr.qpn == q && std::memcmp(kv.second->addr.gid, gid, 16) == 0);
    if (!used) return q;
  }
}

Ep* ep_of(fid* f) { return self_of<Ep>(reinterpret_cast<fid_ep*>(f)); }

int ep_close(fid* f) {
  Lock lk(g().mu);
  PassGuard pass;
  Ep* ep = ep_of(f);
  ep_teardown(ep);
  for (Cq* cq : {ep->tx_cq, ep->rx_cq}) {
    if (!cq) continue;
    auto& v = cq->eps;
    v.erase(std::remove(v.begin(), v.end(), ep), v.end());
  }
  if (ep->av) ep->av->bound_eps--;
  if (ep->eq) {
    eq_forget_fid(ep->eq, &ep->h.fid.fid);
    ep->eq->bound_eps--;
  }
  if (ep->enabled) {
    g().eps_by_addr.erase(ep->addr);
    g().closed_addrs.insert(ep->addr);
  }
  g().eps_by_serial.erase(ep->serial);
  ep->domain->children--;
  delete ep;
  g().counters.open_eps--;
  return 0;
}

int ep_bind(fid* f, fid* bfid, uint64_t flags) {
  if (!bfid) return -FI_EINVAL;
  Lock lk(g().mu);
  Ep* ep = ep_of(f);
  const bool is_eq = bfid->fclass == FI_CLASS_EQ && bfid->ops == &g_eq_fi_ops;
  if (ep->enabled) {
    // EFA would take an EQ late, but errors raised before it was bound would have aborted:
    // the mock wants it bound before fi_enable, like the CQs and the AV.
    if (is_eq)
      violation(MOCKEFA_V_OPT_STATE, "fi_ep_bind(eq) after fi_enable: bind the EQ before enabling");
    return -FI_EOPBADSTATE;
  }
  if (is_eq) {
    Eq* eq = self_of<Eq>(reinterpret_cast<fid_eq*>(bfid));
    if (eq->fabric != ep->domain->fabric || ep->eq)
      return -FI_EINVAL;  // other fabric, or a second EQ
    if (flags) return -FI_EBADFLAGS;
    ep->eq = eq;
    eq->bound_eps++;
    return 0;
  }
  if (bfid->fclass == FI_CLASS_CQ && bfid->ops == &g_cq_fi_ops) {
    Cq* cq = self_of<Cq>(reinterpret_cast<fid_cq*>(bfid));
    if (cq->domain != ep->domain) return -FI_EINVAL;
    if (flags & ~(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION)) return -FI_EBADFLAGS;
    if (!(flags & (FI_TRANSMIT | FI_RECV))) return -FI_EINVAL;
    if (((flags & FI_TRANSMIT) && ep->tx_cq) || ((flags & FI_RECV) && ep->rx_cq)) return -FI_EINVAL;
    if (flags & FI_TRANSMIT) {
      ep->tx_cq = cq;
      ep->tx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
    }
    if (flags & FI_RECV) {
      ep->rx_cq = cq;
      ep->rx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
    }
    if (std::find(cq->eps.begin(), cq->eps.end(), ep) == cq->eps.end()) cq->eps.push_back(ep);
    return 0;
  }
  if (bfid->fclass == FI_CLASS_AV && bfid->ops == &g_av_fi_ops) {
    Av* av = self_of<Av>(reinterpret_cast<fid_av*>(bfid));
    if (av->domain != ep->domain || ep->av) return -FI_EINVAL;
    ep->av = av;
    av->bound_eps++;
    return 0;
  }
  if (bfid->fclass == FI_CLASS_CNTR) return -FI_ENOSYS;
  return -FI_EINVAL;
}

int ep_control(fid* f, int command, void*) {
  if (command != FI_ENABLE) return -FI_ENOSYS;
  Lock lk(g().mu);
  Ep* ep = ep_of(f);
  if (ep->enabled) return 0;
  if (!ep->av) return -FI_ENOAV;
  if (!ep->tx_cq || !ep->rx_cq) return -FI_ENOCQ;
  ep->enabled = true;
  g().eps_by_addr[ep->addr] = ep;
  return 0;
}

int ep_ops_open(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
int ep_tostr(const fid*, char*, size_t) { return -FI_ENOSYS; }
int ep_ops_set(fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }

ssize_t ep_cancel(fid* f, void* context) {
  Lock lk(g().mu);
  Ep* ep = ep_of(f);
  for (auto* lst : {&ep->posted_msg, &ep->posted_tagged}) {
    for (auto it = lst->begin(); it != lst->end(); ++it) {
      if (it->context != context) continue;
      CqEntry e;
      e.op_context = it->context;
      e.flags = FI_RECV | (it->tagged ? FI_TAGGED : FI_MSG);
      e.buf = it->segs.empty() ? nullptr : it->segs[0].ptr;
      e.tag = it->tag;
      e.is_error = true;
      e.err = FI_ECANCELED;
      e.prov_errno = -FI_ECANCELED;
      e.err_data = err_text("Receive canceled by fi_cancel", ep->addr, nullptr);
      e.ep_serial = ep->serial;
      e.track_ctx = it->track_ctx;
      complete_entry(ep, ep->rx_cq, std::move(e), true);
      lst->erase(it);
      return 0;
    }
  }
  return 0;  // nothing to cancel (already matched or never posted): not an error in libfabric
}

template <typename T>
bool read_opt(const void* optval, size_t optlen, T* out) {
  if (!optval || optlen != sizeof(T)) return false;
  std::memcpy(out, optval, sizeof(T));
  return true;
}

template <typename T>
int write_opt(void* optval, size_t* optlen, T v) {
  if (*optlen < sizeof(T)) {
    *optlen = sizeof(T);
    return -FI_ETOOSMALL;
  }
  std::memcpy(optval, &v, sizeof(T));
  *optlen = sizeof(T);
  return 0;
}

bool is_post_117(int optname) {
  return (optname >= kOptCudaApiPermitted && optname <= kOptInjectAtomicSize) ||
         (optname >= kOptEfaEmulatedRead && optname <= kOptEfaHomogeneousPeers);
}

int set_size_limit(size_t v, size_t cap, size_t* field) {
  if (v > cap) return -FI_EINVAL;
  *field = v;
  return 0;
}

int ep_setopt(fid* f, int level, int optname, const void* optval, size_t optlen) {
  if (level != FI_OPT_ENDPOINT) return -FI_ENOPROTOOPT;
  Lock lk(g().mu);
  Ep* ep = ep_of(f);
  const Profile& p = ep->profile;
  if (p.legacy_opts && is_post_117(optname)) return -FI_ENOPROTOOPT;
  bool b = false;
  size_t sz = 0;
  int iv = 0;
  auto before_enable = [&](const char* name) {
    if (!ep->enabled) return true;
    violation(MOCKEFA_V_OPT_STATE, "fi_setopt(%s) after fi_enable: EFA decides it at fi_enable",
              name);
    return false;
  };
  switch (optname) {
    case FI_OPT_MIN_MULTI_RECV:
      if (!read_opt(optval, optlen, &sz)) return -FI_EINVAL;
      ep->min_multi_recv = sz;
      return 0;
    case FI_OPT_FI_HMEM_P2P:
      if (!read_opt(optval, optlen, &iv)) return -FI_EINVAL;
      if (iv == FI_HMEM_P2P_REQUIRED && p.gdr != GdrMode::kP2p) return -FI_EOPNOTSUPP;
      return 0;
    case kOptCudaApiPermitted:
      if (!read_opt(optval, optlen, &b)) return -FI_EINVAL;
      if (!before_enable("FI_OPT_CUDA_API_PERMITTED")) return -FI_EINVAL;
      if (p.gdr == GdrMode::kNoCuda) return -FI_EINVAL;           // no CUDA runtime/device
      if (!b && p.gdr == GdrMode::kNoP2p) return -FI_EOPNOTSUPP;  // would need CUDA copies
      return 0;
    case kOptSharedMemoryPermitted:
      if (!read_opt(optval, optlen, &b)) return -FI_EINVAL;
      if (!before_enable("FI_OPT_SHARED_MEMORY_PERMITTED")) return -FI_EINVAL;
      return 0;
    case kOptMaxMsgSize:
      if (!read_opt(optval, optlen, &sz)) return -FI_EINVAL;
      return set_size_limit(sz, ep->direct ? kDirectMtu : p.max_msg_size, &ep->max_msg);
    case kOptMaxTaggedSize:
      if (ep->direct) return -FI_ENOPROTOOPT;  // efa-direct: no tagged size options
      if (!read_opt(optval, optlen, &sz)) return -FI_EINVAL;
      return set_size_limit(sz, p.max_msg_size, &ep->max_tagged);
    case kOptMaxRmaSize:
      if (!read_opt(optval, optlen, &sz)) return -FI_EINVAL;
      return set_size_limit(sz, ep->direct ? kDirectMaxRdma : p.max_msg_size, &ep->max_rma);
    case kOptInjectMsgSize:
      if (!read_opt(optval, optlen, &sz)) return -FI_EINVAL;
      return set_size_limit(sz, ep->inject_size, &ep->inject_msg);
    case kOptInjectTaggedSize:
      if (ep->direct) return -FI_ENOPROTOOPT;
      if (!read_opt(optval, optlen, &sz)) return -FI_EINVAL;
      return set_size_limit(sz, ep->inject_size, &ep->inject_tagged);
    case kOptInjectRmaSize:
      if (!read_opt(optval, optlen, &sz)) return -FI_EINVAL;
      return set_size_limit(sz, ep->direct ? 0 : ep->inject_size, &ep->inject_rma);
    case kOptMaxAtomicSize:
    case kOptInjectAtomicSize: return -FI_EOPNOTSUPP;  // the mock has no atomics
    case kOptEfaRnrRetry:
      if (!read_opt(optval, optlen, &sz)) return -FI_EINVAL;
      if (!before_enable("FI_OPT_EFA_RNR_RETRY")) return -FI_EINVAL;
      ep->rnr_retry = sz;
      return 0;
    case kOptEfaUseDeviceRdma:
      if (!read_opt(optval, optlen, &b)) return -FI_EINVAL;
      if (!before_enable("FI_OPT_EFA_USE_DEVICE_RDMA")) return -FI_EINVAL;
      // FI_EFA_USE_DEVICE_RDMA, when set, wins: a conflicting setopt is refused (EFA).
      if (p.use_device_rdma_env == 0 || p.use_device_rdma_env == 1) {
        const bool env = p.use_device_rdma_env == 1 && p.nic_rdma_read;
        if (b != env) return -FI_EINVAL;
      }
      if (b && !p.nic_rdma_read) return -FI_EOPNOTSUPP;  // EFA's gate is the NIC's RDMA read
      ep->use_device_rdma = b;
      return 0;
    case kOptEfaSendrecvInOrder128:
      if (!read_opt(optval, optlen, &b)) return -FI_EINVAL;
      if (!before_enable("FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES")) return -FI_EINVAL;
      if (b) return -FI_EOPNOTSUPP;  // disabled on the `efa` fabric since 2.4
      ep->sendrecv_in_order_128 = false;
      return 0;
    case kOptEfaWriteInOrder128:
      if (!read_opt(optval, optlen, &b)) return -FI_EINVAL;
      if (!before_enable("FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES")) return -FI_EINVAL;
      // The NIC must report in-order 128-byte RDMA writes (MOCKEFA_INORDER128=no: it never does),
      // and writes must go through the device at all.
      if (b && (p.inorder128 == InOrder128::kNo || ep->write_emulated())) return -FI_EOPNOTSUPP;
      ep->write_in_order_128 = b;
      return 0;
    case kOptEfaHomogeneousPeers:
      if (!read_opt(optval, optlen, &b)) return -FI_EINVAL;
      ep->homogeneous_peers = b || p.handshake == HandshakeMode::kNone;
      return 0;
    default: return -FI_ENOPROTOOPT;  // includes the getopt-only EMULATED_* options
  }
}

int ep_getopt(fid* f, int level, int optname, void* optval, size_t* optlen) {
  if (level != FI_OPT_ENDPOINT) return -FI_ENOPROTOOPT;
  if (!optlen) return -FI_EINVAL;
  Lock lk(g().mu);
  Ep* ep = ep_of(f);
  if (ep->profile.legacy_opts && is_post_117(optname)) return -FI_ENOPROTOOPT;
  switch (optname) {
    case FI_OPT_MIN_MULTI_RECV: return write_opt(optval, optlen, ep->min_multi_recv);
    case kOptMaxMsgSize: return write_opt(optval, optlen, ep->max_msg);
    case kOptMaxTaggedSize: return write_opt(optval, optlen, ep->max_tagged);
    case kOptMaxRmaSize: return write_opt(optval, optlen, ep->max_rma);
    case kOptInjectMsgSize: return write_opt(optval, optlen, ep->inject_msg);
    case kOptInjectTaggedSize: return write_opt(optval, optlen, ep->inject_tagged);
    case kOptInjectRmaSize: return write_opt(optval, optlen, ep->inject_rma);
    case kOptEfaRnrRetry: return write_opt(optval, optlen, ep->rnr_retry);
    case kOptEfaEmulatedRead: return write_opt(optval, optlen, ep->read_emulated());
    case kOptEfaEmulatedWrite: return write_opt(optval, optlen, ep->write_emulated());
    case kOptEfaSendrecvInOrder128: return write_opt(optval, optlen, ep->sendrecv_in_order_128);
    case kOptEfaWriteInOrder128: return write_opt(optval, optlen, ep->write_in_order_128);
    case kOptEfaEmulatedAtomics: return write_opt(optval, optlen, true);
    default: return -FI_ENOPROTOOPT;  // CUDA_API_PERMITTED etc. are setopt-only on EFA
  }
}

int ep_tx_ctx(fid_ep*, int, fi_tx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }
int ep_rx_ctx(fid_ep*, int, fi_rx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }

ssize_t ep_rx_size_left(fid_ep* fep) {
  Lock lk(g().mu);
  Ep* ep = self_of<Ep>(fep);
  size_t used = ep->posted_msg.size() + ep->posted_tagged.size();
  return used >= ep->rx_size ? 0 : static_cast<ssize_t>(ep->rx_size - used);
}

ssize_t ep_tx_size_left(fid_ep* fep) {
  Lock lk(g().mu);
  Ep* ep = self_of<Ep>(fep);
  return ep->tx_outstanding >= ep->tx_size ? 0
                                           : static_cast<ssize_t>(ep->tx_size - ep->tx_outstanding);
}

int cm_getname(fid* f, void* addr, size_t* addrlen) {
  if (!addrlen) return -FI_EINVAL;
  Lock lk(g().mu);
  Ep* ep = ep_of(f);
  if (*addrlen < kAddrLen || !addr) {
    *addrlen = kAddrLen;
    return -FI_ETOOSMALL;
  }
  std::memcpy(addr, &ep->addr, kAddrLen);
  *addrlen = kAddrLen;
  return 0;
}

int cm_setname(fid*, void*, size_t) { return -FI_ENOSYS; }
int cm_getpeer(fid_ep*, void*, size_t*) { return -FI_ENOSYS; }
int cm_connect(fid_ep*, const void*, const void*, size_t) { return -FI_ENOSYS; }
int cm_listen(fid_pep*) { return -FI_ENOSYS; }
int cm_accept(fid_ep*, const void*, size_t) { return -FI_ENOSYS; }
int cm_reject(fid_pep*, fid_t, const void*, size_t) { return -FI_ENOSYS; }
int cm_shutdown(fid_ep*, uint64_t) { return -FI_ENOSYS; }
int cm_join(fid_ep*, const void*, uint64_t, fid_mc**, void*) { return -FI_ENOSYS; }

size_t pick(size_t asked, size_t cap) { return (asked && asked < cap) ? asked : cap; }

// EFA's use_device_rdma at fi_endpoint: at API >= 1.18 "the NIC can do RDMA read"; below, off on
// first-generation devices; FI_EFA_USE_DEVICE_RDMA overrides. Where EFA would abort() (the
// variable is 1 on a NIC without RDMA read, or not a boolean) the mock says so on stderr, counts
// a device_rdma_env violation, and goes on with 0 (resp. the default).
bool default_use_device_rdma(const Profile& p, uint32_t api_version) {
  bool v = p.nic_rdma_read;
  if (p.device == DeviceGen::kOld && api_version < kApi118) v = false;
  if (p.use_device_rdma_env == 2) {
    std::fprintf(stderr,
                 "mockefa: FI_EFA_USE_DEVICE_RDMA=%s is not a boolean: EFA would abort(); using "
                 "the default %d\n",
                 p.use_device_rdma_env_text.c_str(), v ? 1 : 0);
    violation(MOCKEFA_V_DEVICE_RDMA_ENV, "FI_EFA_USE_DEVICE_RDMA=%s is not a boolean (EFA aborts)",
              p.use_device_rdma_env_text.c_str());
  } else if (p.use_device_rdma_env == 1 && !p.nic_rdma_read) {
    std::fprintf(stderr,
                 "mockefa: FI_EFA_USE_DEVICE_RDMA=1 but the NIC has no RDMA read: EFA would "
                 "abort(); using 0\n");
    violation(MOCKEFA_V_DEVICE_RDMA_ENV,
              "FI_EFA_USE_DEVICE_RDMA=1 on a NIC without RDMA read (EFA aborts)");
    v = false;
  } else if (p.use_device_rdma_env >= 0) {
    v = p.use_device_rdma_env == 1;
  }
  return v;
}

}  // namespace

int mock_endpoint(fid_domain* domain, fi_info* info, fid_ep** out, void* context) {
  if (!domain || !info || !out) return -FI_EINVAL;
  if (info->ep_attr && info->ep_attr->type != FI_EP_RDM && info->ep_attr->type != FI_EP_UNSPEC)
    return -FI_EINVAL;
  Lock lk(g().mu);
  Domain* d = self_of<Domain>(domain);
  if (info->domain_attr && info->domain_attr->name && d->name != info->domain_attr->name)
    return -FI_EINVAL;
  auto* ep = new Ep();
  ep->h.self = ep;
  ep->h.fid.fid.fclass = FI_CLASS_EP;
  ep->h.fid.fid.context = context;
  ep->h.fid.fid.ops = &g_ep_fi_ops;
  ep->h.fid.ops = &g_ep_ops;
  ep->h.fid.cm = &g_cm_ops;
  ep->h.fid.msg = &g_msg_ops;
  ep->h.fid.rma = &g_rma_ops;
  ep->h.fid.tagged = &g_tagged_ops;
  ep->h.fid.atomic = &g_atomic_ops;
  ep->h.fid.collective = &g_collective_ops;
  ep->domain = d;
  ep->profile = read_profile();
  const Profile& p = ep->profile;
  ep->serial = g().next_serial++;
  ep->caps = info->caps ? info->caps : (kPrimaryCaps | kSecondaryCaps);
  ep->tx_msg_order = info->tx_attr ? info->tx_attr->msg_order : kMsgOrder;
  ep->rx_msg_order = info->rx_attr ? info->rx_attr->msg_order : kMsgOrder;
  ep->tx_op_flags = info->tx_attr ? info->tx_attr->op_flags : 0;
  ep->rx_op_flags = info->rx_attr ? info->rx_attr->op_flags : 0;
  ep->inject_size = pick(info->tx_attr ? info->tx_attr->inject_size : 0, p.inject_size);
  ep->inject_msg = ep->inject_tagged = ep->inject_rma = ep->inject_size;
  ep->max_msg = pick(info->ep_attr ? info->ep_attr->max_msg_size : 0, p.max_msg_size);
  ep->max_tagged = ep->max_rma = ep->max_msg;
  ep->tx_size = pick(info->tx_attr ? info->tx_attr->size : 0, p.tx_size);
  ep->rx_size = pick(info->rx_attr ? info->rx_attr->size : 0, p.rx_size);
  ep->use_device_rdma = default_use_device_rdma(p, d->fabric->api_version);
  ep->homogeneous_peers = p.handshake == HandshakeMode::kNone;
  domain_gid(d->index, ep->addr.gid);
  ep->addr.qpn = next_qpn(d->index, ep->addr.gid);
  ep->addr.qkey = mix32(ep->serial) | 1u;
  if (p.net) {
    // The channel, and an address that says where it listens: IPv4 and port in the bytes EFA
    // leaves unused, a random qkey so that two processes' endpoints do not look the same.
    net::Options o;
    o.give_up_us = p.net_give_up_ms * 1000;
    o.loss = p.net_loss;
    o.dup = p.net_dup;
    o.rto_us = 2000;
    o.seed = ep->serial;
    ep->chan.reset(new net::Channel());
    if (ep->chan->open(p.net_ip, 0, o) != 0) {
      delete ep;
      return -FI_ENODEV;
    }
    const net::Peer self = ep->chan->self();
    std::memcpy(ep->addr.unused, &self.ip, 4);
    std::memcpy(ep->addr.unused + 4, &self.port, 2);
    ep->addr.unused[6] = 'N';
    ep->addr.unused[7] = 'T';
    std::random_device rd;
    ep->addr.qkey = rd() | 1u;
    ep->reasm.reset(new opwire::Reassembly(p.net_reasm_kib * 1024));
  }
  if (d->direct) {
    // efa-direct: no tagged ops, no ordering, sends of one MTU, 32 bytes inline, 2 SGEs, every
    // op goes straight to the device (no handshake, device RDMA), FI_CONTEXT2 contexts.
    const bool rdma = p.nic_rdma_read && p.nic_rdma_write;
    ep->direct = true;
    ep->rx_cq_data = (info->mode & FI_RX_CQ_DATA) != 0;
    ep->reorder = p.direct_reorder;
    ep->caps = (info->caps ? info->caps : kDirectBaseCaps | (rdma ? kDirectRmaCaps : 0)) &
               (kDirectBaseCaps | (rdma ? kDirectRmaCaps : 0) | FI_HMEM);
    ep->tx_msg_order = ep->rx_msg_order = 0;
    ep->inject_size = pick(info->tx_attr ? info->tx_attr->inject_size : 0, kDirectInjectSize);
    ep->inject_msg = ep->inject_size;
    ep->inject_tagged = ep->inject_rma = 0;  // no tagged ops; no inline RDMA write
    const size_t ep_max = info->ep_attr ? info->ep_attr->max_msg_size : 0;
    ep->max_msg = pick(ep_max, kDirectMtu);
    ep->max_tagged = 0;
    ep->max_rma = pick(ep_max, kDirectMaxRdma);
    ep->tx_iov_limit = pick(info->tx_attr ? info->tx_attr->iov_limit : 0, kDirectIovLimit);
    ep->rx_iov_limit = pick(info->rx_attr ? info->rx_attr->iov_limit : 0, kDirectIovLimit);
    ep->rma_iov_limit = kDirectRmaLocalIovLimit;
    ep->use_device_rdma = rdma;
    ep->homogeneous_peers = true;
  }
  apply_faults(ep, faults_for_new_endpoint());
  g().eps_by_serial[ep->serial] = ep;
  d->children++;
  g().counters.open_eps++;
  *out = &ep->h.fid;
  return 0;
}

void init_ep_ops() {
  fill_object_fi_ops(&g_ep_fi_ops, ep_close);
  g_ep_fi_ops.bind = ep_bind;
  g_ep_fi_ops.control = ep_control;
  g_ep_fi_ops.ops_open = ep_ops_open;
  g_ep_fi_ops.tostr = ep_tostr;
  g_ep_fi_ops.ops_set = ep_ops_set;
  g_ep_ops.size = sizeof(fi_ops_ep);
  g_ep_ops.cancel = ep_cancel;
  g_ep_ops.getopt = ep_getopt;
  g_ep_ops.setopt = ep_setopt;
  g_ep_ops.tx_ctx = ep_tx_ctx;
  g_ep_ops.rx_ctx = ep_rx_ctx;
  g_ep_ops.rx_size_left = ep_rx_size_left;
  g_ep_ops.tx_size_left = ep_tx_size_left;
  g_cm_ops.size = sizeof(fi_ops_cm);
  g_cm_ops.setname = cm_setname;
  g_cm_ops.getname = cm_getname;
  g_cm_ops.getpeer = cm_getpeer;
  g_cm_ops.connect = cm_connect;
  g_cm_ops.listen = cm_listen;
  g_cm_ops.accept = cm_accept;
  g_cm_ops.reject = cm_reject;
  g_cm_ops.shutdown = cm_shutdown;
  g_cm_ops.join = cm_join;
}

}  // namespace mockefa
