/*
 * gocl_perf.c — gocl-perf: nccl-tests' benchmark for every gocl collective,
 * over the public C API (gocl.h). `gocl perf` runs it; so does `make perf`.
 *
 * Build (from the repository root, after `make lib`):
 *   gcc -O2 -Wall -I build/include -I cmd/gocl-perf cmd/gocl-perf/gocl_perf.c cmd/gocl-perf/perf_common.c cmd/gocl-perf/launch.c \
 *       -L build -lgocl -lpthread -lm -Wl,-rpath,'$ORIGIN' -o build/gocl-perf
 * Run:
 *   gocl-perf all_reduce -b 8 -e 128M -f 2 -g 2          two ranks, threads of one process
 *   gocl-perf all_gather -b 8 -e 64M -P 4                four processes (started here)
 *   gocl run -n 4 -- gocl perf reduce -r 1 ...           one process per rank (RANK, WORLD_SIZE,
 *                                                        MASTER_ADDR, MASTER_PORT)
 * Options, columns, checks and the JSON: perf_common.h. Rank 0 prints; the
 * exit status is non-zero if any rank failed or any #wrong is non-zero.
 *
 * Ranks are nprocs processes x -g threads: rank = process * g + thread. One
 * process: goclCommInitAll. Several: process 0 makes the unique id (the
 * launcher's for -P, or served over MASTER_ADDR:MASTER_PORT like
 * gocl.Communicator.from_env) and every thread joins with goclCommInitRank.
 * Calls use the NULL stream, so each returns when done.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "gocl.h"
#include "launch.h"
#include "perf_common.h"

typedef struct {
  goclComm_t comm;
  int rank, nranks, nprocs;
  int ok; /* the thread's sweep passed */
  const perf_opts_t* o;
} rank_t;

static void must(const rank_t* r, goclResult_t rc, const char* what) {
  if (rc == goclSuccess) return;
  fprintf(stderr, "%s: rank %d: %s failed: %s: %s\n", perf_prog, r->rank, what, goclGetErrorString(rc),
          goclGetLastError(r->comm));
  exit(1);
}

static void run(void* ctx, const perf_opts_t* o, const void* send, void* recv, size_t count, int in_place) {
  (void)in_place; /* gocl spells in place as NCCL does: by the pointers */
  rank_t* r = ctx;
  goclDataType_t t = (goclDataType_t)o->type; /* perf_types is in goclDataType_t order */
  goclRedOp_t op = (goclRedOp_t)o->op;      /* perf_ops too */
  goclResult_t rc = goclSuccess;
  switch (o->coll) {
    case PC_ALL_REDUCE: rc = goclAllReduce(send, recv, count, t, op, r->comm, NULL); break;
    case PC_ALL_GATHER: rc = goclAllGather(send, recv, count, t, r->comm, NULL); break;
    case PC_BROADCAST: rc = goclBroadcast(send, recv, count, t, o->root, r->comm, NULL); break;
    case PC_REDUCE: rc = goclReduce(send, recv, count, t, op, o->root, r->comm, NULL); break;
    case PC_REDUCE_SCATTER: rc = goclReduceScatter(send, recv, count, t, op, r->comm, NULL); break;
    case PC_ALLTOALL: rc = goclAlltoAll(send, recv, count, t, r->comm, NULL); break;
    case PC_SENDRECV: /* a ring: send to the next rank, receive from the previous one */
      must(r, goclGroupStart(), "goclGroupStart");
      must(r, goclSend(send, count, t, (r->rank + 1) % r->nranks, r->comm, NULL), "goclSend");
      must(r, goclRecv(recv, count, t, (r->rank + r->nranks - 1) % r->nranks, r->comm, NULL), "goclRecv");
      rc = goclGroupEnd();
      break;
  }
  must(r, rc, perf_colls[o->coll].name);
}

static double reduce(void* ctx, double v, int op) {
  rank_t* r = ctx;
  double out;
  must(r, goclAllReduce(&v, &out, 1, goclFloat64, (goclRedOp_t)op, r->comm, NULL), "allreduce of the results");
  return out;
}

static void* rank_main(void* arg) {
  rank_t* r = arg;
  perf_lib_t lib = {"gocl", r, r->rank, r->nranks, run, reduce};
  r->ok = perf_run(&lib, r->o, r->nprocs) == 0;
  return NULL;
}

typedef struct {
  rank_t* ranks;
  int thread;
  goclUniqueId id;
} join_t;

static void* join_main(void* arg) {
  join_t* j = arg;
  rank_t* r = &j->ranks[j->thread];
  must(r, goclCommInitRank(&r->comm, r->nranks, j->id, r->rank), "goclCommInitRank");
  return rank_main(r);
}

/* Runs this process's ranks (proc of nprocs; id unused when nprocs == 1). */
static int run_process(const perf_opts_t* o, int proc, int nprocs, const goclUniqueId* id) {
  int g = o->nthreads, n = nprocs * g;
  rank_t* ranks = calloc((size_t)g, sizeof *ranks);
  join_t* joins = calloc((size_t)g, sizeof *joins);
  pthread_t* threads = calloc((size_t)g, sizeof *threads);
  goclComm_t* comms = calloc((size_t)g, sizeof *comms);
  if (ranks == NULL || joins == NULL || threads == NULL || comms == NULL) {
    fprintf(stderr, "%s: out of memory\n", perf_prog);
    return 1;
  }
  if (perf_colls[o->coll].rooted && o->root >= n) {
    if (proc == 0)
      fprintf(stderr, "%s: -r (root) %d: there are only %d ranks: give a root from 0 to %d\n", perf_prog, o->root, n,
              n - 1);
    return 2;
  }
  if (nprocs == 1) {
    rank_t probe = {NULL, 0, n, 1, 0, o};
    must(&probe, goclCommInitAll(comms, g, NULL), "goclCommInitAll");
  }
  for (int t = 0; t < g; t++) {
    ranks[t] = (rank_t){comms[t], proc * g + t, n, nprocs, 0, o};
    joins[t] = (join_t){ranks, t, {{0}}};
    if (id != NULL) joins[t].id = *id;
  }
  void* (*body)(void*) = nprocs == 1 ? rank_main : join_main;
  for (int t = 1; t < g; t++) {
    void* arg = nprocs == 1 ? (void*)&ranks[t] : (void*)&joins[t];
    if (pthread_create(&threads[t], NULL, body, arg) != 0) {
      fprintf(stderr, "%s: cannot start the thread of rank %d\n", perf_prog, ranks[t].rank);
      exit(1);
    }
  }
  body(nprocs == 1 ? (void*)&ranks[0] : (void*)&joins[0]);
  int failed = !ranks[0].ok;
  for (int t = 1; t < g; t++) {
    pthread_join(threads[t], NULL);
    failed |= !ranks[t].ok;
  }
  for (int t = 0; t < g; t++) must(&ranks[t], goclCommDestroy(ranks[t].comm), "goclCommDestroy");
  free(ranks);
  free(joins);
  free(threads);
  free(comms);
  return failed;
}

int main(int argc, char** argv) {
  const char* prog = getenv("GOCL_PERF_PROG"); /* `gocl perf` names itself so */
  perf_prog = prog != NULL && *prog != '\0' ? prog : "gocl-perf";
  char** args = calloc((size_t)argc + 1, sizeof *args);
  if (args == NULL) return 1;
  memcpy(args, argv, (size_t)argc * sizeof *argv); /* getopt permutes argv; -P passes it on unchanged */
  perf_opts_t o = perf_parse(argc, argv);

  launch_child_t lc;
  if (launch_child(&lc)) return run_process(&o, lc.rank, lc.nranks, &lc.id);
  if (o.nprocs > 0) {
    int failed = launch_run(o.nprocs, args, NULL, o.timeout_s, NULL);
    return failed != 0;
  }
  switch (launch_from_env(&lc, o.timeout_s)) {
    case 1: return run_process(&o, lc.rank, lc.nranks, lc.nranks > 1 ? &lc.id : NULL);
    case 0: return run_process(&o, 0, 1, NULL);
    default: return 1;
  }
}
