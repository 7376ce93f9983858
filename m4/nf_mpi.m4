# MPI for nccl-fabric-perf (optional): under mpirun the tool exchanges its handles over MPI.
#
# --with-mpi=auto (default): use MPI when found, else build the tool without it.
# --with-mpi=yes: MPI is required. --with-mpi=no: never. --with-mpi=DIR: DIR/bin/mpicxx.
# Found through mpicxx (Open MPI: --showme:compile/--showme:link; MPICH: -compile_info/-link_info),
# else pkg-config ompi-cxx or mpi. Sets MPI_CXXFLAGS, MPI_LIBS, nf_mpi_msg and the conditional
# NF_HAVE_MPI (and -DNF_HAVE_MPI=1 in MPI_CXXFLAGS).
AC_DEFUN([NF_CHECK_MPI], [
  AC_ARG_WITH([mpi],
    [AS_HELP_STRING([--with-mpi@<:@=auto|yes|no|DIR@:>@],
      [MPI for nccl-fabric-perf under mpirun (default: auto, used when mpicxx is found); DIR: the MPI prefix holding bin/mpicxx])],
    [], [with_mpi=auto])
  MPI_CXXFLAGS=""
  MPI_LIBS=""
  nf_mpi_found=no
  nf_mpi_how=""
  nf_mpi_msg="no (--with-mpi=no)"
  AS_CASE(["x$with_mpi"],
    [xno], [],
    [xyes|xauto|x], [nf_mpi_path="$PATH"],
    [nf_mpi_path="$with_mpi/bin"
     AS_IF([test -d "$with_mpi/bin"], [],
       [AC_MSG_ERROR([--with-mpi=$with_mpi: $with_mpi/bin does not exist (give the MPI install prefix)])])])
  AS_IF([test "x$with_mpi" != xno], [
    AC_PATH_PROGS([NF_MPICXX], [mpicxx mpic++ mpiCC], [], [$nf_mpi_path])
    AS_IF([test -n "$NF_MPICXX"], [
      AC_MSG_CHECKING([MPI flags from $NF_MPICXX])
      AS_IF([nf_mpi_c=`$NF_MPICXX --showme:compile 2>/dev/null` && nf_mpi_l=`$NF_MPICXX --showme:link 2>/dev/null`],
        [nf_mpi_how="$NF_MPICXX --showme"],
        [AS_IF([nf_mpi_c=`$NF_MPICXX -compile_info 2>/dev/null` && nf_mpi_l=`$NF_MPICXX -link_info 2>/dev/null`],
          [# MPICH prints the whole command: drop the compiler, keep the flags.
           nf_mpi_c=`echo "$nf_mpi_c" | cut -d' ' -f2- | tr ' ' '\n' | grep -E '^-(I|D)' | tr '\n' ' '`
           nf_mpi_l=`echo "$nf_mpi_l" | cut -d' ' -f2- | tr ' ' '\n' | grep -E '^-(L|l|Wl)' | tr '\n' ' '`
           nf_mpi_how="$NF_MPICXX -compile_info"],
          [nf_mpi_c=""; nf_mpi_l=""])])
      AS_IF([test -n "$nf_mpi_how"],
        [AC_MSG_RESULT([$nf_mpi_how])
         MPI_CXXFLAGS="$nf_mpi_c"; MPI_LIBS="$nf_mpi_l"],
        [AC_MSG_RESULT([none (neither --showme nor -compile_info works)])])
    ])
    AS_IF([test -z "$nf_mpi_how" && test -n "$PKG_CONFIG" && test "x$nf_mpi_path" = "x$PATH"], [
      for nf_mpi_pc in ompi-cxx mpi; do
        AS_IF([$PKG_CONFIG --exists $nf_mpi_pc 2>/dev/null], [
          MPI_CXXFLAGS=`$PKG_CONFIG --cflags $nf_mpi_pc`
          MPI_LIBS=`$PKG_CONFIG --libs $nf_mpi_pc`
          nf_mpi_how="pkg-config $nf_mpi_pc"
          break
        ])
      done
    ])
    AS_IF([test -n "$nf_mpi_how"], [
      # The C API only (no deprecated C++ bindings), its headers as system headers: their
      # warnings are not ours (-Werror).
      nf_mpi_c=""
      for nf_f in $MPI_CXXFLAGS; do
        AS_CASE([$nf_f], [-I*], [nf_mpi_c="$nf_mpi_c -isystem `echo $nf_f | sed 's/^-I//'`"],
          [nf_mpi_c="$nf_mpi_c $nf_f"])
      done
      MPI_CXXFLAGS="$nf_mpi_c -DOMPI_SKIP_MPICXX=1 -DMPICH_SKIP_MPICXX=1"
      AC_MSG_CHECKING([whether a program using MPI links ($nf_mpi_how)])
      nf_save_CXXFLAGS="$CXXFLAGS"; nf_save_LIBS="$LIBS"
      CXXFLAGS="$CXXFLAGS $MPI_CXXFLAGS"; LIBS="$MPI_LIBS $LIBS"
      AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
          [[int f = 0; MPI_Initialized(&f); MPI_Request r = MPI_REQUEST_NULL;
            MPI_Test(&r, &f, MPI_STATUS_IGNORE); return f;]])],
        [AC_MSG_RESULT([yes]); nf_mpi_found=yes],
        [AC_MSG_RESULT([no])])
      CXXFLAGS="$nf_save_CXXFLAGS"; LIBS="$nf_save_LIBS"
    ])
    AS_IF([test "x$nf_mpi_found" = xyes], [
      MPI_CXXFLAGS="$MPI_CXXFLAGS -DNF_HAVE_MPI=1"
      nf_mpi_msg="yes ($nf_mpi_how)"
    ], [
      MPI_CXXFLAGS=""; MPI_LIBS=""
      AS_IF([test "x$with_mpi" = xauto || test "x$with_mpi" = x],
        [nf_mpi_msg="no (no mpicxx or MPI pkg-config found; nccl-fabric-perf uses --listen/--peer)"],
        [AC_MSG_ERROR([--with-mpi=$with_mpi: no usable MPI (mpicxx or pkg-config ompi-cxx/mpi). Install Open MPI (Debian: apt-get install libopenmpi-dev openmpi-bin), pass --with-mpi=DIR, or --without-mpi])])
    ])
  ])
  AC_SUBST([MPI_CXXFLAGS])
  AC_SUBST([MPI_LIBS])
  AM_CONDITIONAL([NF_HAVE_MPI], [test "x$nf_mpi_found" = xyes])
])
