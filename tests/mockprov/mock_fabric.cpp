// Fabric, domain and address vector (FI_AV_TABLE).
#include <cstdio>

#include "mock_internal.h"

namespace mockefa {

fi_ops g_fabric_fi_ops, g_domain_fi_ops, g_av_fi_ops;
fi_ops_fabric g_fabric_ops;
fi_ops_domain g_domain_ops;
fi_ops_av g_av_ops;

bool Av::lookup(fi_addr_t a, EfaAddr* out) const {
  if (a >= table.size() || !valid[a]) return false;
  if (out) *out = table[a];
  return true;
}

fi_addr_t Av::reverse(const EfaAddr& a) const {
  for (size_t i = 0; i < table.size(); ++i)
    if (valid[i] && table[i] == a) return i;
  return FI_ADDR_NOTAVAIL;
}

namespace {

int enosys_bind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }
int enosys_control(fid*, int, void*) { return -FI_ENOSYS; }
int enosys_ops_open(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
int enosys_tostr(const fid*, char*, size_t) { return -FI_ENOSYS; }
int enosys_ops_set(fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }

void fill_fi_ops(fi_ops* o, int (*close_fn)(fid*)) {
  o->size = sizeof(fi_ops);
  o->close = close_fn;
  o->bind = enosys_bind;
  o->control = enosys_control;
  o->ops_open = enosys_ops_open;
  o->tostr = enosys_tostr;
  o->ops_set = enosys_ops_set;
}

// ---- fabric ----

int fabric_close(fid* f) {
  Lock lk(g().mu);
  Fabric* fab = self_of<Fabric>(reinterpret_cast<fid_fabric*>(f));
  if (fab->domains || fab->eqs) {
    violation(MOCKEFA_V_BUSY_CLOSE, "fi_close(fabric) with %d domain(s) and %d EQ(s) open",
              fab->domains, fab->eqs);
    return -FI_EBUSY;
  }
  delete fab;
  g().counters.open_fabrics--;
  return 0;
}

int domain_open(fid_fabric* fabric, fi_info* info, fid_domain** dom, void* context);

int domain2_open(fid_fabric* fabric, fi_info* info, fid_domain** dom, uint64_t flags,
                 void* context) {
  if (flags) return -FI_EINVAL;
  return domain_open(fabric, info, dom, context);
}

int fabric_passive_ep(fid_fabric*, fi_info*, fid_pep**, void*) { return -FI_ENOSYS; }
int fabric_wait_open(fid_fabric*, fi_wait_attr*, fid_wait**) { return -FI_ENOSYS; }
int fabric_trywait(fid_fabric*, fid**, int) { return -FI_ENOSYS; }

// ---- domain ----

int domain_close(fid* f) {
  Lock lk(g().mu);
  Domain* d = self_of<Domain>(reinterpret_cast<fid_domain*>(f));
  if (d->children) {
    violation(MOCKEFA_V_BUSY_CLOSE, "fi_close(domain %s) with %d object(s) open", d->name.c_str(),
              d->children);
    return -FI_EBUSY;
  }
  d->fabric->domains--;
  delete d;
  g().counters.open_domains--;
  return 0;
}

int domain_bind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }  // no EQ support

int av_open(fid_domain* domain, fi_av_attr* attr, fid_av** av, void* context);

int domain_scalable_ep(fid_domain*, fi_info*, fid_ep**, void*) { return -FI_ENOSYS; }
int domain_cntr_open(fid_domain*, fi_cntr_attr*, fid_cntr**, void*) { return -FI_ENOSYS; }
int domain_poll_open(fid_domain*, fi_poll_attr*, fid_poll**) { return -FI_ENOSYS; }
int domain_stx_ctx(fid_domain*, fi_tx_attr*, fid_stx**, void*) { return -FI_ENOSYS; }
int domain_srx_ctx(fid_domain*, fi_rx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }
int domain_query_atomic(fid_domain*, fi_datatype, fi_op, fi_atomic_attr*, uint64_t) {
  return -FI_EOPNOTSUPP;
}
int domain_query_collective(fid_domain*, fi_collective_op, fi_collective_attr*, uint64_t) {
  return -FI_ENOSYS;
}
int domain_endpoint2(fid_domain* domain, fi_info* info, fid_ep** ep, uint64_t flags,
                     void* context) {
  if (flags) return -FI_EINVAL;
  return mock_endpoint(domain, info, ep, context);
}

int domain_open(fid_fabric* fabric, fi_info* info, fid_domain** dom, void* context) {
  if (!fabric || !info || !dom || !info->domain_attr) return -FI_EINVAL;
  Lock lk(g().mu);
  Fabric* fab = self_of<Fabric>(fabric);
  Profile p = read_profile();
  int index = info->domain_attr->name ? domain_index(info->domain_attr->name, p.ndomains) : 0;
  if (index < 0) return -FI_ENODEV;  // not one of the NICs MOCKEFA_NDOMAINS gives now
  auto* d = new Domain();
  d->h.self = d;
  d->h.fid.fid.fclass = FI_CLASS_DOMAIN;
  d->h.fid.fid.context = context;
  d->h.fid.fid.ops = &g_domain_fi_ops;
  d->h.fid.ops = &g_domain_ops;
  d->h.fid.mr = &g_mr_ops;
  d->fabric = fab;
  d->index = index;
  d->name = domain_name(index);
  d->mr_mode = info->domain_attr->mr_mode;
  if (d->mr_mode & kMrBasicLegacy) d->mr_mode = kMrRequired;
  d->caps = info->caps;
  d->profile = p;
  d->direct = fab->direct;
  fab->domains++;
  g().counters.open_domains++;
  *dom = &d->h.fid;
  return 0;
}

// ---- address vector ----

int av_close(fid* f) {
  Lock lk(g().mu);
  Av* av = self_of<Av>(reinterpret_cast<fid_av*>(f));
  if (av->bound_eps) {
    violation(MOCKEFA_V_BUSY_CLOSE, "fi_close(av) with %d endpoint(s) bound", av->bound_eps);
    return -FI_EBUSY;
  }
  av->domain->children--;
  delete av;
  g().counters.open_avs--;
  return 0;
}

int av_insert(fid_av* fav, const void* addr, size_t count, fi_addr_t* fi_addr, uint64_t flags,
              void*) {
  if (flags & ~FI_MORE) return -FI_EBADFLAGS;
  if (count && !addr) return -FI_EINVAL;
  Lock lk(g().mu);
  Av* av = self_of<Av>(fav);
  const auto* in = static_cast<const EfaAddr*>(addr);
  for (size_t i = 0; i < count; ++i) {
    // Like EFA, inserting an address already in the AV gives back its existing fi_addr.
    fi_addr_t a = av->reverse(in[i]);
    if (a == FI_ADDR_NOTAVAIL) {
      a = av->table.size();
      av->table.push_back(in[i]);
      av->valid.push_back(true);
    }
    if (fi_addr) fi_addr[i] = a;
  }
  return static_cast<int>(count);
}

int av_insertsvc(fid_av*, const char*, const char*, fi_addr_t*, uint64_t, void*) {
  return -FI_ENOSYS;
}
int av_insertsym(fid_av*, const char*, size_t, const char*, size_t, fi_addr_t*, uint64_t, void*) {
  return -FI_ENOSYS;
}

int av_remove(fid_av* fav, fi_addr_t* fi_addr, size_t count, uint64_t flags) {
  if (flags) return -FI_EBADFLAGS;
  Lock lk(g().mu);
  Av* av = self_of<Av>(fav);
  for (size_t i = 0; i < count; ++i)
    if (!av->lookup(fi_addr[i], nullptr)) return -FI_EINVAL;
  for (size_t i = 0; i < count; ++i) av->valid[fi_addr[i]] = false;
  return 0;
}

int av_lookup(fid_av* fav, fi_addr_t fi_addr, void* addr, size_t* addrlen) {
  if (!addrlen) return -FI_EINVAL;
  Lock lk(g().mu);
  Av* av = self_of<Av>(fav);
  EfaAddr a;
  if (!av->lookup(fi_addr, &a)) return -FI_EINVAL;
  if (addr) std::memcpy(addr, &a, std::min(*addrlen, kAddrLen));
  *addrlen = kAddrLen;
  return 0;
}

const char* av_straddr(fid_av*, const void* addr, char* buf, size_t* len) {
  if (!addr || !len) return nullptr;
  EfaAddr a;
  std::memcpy(&a, addr, kAddrLen);
  std::string s = addr_str(a);
  if (buf && *len) std::snprintf(buf, *len, "%s", s.c_str());
  *len = s.size() + 1;
  return buf;
}

int av_set(fid_av*, fi_av_set_attr*, fid_av_set**, void*) { return -FI_ENOSYS; }

int av_open(fid_domain* domain, fi_av_attr* attr, fid_av** fav, void* context) {
  if (!domain || !attr || !fav) return -FI_EINVAL;
  // EFA 2.1+ turns FI_AV_MAP into FI_AV_TABLE; no named/shared AVs, no EQ (FI_EVENT).
  if (attr->type != FI_AV_UNSPEC && attr->type != FI_AV_TABLE && attr->type != FI_AV_MAP)
    return -FI_EINVAL;
  if (attr->name || (attr->flags & FI_EVENT)) return -FI_ENOSYS;
  Lock lk(g().mu);
  Domain* d = self_of<Domain>(domain);
  auto* av = new Av();
  av->h.self = av;
  av->h.fid.fid.fclass = FI_CLASS_AV;
  av->h.fid.fid.context = context;
  av->h.fid.fid.ops = &g_av_fi_ops;
  av->h.fid.ops = &g_av_ops;
  av->domain = d;
  attr->type = FI_AV_TABLE;
  d->children++;
  g().counters.open_avs++;
  *fav = &av->h.fid;
  return 0;
}

}  // namespace

int mock_fabric_open(fi_fabric_attr* attr, fid_fabric** fabric, void* context) {
  if (!attr || !fabric) return -FI_EINVAL;
  bool direct = false;
#if MOCKEFA_HAVE_DIRECT
  direct = attr->name && std::strcmp(attr->name, kDirectFabricName) == 0;
#endif
  if (attr->name && !direct && std::strcmp(attr->name, kFabricName) != 0) return -FI_ENODATA;
  Lock lk(g().mu);
  auto* fab = new Fabric();
  fab->h.self = fab;
  fab->h.fid.fid.fclass = FI_CLASS_FABRIC;
  fab->h.fid.fid.context = context;
  fab->h.fid.fid.ops = &g_fabric_fi_ops;
  fab->h.fid.ops = &g_fabric_ops;
  // libfabric's core passes the fi_info's fabric_attr, whose api_version it set to the version
  // the application asked fi_getinfo for (and copies it into fid_fabric.api_version after we
  // return). EFA keys several behaviours on it; so does the mock.
  fab->api_version = attr->api_version;
  fab->direct = direct;
  fab->h.fid.api_version = attr->api_version;
  g().last_api_version = attr->api_version;
  g().counters.open_fabrics++;
  *fabric = &fab->h.fid;
  return 0;
}

void init_fabric_ops() {
  fill_fi_ops(&g_fabric_fi_ops, fabric_close);
  g_fabric_ops.size = sizeof(fi_ops_fabric);
  g_fabric_ops.domain = domain_open;
  g_fabric_ops.passive_ep = fabric_passive_ep;
  g_fabric_ops.eq_open = mock_eq_open;
  g_fabric_ops.wait_open = fabric_wait_open;
  g_fabric_ops.trywait = fabric_trywait;
  g_fabric_ops.domain2 = domain2_open;

  fill_fi_ops(&g_domain_fi_ops, domain_close);
  g_domain_fi_ops.bind = domain_bind;
  g_domain_ops.size = sizeof(fi_ops_domain);
  g_domain_ops.av_open = av_open;
  g_domain_ops.cq_open = mock_cq_open;
  g_domain_ops.endpoint = mock_endpoint;
  g_domain_ops.scalable_ep = domain_scalable_ep;
  g_domain_ops.cntr_open = domain_cntr_open;
  g_domain_ops.poll_open = domain_poll_open;
  g_domain_ops.stx_ctx = domain_stx_ctx;
  g_domain_ops.srx_ctx = domain_srx_ctx;
  g_domain_ops.query_atomic = domain_query_atomic;
  g_domain_ops.query_collective = domain_query_collective;
  g_domain_ops.endpoint2 = domain_endpoint2;

  fill_fi_ops(&g_av_fi_ops, av_close);
  g_av_ops.size = sizeof(fi_ops_av);
  g_av_ops.insert = av_insert;
  g_av_ops.insertsvc = av_insertsvc;
  g_av_ops.insertsym = av_insertsym;
  g_av_ops.remove = av_remove;
  g_av_ops.lookup = av_lookup;
  g_av_ops.straddr = av_straddr;
  g_av_ops.av_set = av_set;
}

// Shared by cq/mr/ep for their fi_ops tables.
void fill_object_fi_ops(fi_ops* o, int (*close_fn)(fid*)) { fill_fi_ops(o, close_fn); }

}  // namespace mockefa
