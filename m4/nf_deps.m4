# Dependency checks. Each failure names the missing piece and the Debian package that provides it.

AC_DEFUN([AX_CXX_STD17], [
  AC_MSG_CHECKING([whether $CXX accepts -std=c++17])
  nf_save_CXXFLAGS="$CXXFLAGS"; CXXFLAGS="$CXXFLAGS -std=c++17"
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <optional>]], [[std::optional<int> x; (void)x;]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no]); AC_MSG_ERROR([a C++17 compiler is needed (Debian: apt-get install g++)])])
  CXXFLAGS="$nf_save_CXXFLAGS"
  AM_CXXFLAGS_STD="-std=c++17"
  AC_SUBST([AM_CXXFLAGS_STD])
])

AC_DEFUN([NF_CHECK_LIBFABRIC], [
  AC_ARG_WITH([libfabric],
    [AS_HELP_STRING([--with-libfabric=DIR], [libfabric install prefix (default: pkg-config)])],
    [], [with_libfabric=pkgconfig])
  AS_IF([test "x$with_libfabric" = xno],
        [AC_MSG_ERROR([libfabric is required: it is what the plugin drives])])
  AS_IF([test "x$with_libfabric" = xpkgconfig || test "x$with_libfabric" = xyes], [
    PKG_CHECK_MODULES([FABRIC], [libfabric >= 1.17], [],
      [AC_MSG_ERROR([libfabric >= 1.17 not found by pkg-config. Install it (Debian: apt-get install libfabric-dev) or pass --with-libfabric=DIR])])
    FABRIC_VERSION=`$PKG_CONFIG --modversion libfabric`
    # Its headers are system headers to us: our warnings (-Wshadow, -Werror) are not theirs to pass
    # (libfabric 2.x declares functions named like structs).
    FABRIC_CFLAGS=`echo " $FABRIC_CFLAGS" | sed 's/ -I/ -isystem /g'`
  ], [
    FABRIC_CFLAGS="-isystem $with_libfabric/include"
    nf_fabric_libdir="$with_libfabric/lib"
    AS_IF([test -d "$with_libfabric/lib64"], [nf_fabric_libdir="$with_libfabric/lib64"])
    FABRIC_LIBS="-L$nf_fabric_libdir -Wl,-rpath,$nf_fabric_libdir -lfabric"
    FABRIC_VERSION="$with_libfabric"
  ])
  nf_save_CPPFLAGS="$CPPFLAGS"; nf_save_LIBS="$LIBS"
  CPPFLAGS="$CPPFLAGS $FABRIC_CFLAGS"; LIBS="$LIBS $FABRIC_LIBS"
  AC_CHECK_HEADER([rdma/fi_tagged.h], [],
    [AC_MSG_ERROR([libfabric headers (rdma/fi_tagged.h) not found (Debian: apt-get install libfabric-dev)])])
  AC_CHECK_HEADER([rdma/providers/fi_prov.h], [],
    [AC_MSG_ERROR([libfabric provider headers (rdma/providers/fi_prov.h) not found; the mock provider needs them (Debian: libfabric-dev)])])
  AC_MSG_CHECKING([for fi_getinfo in libfabric])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <rdma/fabric.h>]], [[return (int)fi_version();]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no]); AC_MSG_ERROR([cannot link with libfabric ($FABRIC_LIBS) (Debian: apt-get install libfabric-dev)])])
  # What the headers declare beyond 1.17, symbol by symbol (src/fabric/fi_compat.h declares the
  # rest itself, with the values and layouts the newer ABI fixes).
  AC_CHECK_DECLS([FI_OPT_CUDA_API_PERMITTED, FI_MR_DMABUF, FI_OPT_EFA_EMULATED_WRITE,
                  FI_OPT_EFA_USE_DEVICE_RDMA, FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES,
                  FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES, FI_AV_MAP,
                  FI_OPT_MAX_MSG_SIZE, FI_OPT_MAX_RMA_SIZE], [], [],
    [[#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_ext.h>]])
  AC_CHECK_TYPES([struct fi_mr_dmabuf], [], [], [[#include <rdma/fi_domain.h>]])
  AC_CHECK_MEMBERS([struct fi_mr_attr.dmabuf, struct fi_mr_attr.hmem_data], [], [],
    [[#include <rdma/fi_domain.h>]])
  AC_MSG_CHECKING([the libfabric API version of the headers])
  AC_COMPUTE_INT([nf_fi_major], [FI_MAJOR_VERSION], [[#include <rdma/fabric.h>]], [nf_fi_major=0])
  AC_COMPUTE_INT([nf_fi_minor], [FI_MINOR_VERSION], [[#include <rdma/fabric.h>]], [nf_fi_minor=0])
  FABRIC_HEADERS_VERSION="$nf_fi_major.$nf_fi_minor"
  AC_MSG_RESULT([$FABRIC_HEADERS_VERSION])
  AS_IF([test "$nf_fi_major" -lt 1 || { test "$nf_fi_major" -eq 1 && test "$nf_fi_minor" -lt 17; }],
    [AC_MSG_ERROR([libfabric headers $FABRIC_HEADERS_VERSION are older than 1.17, the oldest we support])])
  CPPFLAGS="$nf_save_CPPFLAGS"; LIBS="$nf_save_LIBS"
  AC_SUBST([FABRIC_HEADERS_VERSION])
  AC_SUBST([FABRIC_CFLAGS])
  AC_SUBST([FABRIC_LIBS])
  AC_SUBST([FABRIC_VERSION])
])

AC_DEFUN([NF_CHECK_HWLOC], [
  AC_ARG_WITH([hwloc],
    [AS_HELP_STRING([--with-hwloc=DIR], [hwloc install prefix (default: pkg-config)])],
    [], [with_hwloc=pkgconfig])
  AS_IF([test "x$with_hwloc" = xpkgconfig || test "x$with_hwloc" = xyes], [
    PKG_CHECK_MODULES([HWLOC], [hwloc >= 2.0], [],
      [AC_MSG_ERROR([hwloc >= 2.0 not found by pkg-config. Install it (Debian: apt-get install libhwloc-dev) or pass --with-hwloc=DIR])])
    HWLOC_VERSION=`$PKG_CONFIG --modversion hwloc`
  ], [
    AS_IF([test "x$with_hwloc" = xno], [AC_MSG_ERROR([hwloc is required (Debian: apt-get install libhwloc-dev)])])
    HWLOC_CFLAGS="-I$with_hwloc/include"
    HWLOC_LIBS="-L$with_hwloc/lib -lhwloc"
    HWLOC_VERSION="$with_hwloc"
    nf_save_CPPFLAGS="$CPPFLAGS"; CPPFLAGS="$CPPFLAGS $HWLOC_CFLAGS"
    AC_CHECK_HEADER([hwloc.h], [], [AC_MSG_ERROR([hwloc.h not found under $with_hwloc (Debian: apt-get install libhwloc-dev)])])
    CPPFLAGS="$nf_save_CPPFLAGS"
  ])
  AC_SUBST([HWLOC_CFLAGS])
  AC_SUBST([HWLOC_LIBS])
  AC_SUBST([HWLOC_VERSION])
])

AC_DEFUN([NF_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda=DIR], [CUDA toolkit for cuda.h (optional; default: /usr/local/cuda if present). The plugin never links CUDA.])],
    [], [with_cuda=check])
  CUDA_CPPFLAGS=""
  nf_cuda_msg="no (GPU memory support compiled out)"
  AS_IF([test "x$with_cuda" = xcheck], [AS_IF([test -f /usr/local/cuda/include/cuda.h], [with_cuda=/usr/local/cuda], [with_cuda=no])])
  AS_IF([test "x$with_cuda" != xno], [
    AS_IF([test -f "$with_cuda/include/cuda.h"],
      [CUDA_CPPFLAGS="-I$with_cuda/include -DNF_HAVE_CUDA_H=1"; nf_cuda_msg="$with_cuda/include"],
      [AC_MSG_ERROR([--with-cuda=$with_cuda: $with_cuda/include/cuda.h not found (NVIDIA CUDA toolkit)])])
  ])
  AC_SUBST([CUDA_CPPFLAGS])
])

AC_DEFUN([NF_CHECK_CATCH2], [
  AC_CHECK_HEADER([catch2/catch.hpp], [],
    [AC_MSG_ERROR([Catch2 v2 (catch2/catch.hpp) not found; make check needs it (Debian: apt-get install catch2)])])
])
