/*
 * perf_common.h — what allreduce_perf.c (gocl) and mpi_allreduce_perf.c
 * share, so that their rows compare: options, size steps, the iteration
 * policy, input data, timing and the nccl-tests columns; each program only
 * supplies its allreduce (perf_lib_t). Header only: each program includes it
 * once, so both build from a single .c file.
 *
 * Options (nccl-tests letters, except -n ranks and -i iterations, which
 * nccl-tests spells -n iters and -i stepbytes):
 *   -n ranks (gocl; MPI takes mpirun -np)  -b minbytes (8)  -e maxbytes (64M)
 *   -f step factor (2)  -w warmup iters (5)  -i iters (20)  -d type (float)
 *   -c check 0/1 (1)  -T wall-clock limit in seconds (gocl, 600)
 * Sizes take K, M, G suffixes (powers of 1024).
 *
 * Columns: size (B), count, type, redop, root, then for out-of-place and for
 * in-place: time (us), algbw, busbw (GB/s, GB = 1e9 B), #wrong. time is the
 * mean over a loop of back-to-back calls, the slowest rank's;
 * busbw = algbw * 2(n-1)/n; #wrong sums the wrong elements over the ranks.
 */
#ifndef GOCL_PERF_COMMON_H_
#define GOCL_PERF_COMMON_H_

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------- options */

typedef struct {
  int nranks; /* 0 when -n was not given */
  size_t minbytes, maxbytes;
  int factor;
  int warmup, iters;
  int type; /* index in perf_types */
  int check;
  double timeout_s;
} perf_opts_t;

/* In goclDataType_t order, names as nccl-tests prints them. */
typedef enum { PK_SIGNED, PK_UNSIGNED, PK_HALF, PK_FLOAT, PK_DOUBLE, PK_BF16 } perf_kind_t;
typedef struct {
  const char* name;
  size_t size;
  perf_kind_t kind;
} perf_type_t;

static const perf_type_t perf_types[] = {
    {"int8", 1, PK_SIGNED},   {"uint8", 1, PK_UNSIGNED}, {"int32", 4, PK_SIGNED}, {"uint32", 4, PK_UNSIGNED},
    {"int64", 8, PK_SIGNED},  {"uint64", 8, PK_UNSIGNED}, {"half", 2, PK_HALF},   {"float", 4, PK_FLOAT},
    {"double", 8, PK_DOUBLE}, {"bfloat16", 2, PK_BF16},
};
#define PERF_NTYPES (int)(sizeof perf_types / sizeof perf_types[0])

static void perf_usage(const char* argv0) {
  fprintf(stderr,
          "usage: %s [-n ranks] [-b minbytes] [-e maxbytes] [-f factor] [-w warmup] [-i iters]\n"
          "          [-d int8|uint8|int32|uint32|int64|uint64|half|float|double|bfloat16] [-c 0|1] [-T seconds]\n",
          argv0);
  exit(2);
}

static size_t perf_parse_size(const char* s, const char* argv0) {
  char* end;
  unsigned long long v = strtoull(s, &end, 10);
  switch (*end) {
    case 'G': case 'g': v <<= 10; /* fall through */
    case 'M': case 'm': v <<= 10; /* fall through */
    case 'K': case 'k': v <<= 10; end++; break;
    default: break;
  }
  if (end == s || *end != '\0') perf_usage(argv0);
  return (size_t)v;
}

static int perf_parse_type(const char* s, const char* argv0) {
  for (int i = 0; i < PERF_NTYPES; i++)
    if (strcmp(perf_types[i].name, s) == 0) return i;
  perf_usage(argv0);
  return -1;
}

static perf_opts_t perf_parse(int argc, char** argv) {
  perf_opts_t o = {0, 8, (size_t)64 << 20, 2, 5, 20, perf_parse_type("float", argv[0]), 1, 600};
  int ch;
  while ((ch = getopt(argc, argv, "n:b:e:f:w:i:d:c:T:")) != -1) {
    switch (ch) {
      case 'n': o.nranks = atoi(optarg); break;
      case 'b': o.minbytes = perf_parse_size(optarg, argv[0]); break;
      case 'e': o.maxbytes = perf_parse_size(optarg, argv[0]); break;
      case 'f': o.factor = atoi(optarg); break;
      case 'w': o.warmup = atoi(optarg); break;
      case 'i': o.iters = atoi(optarg); break;
      case 'd': o.type = perf_parse_type(optarg, argv[0]); break;
      case 'c': o.check = atoi(optarg); break;
      case 'T': o.timeout_s = atof(optarg); break;
      default: perf_usage(argv[0]);
    }
  }
  if (optind != argc || o.nranks < 0 || o.minbytes < 1 || o.maxbytes < o.minbytes || o.factor < 2 ||
      o.warmup < 0 || o.iters < 1 || o.timeout_s <= 0)
    perf_usage(argv[0]);
  return o;
}

/* ------------------------------------------------------ iteration policy */

/* Each timed loop moves at most PERF_LOOP_BYTES per rank, so a sweep to
 * 64 MiB on 4 ranks sharing 2 cores takes seconds, not minutes: up to
 * 12.8 MiB every size runs the -i iterations, 64 MiB runs 4. Never fewer
 * than 2 iterations; warmup gets a quarter of that budget, at least 1. */
#define PERF_LOOP_BYTES ((size_t)256 << 20)

static int perf_iters(const perf_opts_t* o, size_t bytes) {
  size_t cap = PERF_LOOP_BYTES / bytes;
  if (cap < 2) cap = 2;
  return (size_t)o->iters < cap ? o->iters : (int)cap;
}

static int perf_warmup(const perf_opts_t* o, size_t bytes) {
  size_t cap = PERF_LOOP_BYTES / 4 / bytes;
  if (cap < 1) cap = 1;
  return (size_t)o->warmup < cap ? o->warmup : (int)cap;
}

static double perf_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

/* ---------------------------------------------------------------- data */

/* Small non-negative integers, exact in every type. */
static unsigned perf_value(int rank, size_t i) { return (unsigned)((rank + i) % 4); }

static uint16_t perf_half_of(unsigned v) {
  if (v == 0) return 0;
  int e = 0;
  while ((v >> (e + 1)) != 0) e++;
  return (uint16_t)((e + 15) << 10 | ((v << (10 - e)) & 0x3ff));
}

/* Writes the small integer v as element i of a buffer of type t. */
static void perf_store(const perf_type_t* t, void* buf, size_t i, unsigned v) {
  char* p = (char*)buf + i * t->size;
  uint64_t u = v;
  float f = (float)v;
  double d = v;
  uint32_t fbits;
  uint16_t h;
  switch (t->kind) {
    case PK_SIGNED:
    case PK_UNSIGNED: memcpy(p, &u, t->size); break; /* little endian */
    case PK_FLOAT: memcpy(p, &f, 4); break;
    case PK_DOUBLE: memcpy(p, &d, 8); break;
    case PK_HALF: h = perf_half_of(v); memcpy(p, &h, 2); break;
    case PK_BF16: memcpy(&fbits, &f, 4); h = (uint16_t)(fbits >> 16); memcpy(p, &h, 2); break;
  }
}

static void perf_fill_input(const perf_type_t* t, void* buf, size_t count, int rank) {
  for (size_t i = 0; i < count; i++) perf_store(t, buf, i, perf_value(rank, i));
}

/* The sum over nranks ranks of their inputs. */
static void perf_fill_expected(const perf_type_t* t, void* buf, size_t count, int nranks) {
  for (size_t i = 0; i < count; i++) {
    unsigned sum = 0;
    for (int r = 0; r < nranks; r++) sum += perf_value(r, i);
    perf_store(t, buf, i, sum);
  }
}

static long perf_count_wrong(const perf_type_t* t, const void* got, const void* exp, size_t count) {
  long wrong = 0;
  for (size_t i = 0; i < count; i++)
    wrong += memcmp((const char*)got + i * t->size, (const char*)exp + i * t->size, t->size) != 0;
  return wrong;
}

/* --------------------------------------------------------------- output */

static void perf_print_header(const char* lib, const perf_opts_t* o, int nranks) {
  printf("# %s allreduce_perf: nranks %d minBytes %zu maxBytes %zu step: %d(factor) warmup iters: %d iters: %d "
         "validation: %d\n",
         lib, nranks, o->minbytes, o->maxbytes, o->factor, o->warmup, o->iters, o->check);
  printf("# above %.1f MiB fewer iterations: at most %zu MiB per timed loop, at least 2\n#\n",
         (double)PERF_LOOP_BYTES / o->iters / (1 << 20), PERF_LOOP_BYTES >> 20);
  printf("#%61s%-34s%s\n", "", "out-of-place", "in-place"); /* centred over their columns */
  printf("# %10s %13s %9s %7s %7s %8s %7s %7s %6s %8s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
         "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  printf("# %10s %13s %9s %7s %7s %8s %7s %7s %6s %8s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
         "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

typedef struct {
  double sum_busbw;
  int nbw;
  long wrong;
} perf_totals_t;

/* One half of a row: time, algbw, busbw, #wrong (wrong < 0: not checked). */
static void perf_print_phase(perf_totals_t* tot, size_t bytes, int nranks, double us, long wrong) {
  double algbw = bytes / us / 1e3; /* B/us = 1e6 B/s; GB = 1e9 B */
  double busbw = algbw * 2.0 * (nranks - 1) / nranks;
  char wrong_s[24] = "N/A";
  if (wrong >= 0) snprintf(wrong_s, sizeof wrong_s, "%ld", wrong);
  printf(us >= 10000 ? " %8.0f" : us >= 100 ? " %8.1f" : " %8.2f", us);
  printf(" %7.2f %7.2f %6s", algbw, busbw, wrong_s);
  tot->sum_busbw += busbw;
  tot->nbw++;
  if (wrong > 0) tot->wrong += wrong;
}

static void perf_print_row(perf_totals_t* tot, size_t bytes, size_t count, const char* type, int nranks,
                           double oop_us, long oop_wrong, double ip_us, long ip_wrong) {
  printf("  %10zu %13zu %9s %7s %7d", bytes, count, type, "sum", -1);
  perf_print_phase(tot, bytes, nranks, oop_us, oop_wrong);
  perf_print_phase(tot, bytes, nranks, ip_us, ip_wrong);
  printf("\n");
  fflush(stdout);
}

static void perf_print_footer(const perf_totals_t* tot, int checked) {
  if (checked) printf("# Wrong values         : %ld %s\n", tot->wrong, tot->wrong ? "FAILED" : "OK");
  else printf("# Wrong values         : not checked (-c 0)\n");
  printf("# Avg bus bandwidth    : %g\n#\n", tot->nbw ? tot->sum_busbw / tot->nbw : 0.0);
}

/* ---------------------------------------------------------------- sweep */

/* What a library under test provides. allreduce is a float/int sum of count
 * elements of the chosen type, in place when send == recv; on failure it
 * reports and exits. */
typedef struct {
  const char* name;
  void* ctx;
  int rank, nranks;
  const perf_type_t* type;
  void (*allreduce)(void* ctx, const void* send, void* recv, size_t count);
  double (*max_over_ranks)(void* ctx, double v);
  long (*sum_over_ranks)(void* ctx, long v);
} perf_lib_t;

static void perf_loop(const perf_lib_t* l, const void* send, void* recv, size_t count, int iters) {
  for (int i = 0; i < iters; i++) l->allreduce(l->ctx, send, recv, count);
}

/* Mean time of one call in us, the slowest rank's. A tiny allreduce lines
 * the ranks up; inside the loop nothing separates the calls. */
static double perf_time(const perf_lib_t* l, const void* send, void* recv, size_t count, int warmup, int iters) {
  perf_loop(l, send, recv, count, warmup);
  l->max_over_ranks(l->ctx, 0);
  double t0 = perf_now_us();
  perf_loop(l, send, recv, count, iters);
  return l->max_over_ranks(l->ctx, (perf_now_us() - t0) / iters);
}

/* One more call on fresh inputs; the wrong elements over all ranks. */
static long perf_check(const perf_lib_t* l, void* send, void* recv, const void* expected, size_t count) {
  perf_fill_input(l->type, send, count, l->rank);
  perf_loop(l, send, recv, count, 1);
  return l->sum_over_ranks(l->ctx, perf_count_wrong(l->type, recv, expected, count));
}

/* One row: out of place, then in place. Returns the wrong elements. */
static long perf_size(const perf_lib_t* l, const perf_opts_t* o, perf_totals_t* tot, size_t bytes, void* send,
                      void* recv, void* expected) {
  size_t count = bytes / l->type->size;
  int iters = perf_iters(o, bytes), warmup = perf_warmup(o, bytes);
  long oop_wrong = -1, ip_wrong = -1;

  perf_fill_input(l->type, send, count, l->rank);
  double oop_us = perf_time(l, send, recv, count, warmup, iters);
  if (o->check) {
    perf_fill_expected(l->type, expected, count, l->nranks);
    oop_wrong = perf_check(l, send, recv, expected, count);
  }
  perf_fill_input(l->type, recv, count, l->rank);
  double ip_us = perf_time(l, recv, recv, count, warmup, iters);
  if (o->check) ip_wrong = perf_check(l, recv, recv, expected, count);

  if (l->rank == 0) perf_print_row(tot, bytes, count, l->type->name, l->nranks, oop_us, oop_wrong, ip_us, ip_wrong);
  return (oop_wrong > 0 ? oop_wrong : 0) + (ip_wrong > 0 ? ip_wrong : 0);
}

/* The whole sweep; rank 0 prints. Returns 0 if every value was right. */
static int perf_run(const perf_lib_t* l, const perf_opts_t* o) {
  perf_totals_t tot = {0, 0, 0};
  long wrong = 0;
  void* send = malloc(o->maxbytes);
  void* recv = malloc(o->maxbytes);
  void* expected = malloc(o->maxbytes);
  if (send == NULL || recv == NULL || expected == NULL) {
    fprintf(stderr, "rank %d: cannot allocate 3 x %zu bytes\n", l->rank, o->maxbytes);
    exit(1);
  }
  if (l->rank == 0) perf_print_header(l->name, o, l->nranks);
  for (size_t bytes = o->minbytes; bytes <= o->maxbytes; bytes *= (size_t)o->factor) {
    size_t aligned = bytes / l->type->size * l->type->size;
    if (aligned > 0) wrong += perf_size(l, o, &tot, aligned, send, recv, expected);
  }
  if (l->rank == 0) perf_print_footer(&tot, o->check);
  free(send);
  free(recv);
  free(expected);
  return wrong > 0;
}

#endif /* GOCL_PERF_COMMON_H_ */
