#include "hostile_peer.h"

#include <rdma/fi_tagged.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <chrono>
#include <cstdio>
#include <cstring>

namespace nft {

namespace {

using Clock = std::chrono::steady_clock;

bool expired(Clock::time_point start, int ms) {
  return Clock::now() - start > std::chrono::milliseconds(ms);
}

}  // namespace

Hostile::~Hostile() {
  if (ep_) fi_close(&ep_->fid);
  for (auto& r : rx_)
    if (r->mr) fi_close(&r->mr->fid);
  if (tx_mr_) fi_close(&tx_mr_->fid);
  if (av_) fi_close(&av_->fid);
  if (cq_) fi_close(&cq_->fid);
  if (domain_) fi_close(&domain_->fid);
  if (fabric_) fi_close(&fabric_->fid);
  if (info_) fi_freeinfo(info_);
}

bool Hostile::open(const std::string& provider, std::string* err, bool tagged) {
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE | (tagged ? FI_TAGGED : 0);
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info_);
  fi_freeinfo(hints);
  if (rc != 0 || info_ == nullptr) {
    *err = std::string("fi_getinfo: ") + fi_strerror(-rc);
    return false;
  }
  fi_cq_attr cq_attr = {};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  cq_attr.size = 1024;
  fi_av_attr av_attr = {};
  av_attr.type = FI_AV_TABLE;
  if ((rc = fi_fabric(info_->fabric_attr, &fabric_, nullptr)) != 0 ||
      (rc = fi_domain(fabric_, info_, &domain_, nullptr)) != 0 ||
      (rc = fi_cq_open(domain_, &cq_attr, &cq_, nullptr)) != 0 ||
      (rc = fi_av_open(domain_, &av_attr, &av_, nullptr)) != 0 ||
      (rc = fi_endpoint(domain_, info_, &ep_, nullptr)) != 0 ||
      (rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV)) != 0 ||
      (rc = fi_ep_bind(ep_, &av_->fid, 0)) != 0 || (rc = fi_enable(ep_)) != 0) {
    *err = std::string("opening the endpoint: ") + fi_strerror(-rc);
    return false;
  }
  addr_len_ = sizeof(addr_);
  if ((rc = fi_getname(&ep_->fid, addr_, &addr_len_)) != 0) {
    *err = std::string("fi_getname: ") + fi_strerror(-rc);
    return false;
  }
  tx_.assign(1 << 17, 0);
  if (!reg(tx_.data(), tx_.size(), FI_SEND | FI_WRITE, &tx_mr_, &tx_desc_, err)) return false;
  for (int i = 0; i < 64; ++i) {
    rx_.emplace_back(new Rx());
    Rx* r = rx_.back().get();
    if (!reg(r->buf, sizeof(r->buf), FI_RECV, &r->mr, &r->desc, err)) return false;
    post(r);
  }
  return true;
}

bool Hostile::reg(void* buf, size_t len, uint64_t access, fid_mr** mr, void** desc,
                  std::string* err) {
  const uint64_t mode = info_->domain_attr->mr_mode;
  *mr = nullptr;
  *desc = nullptr;
  if ((mode & FI_MR_LOCAL) == 0 && (access & (FI_REMOTE_WRITE | FI_REMOTE_READ)) == 0) return true;
  const uint64_t key = (mode & FI_MR_PROV_KEY) ? 0 : next_key_++;
  int rc = fi_mr_reg(domain_, buf, len, access, 0, key, 0, mr, nullptr);
  if (rc == 0 && (mode & FI_MR_ENDPOINT)) {
    rc = fi_mr_bind(*mr, &ep_->fid, 0);
    if (rc == 0) rc = fi_mr_enable(*mr);
  }
  if (rc != 0) {
    *err = std::string("fi_mr_reg: ") + fi_strerror(-rc);
    return false;
  }
  *desc = fi_mr_desc(*mr);
  return true;
}

void Hostile::post(Rx* r) {
  for (int i = 0; i < 1000; ++i) {
    const ssize_t rc = fi_recv(ep_, r->buf, sizeof(r->buf), r->desc, FI_ADDR_UNSPEC, &r->ctx);
    if (rc != -FI_EAGAIN) return;
    poll();
  }
}

fi_addr_t Hostile::insert(const uint8_t* addr, size_t len) {
  (void)len;
  fi_addr_t a = FI_ADDR_NOTAVAIL;
  if (fi_av_insert(av_, addr, 1, &a, 0, nullptr) != 1) return FI_ADDR_NOTAVAIL;
  return a;
}

void Hostile::poll() {
  fi_cq_tagged_entry e[16];
  for (;;) {
    const ssize_t n = fi_cq_read(cq_, e, 16);
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err = {};
      if (fi_cq_readerr(cq_, &err, 0) > 0) {
        last_error = fi_strerror(err.err);
        if (err.op_context == &tx_ctx_) {
          --tx_pending_;
          ++send_errors;
        } else {
          for (auto& r : rx_)
            if (err.op_context == &r->ctx) post(r.get());
        }
      }
      continue;
    }
    if (n <= 0) return;
    for (ssize_t i = 0; i < n; ++i) {
      if (e[i].op_context == &tx_ctx_) {
        --tx_pending_;
        continue;
      }
      if (e[i].op_context == nullptr || (e[i].flags & FI_REMOTE_WRITE)) {
        if (e[i].flags & FI_REMOTE_CQ_DATA) writes.push_back(e[i].data);
        continue;
      }
      for (auto& r : rx_) {
        if (e[i].op_context != &r->ctx) continue;
        Msg m;
        m.b.assign(r->buf, r->buf + e[i].len);
        m.flags = e[i].flags;
        m.data = e[i].data;
        post(r.get());
        // A liveness ping: a live peer answers it.
        CtrlHdr h;
        ProbeMsg pm;
        std::string why;
        if (m.b.size() >= kCtrlHdrSize && decode_ctrl_hdr(m.b.data(), m.b.size(), &h, &why) &&
            ctrl_kind(h) == kCtrlProbe) {
          if (answer_probes &&
              decode_probe(m.b.data() + kCtrlHdrSize, m.b.size() - kCtrlHdrSize, &pm, &why) &&
              pm.kind == kProbePing) {
            ProbeMsg pong = {};
            pong.magic = kProbeMagic;
            pong.version = kWireVersion;
            pong.kind = kProbePong;
            pong.token = pm.token;
            pong.seq = pm.seq;
            const fi_addr_t to = insert(pm.addr, pm.addr_len);
            if (to != FI_ADDR_NOTAVAIL) {
              uint8_t b[kCtrlHdrSize + kProbeFixed];
              const CtrlHdr ph = ctrl_hdr(kCtrlProbe, 0, 0);
              memcpy(b, &ph, kCtrlHdrSize);
              memcpy(b + kCtrlHdrSize, &pong, kProbeFixed);
              fi_inject(ep_, b, sizeof(b), to);
            }
          }
          break;
        }
        inbox_.push_back(std::move(m));
        break;
      }
    }
  }
}

bool Hostile::wait_tx(int timeout_ms) {
  const auto start = Clock::now();
  while (tx_pending_ > 0) {
    poll();
    if (poke) poke();
    if (expired(start, timeout_ms)) return false;
  }
  return true;
}

bool Hostile::post_and_wait(const void* bytes, size_t len, const std::function<ssize_t()>& op) {
  if (len > tx_.size()) return false;
  memcpy(tx_.data(), bytes, len);
  const int errors = send_errors;
  const auto start = Clock::now();
  for (;;) {
    const ssize_t rc = op();
    if (rc == 0) break;
    if (rc != -FI_EAGAIN || expired(start, 10000)) {
      last_error = fi_strerror(static_cast<int>(-rc));
      return false;
    }
    poll();
    if (poke) poke();
  }
  ++tx_pending_;
  return wait_tx(10000) && send_errors == errors;
}

bool Hostile::send(fi_addr_t to, const void* bytes, size_t len, bool with_data, uint64_t data) {
  return post_and_wait(bytes, len, [&]() {
    return with_data ? fi_senddata(ep_, tx_.data(), len, tx_desc_, data, to, &tx_ctx_)
                     : fi_send(ep_, tx_.data(), len, tx_desc_, to, &tx_ctx_);
  });
}

bool Hostile::tsend(fi_addr_t to, const void* bytes, size_t len, uint64_t tag) {
  return post_and_wait(
      bytes, len, [&]() { return fi_tsend(ep_, tx_.data(), len, tx_desc_, to, tag, &tx_ctx_); });
}

bool Hostile::send_ctrl(fi_addr_t to, const CtrlHdr& h, const void* body, size_t len) {
  std::vector<uint8_t> b(kCtrlHdrSize + len);
  memcpy(b.data(), &h, kCtrlHdrSize);
  if (len > 0) memcpy(b.data() + kCtrlHdrSize, body, len);
  return send(to, b.data(), b.size());
}

bool Hostile::write(fi_addr_t to, const void* src, size_t len, uint64_t raddr, uint64_t key,
                    uint64_t imm) {
  return post_and_wait(src, len, [&]() {
    return fi_writedata(ep_, tx_.data(), len, tx_desc_, imm, to, raddr, key, &tx_ctx_);
  });
}

bool Hostile::region(size_t len, Region* out, std::string* err) {
  out->mem.assign(len, 0);
  const uint64_t mode = info_->domain_attr->mr_mode;
  const uint64_t key = (mode & FI_MR_PROV_KEY) ? 0 : next_key_++;
  int rc = fi_mr_reg(domain_, out->mem.data(), len, FI_REMOTE_WRITE | FI_RECV | FI_SEND, 0, key, 0,
                     &out->mr, nullptr);
  if (rc == 0 && (mode & FI_MR_ENDPOINT)) {
    rc = fi_mr_bind(out->mr, &ep_->fid, 0);
    if (rc == 0) rc = fi_mr_enable(out->mr);
  }
  if (rc != 0) {
    *err = std::string("fi_mr_reg(remote write): ") + fi_strerror(-rc);
    return false;
  }
  out->desc = fi_mr_desc(out->mr);
  out->key = fi_mr_key(out->mr);
  out->addr = (mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(out->mem.data()) : 0;
  return true;
}

void Hostile::release(Region* r) {
  if (r->mr) fi_close(&r->mr->fid);
  r->mr = nullptr;
}

bool Hostile::wait_msg(uint8_t kind, Msg* out, int timeout_ms, uint32_t dst) {
  const auto start = Clock::now();
  for (;;) {
    poll();
    for (auto it = inbox_.begin(); it != inbox_.end(); ++it) {
      CtrlHdr h;
      std::string why;
      if (decode_ctrl_hdr(it->b.data(), it->b.size(), &h, &why) && ctrl_kind(h) == kind &&
          (dst == 0 || ctrl_dst(h) == dst)) {
        *out = std::move(*it);
        inbox_.erase(it);
        return true;
      }
    }
    if (poke) poke();
    if (expired(start, timeout_ms)) return false;
  }
}

void Hostile::pump(int ms) {
  const auto start = Clock::now();
  while (!expired(start, ms)) {
    poll();
    if (poke) poke();
  }
}

}  // namespace nft
