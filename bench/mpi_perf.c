/*
 * mpi_perf.c — the same benchmark as gocl_perf.c, over MPI, as the bar gocl
 * is measured against (bench/compare.py runs both, alternated).
 *
 * Build (from the repository root):
 *   mpicc -O2 -Wall -I cmd/gocl-perf bench/mpi_perf.c cmd/gocl-perf/perf_common.c -lm -o build/mpi-perf
 * Run:
 *   mpirun --allow-run-as-root --oversubscribe -np 4 build/mpi-perf all_reduce -b 8 -e 64M -f 2
 * Options, columns, sizes, warmup, iteration policy, checks, timing and the
 * JSON come from perf_common.c (.h), shared with gocl_perf.c so rows compare.
 * Ranks are MPI's (-g and -P are refused); half and bfloat16 have no MPI
 * type, and MPI has no avg: both are refused. sendrecv is MPI_Sendrecv
 * around the same ring.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "perf_common.h"

typedef struct {
  MPI_Datatype dtype;
  MPI_Op op;
  int rank, nranks;
} mpi_t;

/* MPI types in perf_types order; MPI_DATATYPE_NULL where MPI has none. */
static MPI_Datatype mpi_type(int type) {
  const MPI_Datatype types[PERF_NTYPES] = {MPI_INT8_T,   MPI_UINT8_T,       MPI_INT32_T, MPI_UINT32_T, MPI_INT64_T,
                                           MPI_UINT64_T, MPI_DATATYPE_NULL, MPI_FLOAT,   MPI_DOUBLE,   MPI_DATATYPE_NULL};
  return types[type];
}

/* MPI ops in perf_ops order; avg has none. */
static MPI_Op mpi_op(int op) {
  const MPI_Op ops[PERF_NOPS] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_OP_NULL};
  return ops[op];
}

/* In place, MPI takes MPI_IN_PLACE and the whole buffer. Its in-place
 * reduce-scatter leaves the block at the buffer's start: it is moved to
 * NCCL's place (rank * count), a copy of one block, inside the timing. */
static void run(void* ctx, const perf_opts_t* o, const void* send, void* recv, size_t count, int in_place) {
  mpi_t* m = ctx;
  int c = (int)count, n = m->nranks, me = m->rank;
  size_t block = count * perf_types[o->type].size;
  const void* in = in_place ? MPI_IN_PLACE : send;
  switch (o->coll) {
    case PC_ALL_REDUCE: MPI_Allreduce(in, recv, c, m->dtype, m->op, MPI_COMM_WORLD); break;
    case PC_REDUCE:
      MPI_Reduce(in_place && me == o->root ? MPI_IN_PLACE : send, recv, c, m->dtype, m->op, o->root,
                 MPI_COMM_WORLD);
      break;
    case PC_BROADCAST:
      if (me == o->root && !in_place) memcpy(recv, send, block);
      MPI_Bcast(recv, c, m->dtype, o->root, MPI_COMM_WORLD);
      break;
    case PC_ALL_GATHER:
      MPI_Allgather(in, c, m->dtype, recv, c, m->dtype, MPI_COMM_WORLD);
      break;
    case PC_REDUCE_SCATTER:
      if (!in_place) {
        MPI_Reduce_scatter_block(send, recv, c, m->dtype, m->op, MPI_COMM_WORLD);
        break;
      }
      MPI_Reduce_scatter_block(MPI_IN_PLACE, (void*)send, c, m->dtype, m->op, MPI_COMM_WORLD);
      memmove(recv, send, block);
      break;
    case PC_ALLTOALL: MPI_Alltoall(send, c, m->dtype, recv, c, m->dtype, MPI_COMM_WORLD); break;
    case PC_SENDRECV:
      MPI_Sendrecv(send, c, m->dtype, (me + 1) % n, 0, recv, c, m->dtype, (me + n - 1) % n, 0, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
      break;
  }
}

static double reduce(void* ctx, double v, int op) {
  (void)ctx;
  double out;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, mpi_op(op), MPI_COMM_WORLD);
  return out;
}

int main(int argc, char** argv) {
  mpi_t m;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &m.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &m.nranks);
  perf_prog = "mpi-perf";
  perf_opts_t o = perf_parse(argc, argv);
  m.dtype = mpi_type(o.type);
  m.op = mpi_op(o.op);
  const char* why = NULL;
  if (o.nthreads != 1 || o.nprocs != 0) why = "-g and -P are gocl-perf's: start the ranks with mpirun -np";
  else if (m.dtype == MPI_DATATYPE_NULL) why = "MPI has no half or bfloat16 type";
  else if (perf_colls[o.coll].reduces && m.op == MPI_OP_NULL) why = "MPI has no avg";
  else if (perf_colls[o.coll].rooted && o.root >= m.nranks) why = "-r must name a rank";
  else if (o.maxbytes / perf_types[o.type].size > INT32_MAX) why = "MPI counts must fit an int: lower -e";
  if (why != NULL) {
    if (m.rank == 0) fprintf(stderr, "%s: %s\n", perf_prog, why);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  perf_lib_t lib = {"MPI", &m, m.rank, m.nranks, run, reduce};
  int failed = perf_run(&lib, &o, m.nranks);
  MPI_Finalize();
  return failed;
}
