/*
 * FI_MR_DMABUF and struct fi_mr_dmabuf as libfabric 1.20+ defines them, for code built against
 * older headers (Debian 12 has 1.17). From 1.20 the first member of struct fi_mr_attr is a union
 * { const struct iovec *mr_iov; const struct fi_mr_dmabuf *dmabuf; }: with FI_MR_DMABUF, store
 * the fi_mr_dmabuf pointer in mr_iov (same place, same size) and set iov_count to 1.
 */
#ifndef MOCKEFA_DMABUF_H
#define MOCKEFA_DMABUF_H

#include <stddef.h>
#include <stdint.h>

#include <rdma/fi_domain.h>

#ifndef FI_MR_DMABUF
#define FI_MR_DMABUF (1ULL << 40)
struct fi_mr_dmabuf {
  int fd; /* the dma-buf; the provider does not keep it (it may be closed after fi_mr_regattr) */
  uint64_t offset; /* where the region starts inside the dma-buf */
  size_t len;      /* length of the region */
  void*
      base_addr; /* virtual address of the dma-buf's byte 0: the region is at base_addr + offset */
};
#endif

#ifdef __cplusplus
static_assert(sizeof(struct fi_mr_dmabuf) == 32 && offsetof(struct fi_mr_dmabuf, offset) == 8 &&
                  offsetof(struct fi_mr_dmabuf, len) == 16 &&
                  offsetof(struct fi_mr_dmabuf, base_addr) == 24,
              "struct fi_mr_dmabuf has libfabric's layout");
#endif

#endif /* MOCKEFA_DMABUF_H */
