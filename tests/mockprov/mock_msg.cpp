// The common posting path (every check EFA hardware or the EFA provider would apply, then the
// injected faults) and the fi_msg / fi_tagged entry points that feed it.
#include "mock_internal.h"

namespace mockefa {

fi_ops_msg g_msg_ops;
fi_ops_tagged g_tagged_ops;

namespace {

const char* op_name(const PostArgs& a) {
  switch (a.kind) {
    case OpKind::kMsg: return a.is_recv ? "fi_recv" : "fi_send";
    case OpKind::kTagged: return a.is_recv ? "fi_trecv" : "fi_tsend";
    case OpKind::kWrite: return "fi_write";
    case OpKind::kRead: return "fi_read";
    default: return "op";
  }
}

uint64_t tx_flags_of(OpKind k) {
  switch (k) {
    case OpKind::kMsg: return FI_SEND | FI_MSG;
    case OpKind::kTagged: return FI_SEND | FI_TAGGED;
    case OpKind::kWrite: return FI_RMA | FI_WRITE;
    case OpKind::kRead: return FI_RMA | FI_READ;
    default: return 0;
  }
}

void start_handshake(Ep* ep, const EfaAddr& peer) {
  auto* op = new Op();
  op->id = g().next_op_id++;
  op->kind = OpKind::kHandshake;
  op->internal = true;
  op->want_completion = false;
  op->init = ep;
  op->init_serial = ep->serial;
  op->src_addr = ep->addr;
  op->dst_addr = peer;
  wire_push(op);
}

ssize_t refuse(int kind, ssize_t ret, const char* fmt, const char* name) {
  violation(kind, fmt, name);
  return ret;
}

}  // namespace

ssize_t post(Ep* ep, const PostArgs& a) {
  Lock lk(g().mu);
  PassGuard pass;
  Global& gl = g();
  const Profile& p = ep->profile;
  const bool is_rma = a.kind == OpKind::kWrite || a.kind == OpKind::kRead;
  const bool tx = !a.is_recv;
  const char* name = op_name(a);

  // efa-direct has no tagged interface at all (EFA installs fi_no_tagged: -FI_ENOSYS).
  if (ep->direct && a.kind == OpKind::kTagged)
    return refuse(MOCKEFA_V_MISSING_CAP, -FI_ENOSYS, "%s on an efa-direct endpoint (no FI_TAGGED)",
                  name);
  if (!ep->enabled)
    return refuse(MOCKEFA_V_NOT_ENABLED, -FI_EOPBADSTATE, "%s on an endpoint that is not enabled",
                  name);
  const uint64_t need_cap = a.kind == OpKind::kMsg      ? FI_MSG
                            : a.kind == OpKind::kTagged ? FI_TAGGED
                                                        : FI_RMA;
  if (!(ep->caps & need_cap))
    return refuse(MOCKEFA_V_MISSING_CAP, -FI_EOPNOTSUPP, "%s but the endpoint's caps lack it",
                  name);
  if (a.flags & (FI_MULTI_RECV | FI_PEEK | FI_CLAIM | FI_DISCARD | FI_TRIGGER | FI_FENCE))
    return refuse(MOCKEFA_V_UNSUPPORTED, -FI_EOPNOTSUPP,
                  "%s with MULTI_RECV/PEEK/CLAIM/DISCARD/TRIGGER/FENCE (not modelled)", name);
  if (a.count > kIovLimit)
    return refuse(MOCKEFA_V_IOV_LIMIT, -FI_EINVAL, "%s with more than 4 iovs", name);
  if (is_rma && (a.rma_count != kRmaIovLimit || !a.rma))
    return refuse(MOCKEFA_V_IOV_LIMIT, -FI_EINVAL, "%s with rma_iov_count != 1", name);
  if (ep->direct) {
    const size_t lim = is_rma ? ep->rma_iov_limit : tx ? ep->tx_iov_limit : ep->rx_iov_limit;
    if (a.count > lim) {
      violation(MOCKEFA_V_IOV_LIMIT, "%s with %zu iovs on efa-direct (limit %zu)", name, a.count,
                lim);
      return -FI_EINVAL;
    }
    // FI_CONTEXT2 mode: the provider owns the context memory of every op that can complete.
    if (!a.inject_call && !a.context)
      return refuse(MOCKEFA_V_NO_CONTEXT, -FI_EINVAL,
                    "%s with a NULL context on efa-direct (FI_CONTEXT2 mode)", name);
  }
  if (a.count && !a.iov) return -FI_EINVAL;

  size_t len = 0;
  for (size_t i = 0; i < a.count; ++i) {
    if (!a.iov[i].iov_base && a.iov[i].iov_len) return -FI_EINVAL;
    len += a.iov[i].iov_len;
  }
  const size_t max = a.kind == OpKind::kMsg      ? ep->max_msg
                     : a.kind == OpKind::kTagged ? ep->max_tagged
                                                 : ep->max_rma;
  if (len > max) {
    violation(MOCKEFA_V_MSG_SIZE, "%s of %zu bytes > max %zu", name, len, max);
    return -FI_EINVAL;
  }
  const bool inject = tx && (a.inject_call || (a.flags & FI_INJECT));
  if (inject) {
    const size_t lim = a.kind == OpKind::kMsg      ? ep->inject_msg
                       : a.kind == OpKind::kTagged ? ep->inject_tagged
                                                   : ep->inject_rma;
    if (len > lim) {
      violation(MOCKEFA_V_INJECT_SIZE, "inject %s of %zu bytes > inject_size %zu", name, len, lim);
      return -FI_EINVAL;
    }
  }
  if (is_rma && a.rma[0].len != len) return -FI_EINVAL;
  const bool has_data = tx && (a.flags & FI_REMOTE_CQ_DATA);
  if (has_data && a.kind == OpKind::kWrite && len > p.max_writedata) {
    violation(MOCKEFA_V_WRITEDATA_SIZE,
              "fi_writedata of %zu bytes: more than one device write (%zu)", len, p.max_writedata);
    return -FI_EINVAL;
  }
  if (has_data && a.data > kCqDataMax) {
    violation(MOCKEFA_V_CQ_DATA, "%s with CQ data 0x%llx: cq_data_size is 4", name,
              static_cast<unsigned long long>(a.data));
    return -FI_EINVAL;
  }
  std::vector<Seg> segs;
  if (!inject && ep->direct && is_rma && a.count == 0) {
    // efa-direct before libfabric 2.6 posts an RMA with no SGE, which the device does not take.
    violation(MOCKEFA_V_NO_DESC, "%s of 0 bytes without an iov on efa-direct", name);
    return -FI_EINVAL;
  }
  if (!inject) {
    for (size_t i = 0; i < a.count; ++i) {
      Seg s{static_cast<uint8_t*>(a.iov[i].iov_base), a.iov[i].iov_len, nullptr};
      void* desc = a.desc ? a.desc[i] : nullptr;
      if (s.len == 0 && !desc && ep->direct && is_rma) {
        // efa-direct before libfabric 2.6 (efa_rma_post_read/write) wants a descriptor for every
        // iov, 0 bytes too: "EFA direct requires FI_MR_LOCAL but application does not provide a
        // valid desc". 2.6 substitutes a bounce buffer of its own for 0-byte RMA; the mock models
        // the libfabric CI builds (2.1), issue 35.
        violation(MOCKEFA_V_NO_DESC,
                  "%s of 0 bytes without a descriptor on efa-direct (libfabric < 2.6 refuses it)",
                  name);
        return -FI_EINVAL;
      }
      if (s.len == 0) {
        segs.push_back(
            s);  // zero-length pieces need neither buffer nor descriptor (EFA allows 0-byte ops)
        continue;
      }
      if (!desc) {
        if (ep->direct || (ep->domain->mr_mode & FI_MR_LOCAL)) {
          violation(MOCKEFA_V_NO_DESC,
                    "%s of %zu bytes at %p without a descriptor under FI_MR_LOCAL", name, s.len,
                    static_cast<void*>(s.ptr));
          return -FI_EINVAL;
        }
        segs.push_back(s);
        continue;
      }
      Mr* mr = live_mr(desc);
      if (!mr || mr->domain != ep->domain) {
        violation(MOCKEFA_V_BAD_DESC, "%s with descriptor %p that is not a live MR of domain %s",
                  name, desc, ep->domain->name.c_str());
        return -FI_EINVAL;
      }
      if (!mr->covers(reinterpret_cast<uintptr_t>(s.ptr), s.len)) {
        violation(MOCKEFA_V_DESC_RANGE, "%s of [%p, +%zu) outside its MR [0x%llx, +%zu)", name,
                  static_cast<void*>(s.ptr), s.len, static_cast<unsigned long long>(mr->base),
                  mr->len);
        return -FI_EINVAL;
      }
      s.mr = mr;
      segs.push_back(s);
    }
  }
  EfaAddr peer{};
  bool any_src = true;
  if (tx || (a.addr != FI_ADDR_UNSPEC && (ep->caps & FI_DIRECTED_RECV))) {
    if (!ep->av->lookup(a.addr, &peer)) {
      violation(MOCKEFA_V_BAD_ADDR, "%s with fi_addr %llu not in the AV", name,
                static_cast<unsigned long long>(a.addr));
      return -FI_EINVAL;
    }
    any_src = tx;
  }
  const bool track_ctx = a.context && !a.inject_call;
  // EFA's efa fabric has mode 0 and takes a context back while its op is in flight; efa-direct
  // (FI_CONTEXT2) writes into it. The mock refuses both unless MOCKEFA_CTX_REUSE=1 (efa only).
  if (track_ctx && (ep->direct || !p.ctx_reuse) && ep->inflight_ctx.count(a.context)) {
    violation(MOCKEFA_V_CTX_REUSE, "%s with context %p of an op still in flight", name, a.context);
    return -FI_EINVAL;
  }

  // Nothing above depends on the fault knobs; from here on, -FI_EAGAIN the way EFA gives it.
  if (ep->eagain_latched && ep->faults.eagain_needs_poll) {
    gl.counters.eagain_returned++;
    return -FI_EAGAIN;
  }
  ++ep->post_attempts;
  if (ep->faults.eagain_every && ep->post_attempts % ep->faults.eagain_every == 0) {
    count_fault(MOCKEFA_F_EAGAIN);
    gl.counters.eagain_returned++;
    ep->eagain_latched = true;
    return -FI_EAGAIN;
  }
  if ((tx && ep->tx_outstanding >= ep->tx_size) ||
      (!tx && ep->posted_msg.size() + ep->posted_tagged.size() + ep->failing_recvs.size() >=
                  ep->rx_size)) {
    gl.counters.eagain_queue_full++;
    gl.counters.eagain_returned++;
    return -FI_EAGAIN;
  }
  if (tx && !ep->rnr_backoff.empty()) {
    auto it = ep->rnr_backoff.find(peer);
    if (it != ep->rnr_backoff.end()) {
      if (steady_ns() < it->second) {
        gl.counters.eagain_rnr++;
        gl.counters.eagain_returned++;
        return -FI_EAGAIN;  // EFA: the peer is in RNR back-off
      }
      ep->rnr_backoff.erase(it);
    }
  }
  bool needs_hs = false;
  if (tx && !ep->direct && !ep->homogeneous_peers && !ep->chan && !(peer == ep->addr)) {
    HsState& hs = ep->peers[peer];
    if (hs == HsState::kNone) {
      start_handshake(ep, peer);
      hs = HsState::kRequested;
    }
    if (is_rma && hs == HsState::kRequested) {
      if (p.handshake == HandshakeMode::kEagain || inject) {
        gl.counters.eagain_handshake++;
        gl.counters.eagain_returned++;
        return -FI_EAGAIN;
      }
      needs_hs = true;  // 1.22+: queued until the handshake arrives
    }
  }

  ep->accepted_ops++;
  gl.counters.ops_posted++;
  const bool inject_fail = ep->faults.error_every && ep->accepted_ops % ep->faults.error_every == 0;
  if (track_ctx) ep->inflight_ctx.insert(a.context);
  if (track_ctx && ep->direct) {
    // Like EFA, write into the fi_context2 (two pointer-sized words); an application that
    // touches a live context is caught when the completion is read.
    const uintptr_t w[2] = {static_cast<uintptr_t>(0x6d6f636b65666132ull ^ gl.next_op_id),
                            static_cast<uintptr_t>(ep->serial)};
    std::memcpy(a.context, w, sizeof w);
    ep->ctx_marks[a.context] = std::make_pair(w[0], w[1]);
  }
  if (!tx) {
    gl.counters.rx_posted++;
    RecvReq r;
    r.context = a.context;
    r.segs = std::move(segs);
    r.cap = len;
    r.tagged = a.kind == OpKind::kTagged;
    r.tag = a.tag;
    r.ignore = a.ignore;
    r.any_src = any_src;
    r.src = peer;
    r.want_completion = !ep->rx_selective || (a.flags & FI_COMPLETION);
    r.track_ctx = track_ctx;
    if (inject_fail) {
      count_fault(MOCKEFA_F_ERROR);
      r.fail_prov = ep->faults.error_prov_errno;
      ep->failing_recvs.push_back(std::move(r));
    } else {
      match_new_recv(ep, std::move(r));
    }
    return 0;
  }

  gl.counters.tx_posted++;
  gl.counters.nic_tx_ops[ep->domain->index]++;
  gl.counters.nic_tx_bytes[ep->domain->index] += len;
  ep->tx_ops++;
  auto* op = new Op();
  op->id = gl.next_op_id++;
  op->kind = a.kind;
  op->init = ep;
  op->init_serial = ep->serial;
  op->src_addr = ep->addr;
  op->dst_addr = peer;
  op->context = a.inject_call ? nullptr : a.context;
  op->tx_flags = tx_flags_of(a.kind);
  op->want_completion = !a.inject_call && (!ep->tx_selective || (a.flags & FI_COMPLETION));
  op->track_ctx = track_ctx;
  op->is_inject = inject;
  op->len = len;
  op->tag = a.tag;
  op->data = has_data ? a.data : 0;
  op->has_data = has_data;
  if (is_rma) {
    op->rma_addr = a.rma[0].addr;
    op->rma_key = a.rma[0].key;
  }
  if (inject) {
    // fi_inject: the buffer is free for reuse on return, so take a copy now.
    op->own.resize(len);
    size_t off = 0;
    for (size_t i = 0; i < a.count; ++i) {
      if (a.iov[i].iov_len) std::memcpy(op->own.data() + off, a.iov[i].iov_base, a.iov[i].iov_len);
      off += a.iov[i].iov_len;
    }
    op->segs.push_back(Seg{op->own.data(), len, nullptr});
  } else {
    op->segs = std::move(segs);
  }
  op->ordered = (ep->tx_msg_order & FI_ORDER_SAS) != 0;
  op->direct = ep->direct;
  op->wire_delay = ep->faults.wire_delay;
  if (op->wire_delay) count_fault(MOCKEFA_F_WIRE_DELAY);
  op->needs_handshake = needs_hs;
  if (inject_fail) {
    count_fault(MOCKEFA_F_ERROR);
    op->fail_prov = ep->faults.error_prov_errno;
    op->fail_err = efa_errno_to_err(op->fail_prov);
  }
  if (ep->faults.unreachable_after != MOCKEFA_NEVER && ep->tx_ops > ep->faults.unreachable_after)
    ep->unreachable = true;
  if (ep->unreachable && !inject_fail) {
    op->fail_unreachable = true;
    op->fail_prov = kEfaUnreach;
    op->fail_err = efa_errno_to_err(kEfaUnreach);
  }
  // MOCKEFA_EQ_ERROR_AFTER: the (n+1)-th accepted tx op's handshake with its destination fails.
  // The error (no operation owns it) is raised at the endpoint's next progress pass; from now on
  // every op of this endpoint to that peer fails, this one included.
  if (!ep->eq_error_fired && ep->faults.eq_error_after != MOCKEFA_NEVER &&
      ep->tx_ops > ep->faults.eq_error_after) {
    ep->eq_error_fired = true;
    ep->lost_peers.insert(peer);
    ep->eq_error_pending.push_back(peer);
  }
  if (!op->fail_err && ep->lost_peers.count(peer)) {
    op->fail_peer_lost = true;
    op->fail_prov = kEfaUnreach;
    op->fail_err = efa_errno_to_err(kEfaUnreach);
  }
  ep->tx_outstanding++;
  wire_push(op);
  // MOCKEFA_NET: like EFA, which hands a send to the device when it is posted, the operation
  // leaves now (its failures still come at the initiator's next pass).
  if (ep->chan && !op->fail_err) net_post(ep, op);
  return 0;
}

namespace {

Ep* ep_from(fid_ep* f) { return self_of<Ep>(f); }

// Flags for the non-msg calls: only what the endpoint's op_flags say about completions.
uint64_t tx_default_flags(Ep* ep) { return ep->tx_op_flags & FI_COMPLETION; }
uint64_t rx_default_flags(Ep* ep) { return ep->rx_op_flags & FI_COMPLETION; }

ssize_t do_post(fid_ep* f, OpKind kind, bool is_recv, const iovec* iov, void** desc, size_t count,
                fi_addr_t addr, void* context, uint64_t flags, uint64_t data, uint64_t tag,
                uint64_t ignore, bool inject_call) {
  PostArgs a;
  a.kind = kind;
  a.is_recv = is_recv;
  a.iov = iov;
  a.desc = desc;
  a.count = count;
  a.addr = addr;
  a.context = context;
  a.flags = flags;
  a.data = data;
  a.tag = tag;
  a.ignore = ignore;
  a.inject_call = inject_call;
  return post(ep_from(f), a);
}

// ---- fi_msg ----

ssize_t msg_recv(fid_ep* ep, void* buf, size_t len, void* desc, fi_addr_t src, void* context) {
  iovec iov{buf, len};
  return do_post(ep, OpKind::kMsg, true, &iov, &desc, 1, src, context,
                 rx_default_flags(ep_from(ep)), 0, 0, 0, false);
}
ssize_t msg_recvv(fid_ep* ep, const iovec* iov, void** desc, size_t count, fi_addr_t src,
                  void* context) {
  return do_post(ep, OpKind::kMsg, true, iov, desc, count, src, context,
                 rx_default_flags(ep_from(ep)), 0, 0, 0, false);
}
ssize_t msg_recvmsg(fid_ep* ep, const fi_msg* m, uint64_t flags) {
  if (!m) return -FI_EINVAL;
  return do_post(ep, OpKind::kMsg, true, m->msg_iov, m->desc, m->iov_count, m->addr, m->context,
                 flags, 0, 0, 0, false);
}
ssize_t msg_send(fid_ep* ep, const void* buf, size_t len, void* desc, fi_addr_t dest,
                 void* context) {
  iovec iov{const_cast<void*>(buf), len};
  return do_post(ep, OpKind::kMsg, false, &iov, &desc, 1, dest, context,
                 tx_default_flags(ep_from(ep)), 0, 0, 0, false);
}
ssize_t msg_sendv(fid_ep* ep, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
                  void* context) {
  return do_post(ep, OpKind::kMsg, false, iov, desc, count, dest, context,
                 tx_default_flags(ep_from(ep)), 0, 0, 0, false);
}
ssize_t msg_sendmsg(fid_ep* ep, const fi_msg* m, uint64_t flags) {
  if (!m) return -FI_EINVAL;
  return do_post(ep, OpKind::kMsg, false, m->msg_iov, m->desc, m->iov_count, m->addr, m->context,
                 flags, m->data, 0, 0, false);
}
ssize_t msg_inject(fid_ep* ep, const void* buf, size_t len, fi_addr_t dest) {
  iovec iov{const_cast<void*>(buf), len};
  return do_post(ep, OpKind::kMsg, false, &iov, nullptr, 1, dest, nullptr, FI_INJECT, 0, 0, 0,
                 true);
}
ssize_t msg_senddata(fid_ep* ep, const void* buf, size_t len, void* desc, uint64_t data,
                     fi_addr_t dest, void* context) {
  iovec iov{const_cast<void*>(buf), len};
  return do_post(ep, OpKind::kMsg, false, &iov, &desc, 1, dest, context,
                 tx_default_flags(ep_from(ep)) | FI_REMOTE_CQ_DATA, data, 0, 0, false);
}
ssize_t msg_injectdata(fid_ep* ep, const void* buf, size_t len, uint64_t data, fi_addr_t dest) {
  iovec iov{const_cast<void*>(buf), len};
  return do_post(ep, OpKind::kMsg, false, &iov, nullptr, 1, dest, nullptr,
                 FI_INJECT | FI_REMOTE_CQ_DATA, data, 0, 0, true);
}

// ---- fi_tagged ----

ssize_t tag_recv(fid_ep* ep, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t tag,
                 uint64_t ignore, void* context) {
  iovec iov{buf, len};
  return do_post(ep, OpKind::kTagged, true, &iov, &desc, 1, src, context,
                 rx_default_flags(ep_from(ep)), 0, tag, ignore, false);
}
ssize_t tag_recvv(fid_ep* ep, const iovec* iov, void** desc, size_t count, fi_addr_t src,
                  uint64_t tag, uint64_t ignore, void* context) {
  return do_post(ep, OpKind::kTagged, true, iov, desc, count, src, context,
                 rx_default_flags(ep_from(ep)), 0, tag, ignore, false);
}
ssize_t tag_recvmsg(fid_ep* ep, const fi_msg_tagged* m, uint64_t flags) {
  if (!m) return -FI_EINVAL;
  return do_post(ep, OpKind::kTagged, true, m->msg_iov, m->desc, m->iov_count, m->addr, m->context,
                 flags, 0, m->tag, m->ignore, false);
}
ssize_t tag_send(fid_ep* ep, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t tag,
                 void* context) {
  iovec iov{const_cast<void*>(buf), len};
  return do_post(ep, OpKind::kTagged, false, &iov, &desc, 1, dest, context,
                 tx_default_flags(ep_from(ep)), 0, tag, 0, false);
}
ssize_t tag_sendv(fid_ep* ep, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
                  uint64_t tag, void* context) {
  return do_post(ep, OpKind::kTagged, false, iov, desc, count, dest, context,
                 tx_default_flags(ep_from(ep)), 0, tag, 0, false);
}
ssize_t tag_sendmsg(fid_ep* ep, const fi_msg_tagged* m, uint64_t flags) {
  if (!m) return -FI_EINVAL;
  return do_post(ep, OpKind::kTagged, false, m->msg_iov, m->desc, m->iov_count, m->addr, m->context,
                 flags, m->data, m->tag, 0, false);
}
ssize_t tag_inject(fid_ep* ep, const void* buf, size_t len, fi_addr_t dest, uint64_t tag) {
  iovec iov{const_cast<void*>(buf), len};
  return do_post(ep, OpKind::kTagged, false, &iov, nullptr, 1, dest, nullptr, FI_INJECT, 0, tag, 0,
                 true);
}
ssize_t tag_senddata(fid_ep* ep, const void* buf, size_t len, void* desc, uint64_t data,
                     fi_addr_t dest, uint64_t tag, void* context) {
  iovec iov{const_cast<void*>(buf), len};
  return do_post(ep, OpKind::kTagged, false, &iov, &desc, 1, dest, context,
                 tx_default_flags(ep_from(ep)) | FI_REMOTE_CQ_DATA, data, tag, 0, false);
}
ssize_t tag_injectdata(fid_ep* ep, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                       uint64_t tag) {
  iovec iov{const_cast<void*>(buf), len};
  return do_post(ep, OpKind::kTagged, false, &iov, nullptr, 1, dest, nullptr,
                 FI_INJECT | FI_REMOTE_CQ_DATA, data, tag, 0, true);
}

}  // namespace

void init_msg_ops() {
  g_msg_ops.size = sizeof(fi_ops_msg);
  g_msg_ops.recv = msg_recv;
  g_msg_ops.recvv = msg_recvv;
  g_msg_ops.recvmsg = msg_recvmsg;
  g_msg_ops.send = msg_send;
  g_msg_ops.sendv = msg_sendv;
  g_msg_ops.sendmsg = msg_sendmsg;
  g_msg_ops.inject = msg_inject;
  g_msg_ops.senddata = msg_senddata;
  g_msg_ops.injectdata = msg_injectdata;
  g_tagged_ops.size = sizeof(fi_ops_tagged);
  g_tagged_ops.recv = tag_recv;
  g_tagged_ops.recvv = tag_recvv;
  g_tagged_ops.recvmsg = tag_recvmsg;
  g_tagged_ops.send = tag_send;
  g_tagged_ops.sendv = tag_sendv;
  g_tagged_ops.sendmsg = tag_sendmsg;
  g_tagged_ops.inject = tag_inject;
  g_tagged_ops.senddata = tag_senddata;
  g_tagged_ops.injectdata = tag_injectdata;
}

}  // namespace mockefa
