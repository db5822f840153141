/*
 * mpi_allreduce_perf.c — the same benchmark as allreduce_perf.c, over
 * MPI_Allreduce, as the bar gocl is measured against.
 *
 * Build (from the repository root):
 *   mpicc -O2 -Wall bench/mpi_allreduce_perf.c -o build/mpi_allreduce_perf
 * Run:
 *   mpirun --allow-run-as-root --oversubscribe -np 4 build/mpi_allreduce_perf -b 8 -e 64M -f 2
 * Options, columns, sizes, warmup, iteration policy and timing come from
 * perf_common.h, shared with allreduce_perf.c so rows compare. -n, if given,
 * must equal -np. half and bfloat16 have no MPI type and are refused.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "perf_common.h"

/* MPI types in perf_types order; MPI_DATATYPE_NULL where MPI has none. */
static MPI_Datatype mpi_type(int type) {
  const MPI_Datatype types[PERF_NTYPES] = {MPI_INT8_T,  MPI_UINT8_T,  MPI_INT32_T,       MPI_UINT32_T, MPI_INT64_T,
                                           MPI_UINT64_T, MPI_DATATYPE_NULL, MPI_FLOAT, MPI_DOUBLE,   MPI_DATATYPE_NULL};
  return types[type];
}

/* send == recv means in place. */
static void allreduce(void* ctx, const void* send, void* recv, size_t count) {
  MPI_Datatype* dtype = ctx;
  MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, *dtype, MPI_SUM, MPI_COMM_WORLD);
}

static double max_over_ranks(void* ctx, double v) {
  (void)ctx;
  double out;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

static long sum_over_ranks(void* ctx, long v) {
  (void)ctx;
  long out;
  MPI_Allreduce(&v, &out, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return out;
}

int main(int argc, char** argv) {
  int rank, nranks;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  perf_opts_t o = perf_parse(argc, argv);
  MPI_Datatype dtype = mpi_type(o.type);
  if ((o.nranks && o.nranks != nranks) || dtype == MPI_DATATYPE_NULL ||
      o.maxbytes / perf_types[o.type].size > INT32_MAX) {
    if (rank == 0) fprintf(stderr, "%s: -n must equal -np, the type must have an MPI equivalent, counts must fit an int\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  perf_lib_t lib = {"MPI", &dtype, rank, nranks, &perf_types[o.type], allreduce, max_over_ranks, sum_over_ranks};
  int failed = perf_run(&lib, &o);
  MPI_Finalize();
  return failed;
}
