/*
 * perf_common.h — what gocl_perf.c (gocl-perf) and mpi_perf.c (mpi-perf)
 * share, so that their rows compare: options, collectives, size steps, the
 * iteration policy, input data and checks, timing, the nccl-tests table and
 * the JSON. Each program only supplies its calls (perf_lib_t); the code is in
 * perf_common.c, compiled into both.
 *
 * Usage: PROG COLLECTIVE [options], COLLECTIVE one of all_reduce, all_gather,
 * broadcast, reduce, reduce_scatter, alltoall, sendrecv. Options are
 * nccl-tests' (same letters and long names):
 *   -b minbytes (8)  -e maxbytes (128M)  -f step factor (2)  -i step bytes
 *   (used when -f is 1)  -n iters (20)  -w warmup iters (5)  -c check 0/1 (1)
 *   -o sum|prod|max|min|avg (sum)  -d float|half|bfloat16|double|int8|uint8|
 *   int32|uint32|int64|uint64 (float)  -r root (0)  -a 0|1|2|3: the time
 *   reported is rank 0's, the mean, the min or the max over ranks (1)
 *   -g ranks as threads of each process (1)  -T timeout in seconds (600)
 * and gocl's own: -P N start N processes of this program (gocl-perf only),
 * --json print JSON instead of the table, --json=FILE write it to FILE too.
 * Sizes take K, M, G suffixes (powers of 1024).
 *
 * Columns (nccl-tests'): size (B), count, type, redop, root, then for
 * out-of-place and for in-place: time (us), algbw, busbw (GB/s, GB = 1e9 B),
 * #wrong. size and count follow nccl-tests: size is the larger of the send
 * and receive buffers, count the count argument of the call (per rank for
 * all_gather, reduce_scatter and alltoall). algbw = size / time; busbw =
 * algbw * nccl-tests' factor (perf_colls). Sizes whose count is 0 are
 * skipped. The time is the mean over a loop of back-to-back calls; #wrong
 * sums the wrong elements over the ranks (N/A: not checked, or a phase the
 * collective does not have: alltoall has none, and sendrecv's would
 * send and receive one buffer in one group, a race). The footer
 * counts the phases with wrong elements and averages busbw over all phases.
 */
#ifndef GOCL_PERF_COMMON_H_
#define GOCL_PERF_COMMON_H_

#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --------------------------------------------------------- collectives */

typedef enum { PC_ALL_REDUCE, PC_ALL_GATHER, PC_BROADCAST, PC_REDUCE, PC_REDUCE_SCATTER, PC_ALLTOALL, PC_SENDRECV } perf_coll_t;

typedef struct {
  const char* name;
  int reduces;   /* takes -o */
  int rooted;    /* takes -r */
  int in_place;  /* has an in-place form */
  int bus_twice; /* busbw factor 2(n-1)/n (all_reduce) */
  int bus_nm1;   /* busbw factor (n-1)/n; neither: 1 */
} perf_coll_info_t;

#define PERF_NCOLLS (PC_SENDRECV + 1)
extern const perf_coll_info_t perf_colls[PERF_NCOLLS];

/* nccl-tests' bus bandwidth factor of collective c over n ranks. */
double perf_bus_factor(perf_coll_t c, int n);

/* Element counts of one call for a sweep step of `count` elements (nccl-tests'
 * rules): send and recv buffer lengths, the count argument, and where the
 * in-place send and recv start (these offsets times the rank). */
typedef struct {
  size_t send, recv, param, send_ip, recv_ip;
} perf_counts_t;

perf_counts_t perf_counts(perf_coll_t c, size_t count, int n);

/* ------------------------------------------------------------- options */

typedef struct {
  perf_coll_t coll;
  size_t minbytes, maxbytes, stepbytes;
  int factor;
  int iters, warmup, check;
  int type, op, root, average;
  int nthreads, nprocs; /* -g, -P (0: not given) */
  double timeout_s;
  int json;              /* JSON instead of the table on stdout */
  const char* json_file; /* NULL, or where the JSON goes too */
} perf_opts_t;

/* In goclDataType_t order, names as nccl-tests prints them. */
typedef enum { PK_SIGNED, PK_UNSIGNED, PK_HALF, PK_FLOAT, PK_DOUBLE, PK_BF16 } perf_kind_t;
typedef struct {
  const char* name;
  size_t size;
  perf_kind_t kind;
  int mantissa; /* bits, floating types */
} perf_type_t;

#define PERF_NTYPES 10
extern const perf_type_t perf_types[PERF_NTYPES];

/* In goclRedOp_t (and ncclRedOp_t) order. */
enum { PO_SUM, PO_PROD, PO_MAX, PO_MIN, PO_AVG };
#define PERF_NOPS 5
extern const char* const perf_ops[PERF_NOPS];

/* The program's name in messages ("perf" until the program sets it). */
extern const char* perf_prog;

/* The options of argv; bad ones print the usage and exit 2. */
perf_opts_t perf_parse(int argc, char** argv);

/* ------------------------------------------------------ iteration policy */

/* Each timed loop moves at most PERF_LOOP_BYTES per rank, so a sweep to
 * 128 MiB on ranks sharing few cores takes seconds, not minutes: up to
 * 12.8 MiB every size runs the -n iterations, 64 MiB runs 4. Never fewer
 * than 2 iterations; warmup gets a quarter of that budget, at least 1. */
#define PERF_LOOP_BYTES ((size_t)256 << 20)

/* ---------------------------------------------------------------- sweep */

/* What a library under test provides. run makes one call of o->coll with
 * count = the count argument (perf_counts_t.param); in_place: send and recv
 * point into one buffer at NCCL's in-place offsets. reduce combines one
 * double per rank: op PO_SUM, PO_MAX or PO_MIN. On failure each reports and
 * exits. */
typedef struct {
  const char* name;
  void* ctx;
  int rank, nranks;
  void (*run)(void* ctx, const perf_opts_t* o, const void* send, void* recv, size_t count, int in_place);
  double (*reduce)(void* ctx, double v, int op);
} perf_lib_t;

typedef struct {
  double us, algbw, busbw;
  long wrong; /* -1: not checked */
  int ran;
} perf_phase_t;

typedef struct {
  size_t bytes, count;
  perf_phase_t phase[2]; /* out of place, in place */
} perf_row_t;

typedef struct {
  perf_row_t* rows;
  int nrows, cap;
  double sum_busbw;
  int nbw, nfailed;
} perf_results_t;

/* The whole sweep on one rank; rank 0 prints (nprocs: for the header).
 * Returns 0 if every value was right. */
int perf_run(const perf_lib_t* l, const perf_opts_t* o, int nprocs);

#endif /* GOCL_PERF_COMMON_H_ */
