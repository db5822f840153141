/*
 * allreduce_perf.c — nccl-tests style allreduce benchmark over gocl's C API.
 *
 * Build (from the repository root, after `make lib`):
 *   gcc -O2 -Wall -I build/include -I tests/c bench/allreduce_perf.c tests/c/launch.c \
 *       -L build -lgocl -Wl,-rpath,'$ORIGIN' -o build/allreduce_perf
 * Run:
 *   build/allreduce_perf -n 4 -b 8 -e 64M -f 2 [-w 5] [-i 20] [-d float] [-c 1]
 * Options, columns and the iteration policy: perf_common.h. Rank 0 prints;
 * the exit status is non-zero if any rank failed or any #wrong is non-zero.
 *
 * The ranks are processes started by launch.h. Calls use the NULL stream, so
 * each returns when done: gocl's latency path, with no hand-off to a stream
 * worker.
 */
#include <stdio.h>
#include <stdlib.h>

#include "gocl.h"
#include "launch.h"
#include "perf_common.h"

typedef struct {
  goclComm_t comm;
  int rank;
  goclDataType_t dtype;
} bench_t;

static void must(const bench_t* b, goclResult_t rc, const char* what) {
  if (rc == goclSuccess) return;
  fprintf(stderr, "rank %d: %s failed: %s: %s\n", b->rank, what, goclGetErrorString(rc), goclGetLastError(b->comm));
  exit(1);
}

static void allreduce(void* ctx, const void* send, void* recv, size_t count) {
  bench_t* b = ctx;
  must(b, goclAllReduce(send, recv, count, b->dtype, goclSum, b->comm, NULL), "allreduce");
}

static double max_over_ranks(void* ctx, double v) {
  bench_t* b = ctx;
  double out;
  must(b, goclAllReduce(&v, &out, 1, goclFloat64, goclMax, b->comm, NULL), "allreduce of the times");
  return out;
}

static long sum_over_ranks(void* ctx, long v) {
  bench_t* b = ctx;
  int64_t in = v, out;
  must(b, goclAllReduce(&in, &out, 1, goclInt64, goclSum, b->comm, NULL), "allreduce of #wrong");
  return (long)out;
}

static int rank_main(const launch_child_t* lc, const perf_opts_t* o) {
  /* perf_types is in goclDataType_t order. */
  bench_t b = {NULL, lc->rank, (goclDataType_t)o->type};
  perf_lib_t lib = {"gocl", &b, lc->rank, lc->nranks, &perf_types[o->type], allreduce, max_over_ranks,
                    sum_over_ranks};
  must(&b, goclCommInitRank(&b.comm, lc->nranks, lc->id, lc->rank), "goclCommInitRank");
  int failed = perf_run(&lib, o);
  must(&b, goclCommDestroy(b.comm), "goclCommDestroy");
  return failed;
}

int main(int argc, char** argv) {
  perf_opts_t o = perf_parse(argc, argv);
  launch_child_t lc;
  if (launch_child(&lc)) return rank_main(&lc, &o);
  return launch_run(o.nranks ? o.nranks : 2, argv, NULL, o.timeout_s, NULL) != 0;
}
