// MPI under mpirun (or srun): the launcher starts both ranks and the channel runs over MPI
// instead of a socket. Built only with configure's --with-mpi (NF_HAVE_MPI); without it these say
// so and do nothing.
#pragma once
#include <memory>
#include <string>

#include "perf/channel.h"

namespace nfp {

// Whether this build has MPI.
bool mpi_built();

// The environment variable by which an MPI launcher announced itself (OMPI_COMM_WORLD_SIZE,
// PMI_SIZE, PMIX_RANK, MV2_COMM_WORLD_SIZE), with its value: "PMI_SIZE=2"; "" when none is set.
std::string mpi_launcher();

// MPI_Init_thread (only this thread calls MPI). False with *err when MPI fails to start.
bool mpi_init(int* rank, int* size, std::string* err);
// MPI_Finalize: only when every rank gets there (it waits for the others).
void mpi_finalize();

// A Link to rank `peer` over a duplicate of MPI_COMM_WORLD: nonblocking sends and receives
// polled with MPI_Test, so that every wait is bounded by its timeout as over a socket.
std::unique_ptr<Link> mpi_link(int peer);

}  // namespace nfp
