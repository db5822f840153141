/*
 * perf_common.c — what gocl_perf.c (gocl-perf) and mpi_perf.c (mpi-perf)
 * share, so that their rows compare; perf_common.h declares it and documents
 * the options and columns. Each program is built from its own .c file and
 * this one.
 */
#include "perf_common.h"

/* --------------------------------------------------------- collectives */

const perf_coll_info_t perf_colls[PERF_NCOLLS] = {
    [PC_ALL_REDUCE] = {"all_reduce", 1, 0, 1, 1, 0},     [PC_ALL_GATHER] = {"all_gather", 0, 0, 1, 0, 1},
    [PC_BROADCAST] = {"broadcast", 0, 1, 1, 0, 0},       [PC_REDUCE] = {"reduce", 1, 1, 1, 0, 0},
    [PC_REDUCE_SCATTER] = {"reduce_scatter", 1, 0, 1, 0, 1}, [PC_ALLTOALL] = {"alltoall", 0, 0, 0, 0, 1},
    [PC_SENDRECV] = {"sendrecv", 0, 0, 0, 0, 0},
};

double perf_bus_factor(perf_coll_t c, int n) {
  if (perf_colls[c].bus_twice) return 2.0 * (n - 1) / n;
  if (perf_colls[c].bus_nm1) return (double)(n - 1) / n;
  return 1.0;
}

perf_counts_t perf_counts(perf_coll_t c, size_t count, int n) {
  size_t per = count / (size_t)n;
  switch (c) {
    case PC_ALL_GATHER: return (perf_counts_t){per, per * n, per, per, 0};
    case PC_REDUCE_SCATTER: return (perf_counts_t){per * n, per, per, 0, per};
    case PC_ALLTOALL: return (perf_counts_t){per * n, per * n, per, 0, 0};
    default: return (perf_counts_t){count, count, count, 0, 0};
  }
}

/* ------------------------------------------------------------- options */

const perf_type_t perf_types[PERF_NTYPES] = {
    {"int8", 1, PK_SIGNED, 0},   {"uint8", 1, PK_UNSIGNED, 0}, {"int32", 4, PK_SIGNED, 0},
    {"uint32", 4, PK_UNSIGNED, 0}, {"int64", 8, PK_SIGNED, 0},  {"uint64", 8, PK_UNSIGNED, 0},
    {"half", 2, PK_HALF, 10},    {"float", 4, PK_FLOAT, 23},   {"double", 8, PK_DOUBLE, 52},
    {"bfloat16", 2, PK_BF16, 7},
};

const char* const perf_ops[PERF_NOPS] = {"sum", "prod", "max", "min", "avg"};

const char* perf_prog = "perf";

static void perf_usage(FILE* f) {
  fprintf(f,
          "usage: %s all_reduce|all_gather|broadcast|reduce|reduce_scatter|alltoall|sendrecv\n"
          "         [-b minbytes] [-e maxbytes] [-f stepfactor] [-i stepbytes] [-n iters] [-w warmup]\n"
          "         [-c 0|1] [-o sum|prod|max|min|avg] [-r root] [-a 0|1|2|3]\n"
          "         [-d float|half|bfloat16|double|int8|uint8|int32|uint32|int64|uint64]\n"
          "         [-g ranks-per-process] [-P processes] [-T seconds] [--json[=FILE]]\n"
          "Sizes take K, M, G suffixes. Ranks: -g N threads of this process, -P N processes, or one\n"
          "process per rank started by `gocl run -n N` or torchrun (RANK, WORLD_SIZE, MASTER_ADDR,\n"
          "MASTER_PORT).\n",
          perf_prog);
}

static void perf_bad(const char* what, const char* value, const char* fix) {
  fprintf(stderr, "%s: %s %s: %s\n", perf_prog, what, value, fix);
  perf_usage(stderr);
  exit(2);
}

static size_t perf_parse_size(const char* s, const char* flag) {
  char* end;
  unsigned long long v = strtoull(s, &end, 10);
  switch (*end) {
    case 'G': case 'g': v <<= 10; /* fall through */
    case 'M': case 'm': v <<= 10; /* fall through */
    case 'K': case 'k': v <<= 10; end++; break;
    default: break;
  }
  if (end == s || *end != '\0' || s[0] == '-') perf_bad(flag, s, "give a byte count such as 8, 64K, 128M or 1G");
  return (size_t)v;
}

static int perf_parse_int(const char* s, const char* flag, int lo, int hi) {
  char* end;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) {
    char fix[96];
    snprintf(fix, sizeof fix, "give an integer from %d to %d", lo, hi);
    perf_bad(flag, s, fix);
  }
  return (int)v;
}

static int perf_lookup(const char* s, const char* const* names, size_t stride, int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(*(const char* const*)((const char*)names + i * stride), s) == 0) return i;
  return -1;
}

perf_opts_t perf_parse(int argc, char** argv) {
  static const struct option longopts[] = {
      {"minbytes", required_argument, 0, 'b'}, {"maxbytes", required_argument, 0, 'e'},
      {"stepbytes", required_argument, 0, 'i'}, {"stepfactor", required_argument, 0, 'f'},
      {"iters", required_argument, 0, 'n'},    {"warmup_iters", required_argument, 0, 'w'},
      {"check", required_argument, 0, 'c'},    {"op", required_argument, 0, 'o'},
      {"datatype", required_argument, 0, 'd'}, {"root", required_argument, 0, 'r'},
      {"average", required_argument, 0, 'a'},  {"ngpus", required_argument, 0, 'g'},
      {"nprocs", required_argument, 0, 'P'},   {"timeout", required_argument, 0, 'T'},
      {"json", optional_argument, 0, 'J'},     {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  perf_opts_t o = {PC_ALL_REDUCE, 8, (size_t)128 << 20, (size_t)1 << 20, 2, 20, 5, 1, 7 /* float */, PO_SUM, 0, 1,
                   1, 0, 600, 0, NULL};
  int ch, idx;
  const char* coll = NULL;
  if (argc > 1 && argv[1][0] != '-') { /* the collective comes first */
    coll = argv[1];
    argv[1] = argv[0];
    argv++;
    argc--;
  }
  while ((ch = getopt_long(argc, argv, "b:e:i:f:n:w:c:o:d:r:a:g:P:T:h", longopts, &idx)) != -1) {
    switch (ch) {
      case 'b': o.minbytes = perf_parse_size(optarg, "-b (minbytes)"); break;
      case 'e': o.maxbytes = perf_parse_size(optarg, "-e (maxbytes)"); break;
      case 'i': o.stepbytes = perf_parse_size(optarg, "-i (stepbytes)"); break;
      case 'f': o.factor = perf_parse_int(optarg, "-f (stepfactor)", 1, 1 << 20); break;
      case 'n': o.iters = perf_parse_int(optarg, "-n (iters)", 1, 1 << 30); break;
      case 'w': o.warmup = perf_parse_int(optarg, "-w (warmup_iters)", 0, 1 << 30); break;
      case 'c': o.check = perf_parse_int(optarg, "-c (check)", 0, 1 << 20); break;
      case 'r': o.root = perf_parse_int(optarg, "-r (root)", 0, 1 << 30); break;
      case 'a': o.average = perf_parse_int(optarg, "-a (average)", 0, 3); break;
      case 'g': o.nthreads = perf_parse_int(optarg, "-g (ranks per process)", 1, 1024); break;
      case 'P': o.nprocs = perf_parse_int(optarg, "-P (processes)", 1, 1024); break;
      case 'T': o.timeout_s = perf_parse_int(optarg, "-T (timeout)", 1, 1 << 30); break;
      case 'o':
        o.op = perf_lookup(optarg, perf_ops, sizeof perf_ops[0], PERF_NOPS);
        if (o.op < 0) perf_bad("-o (op)", optarg, "use sum, prod, max, min or avg");
        break;
      case 'd':
        o.type = perf_lookup(optarg, &perf_types[0].name, sizeof perf_types[0], PERF_NTYPES);
        if (o.type < 0)
          perf_bad("-d (datatype)", optarg,
                   "use float, half, bfloat16, double, int8, uint8, int32, uint32, int64 or uint64");
        break;
      case 'J':
        if (optarg == NULL) o.json = 1;
        else o.json_file = optarg;
        break;
      case 'h': perf_usage(stdout); exit(0);
      default: perf_usage(stderr); exit(2);
    }
  }
  if (coll == NULL && optind < argc) coll = argv[optind++];
  if (optind < argc) perf_bad("unexpected argument", argv[optind], "options follow the collective");
  if (coll == NULL) perf_bad("missing", "collective", "name one first, e.g. all_reduce");
  o.coll = (perf_coll_t)perf_lookup(coll, &perf_colls[0].name, sizeof perf_colls[0], PERF_NCOLLS);
  if ((int)o.coll < 0)
    perf_bad("unknown collective", coll,
             "use all_reduce, all_gather, broadcast, reduce, reduce_scatter, alltoall or sendrecv");
  if (o.minbytes < 1) perf_bad("-b (minbytes)", "0", "give at least 1");
  if (o.maxbytes < o.minbytes) perf_bad("-e (maxbytes)", "is below -b", "give -e >= -b");
  if (o.factor == 1 && o.stepbytes < 1) perf_bad("-i (stepbytes)", "0", "give at least 1 with -f 1");
  return o;
}

/* ------------------------------------------------------ iteration policy */

/* The iterations and warmup iterations at a size of bytes (PERF_LOOP_BYTES). */
static int perf_iters(const perf_opts_t* o, size_t bytes) {
  size_t cap = PERF_LOOP_BYTES / (bytes ? bytes : 1);
  if (cap < 2) cap = 2;
  return (size_t)o->iters < cap ? o->iters : (int)cap;
}

static int perf_warmup(const perf_opts_t* o, size_t bytes) {
  size_t cap = PERF_LOOP_BYTES / 4 / (bytes ? bytes : 1);
  if (cap < 1) cap = 1;
  return (size_t)o->warmup < cap ? o->warmup : (int)cap;
}

static double perf_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

/* ---------------------------------------------------------------- data */

/* Inputs are small non-negative integers, exact in every type, different
 * for every check (rep) so a call that does nothing fails the check.
 * Reductions stay below 4 per rank (sums exact in bfloat16 up to 85
 * ranks); prod multiplies at most one 2 per element. */
static unsigned perf_value(const perf_opts_t* o, int nranks, int rank, size_t i, int rep) {
  if (!perf_colls[o->coll].reduces) return (unsigned)((rank * 37u + i + rep * 11u) % 101u);
  if (o->op == PO_PROD) return (rank + i + rep) % (size_t)(nranks + 1) == 0 ? 2 : 1;
  return (unsigned)((rank + i + rep) % 4);
}

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

/* Element i of a buffer of type t, as a double (every value we expect fits). */
static double perf_load(const perf_type_t* t, const void* buf, size_t i) {
  const char* p = (const char*)buf + i * t->size;
  uint64_t u = 0;
  uint32_t bits;
  uint16_t h;
  float f;
  double d;
  switch (t->kind) {
    case PK_UNSIGNED: memcpy(&u, p, t->size); return (double)u;
    case PK_SIGNED:
      memcpy(&u, p, t->size);
      if (t->size < 8 && (u >> (8 * t->size - 1)) & 1) u |= ~(uint64_t)0 << (8 * t->size);
      return (double)(int64_t)u;
    case PK_FLOAT: memcpy(&f, p, 4); return f;
    case PK_DOUBLE: memcpy(&d, p, 8); return d;
    case PK_BF16: memcpy(&h, p, 2); bits = (uint32_t)h << 16; memcpy(&f, &bits, 4); return f;
    case PK_HALF: {
      memcpy(&h, p, 2);
      int e = (h >> 10) & 31, m = h & 1023;
      double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
      return (h & 0x8000) ? -v : v;
    }
  }
  return NAN;
}

/* The reduction over nranks ranks of their element i, as type t computes
 * it: integers wrap at their width, avg divides (integers truncate). */
static double perf_reduced(const perf_opts_t* o, const perf_type_t* t, int nranks, size_t i, int rep) {
  uint64_t acc = 0;
  double facc = 0;
  for (int r = 0; r < nranks; r++) {
    unsigned v = perf_value(o, nranks, r, i, rep);
    if (r == 0) { acc = v; facc = v; continue; }
    switch (o->op) {
      case PO_PROD: acc *= v; facc *= v; break;
      case PO_MAX: if (v > acc) acc = facc = v; break;
      case PO_MIN: if (v < acc) acc = facc = v; break;
      default: acc += v; facc += v; break; /* sum, avg */
    }
  }
  if (t->kind != PK_SIGNED && t->kind != PK_UNSIGNED) return o->op == PO_AVG ? facc / nranks : facc;
  if (t->size < 8) acc &= ((uint64_t)1 << (8 * t->size)) - 1;
  if (t->kind == PK_UNSIGNED) return (double)(o->op == PO_AVG ? acc / (uint64_t)nranks : acc);
  int64_t s = (int64_t)acc;
  if (t->size < 8 && (acc >> (8 * t->size - 1)) & 1) s = (int64_t)(acc | ~(uint64_t)0 << (8 * t->size));
  return (double)(o->op == PO_AVG ? s / nranks : s);
}

/* avg on floating types rounds once; everything else must be exact. */
static int perf_equal(const perf_opts_t* o, const perf_type_t* t, double got, double want) {
  if (got == want) return 1;
  if (t->mantissa == 0 || o->op != PO_AVG || got != got) return 0;
  return fabs(got - want) <= ldexp(fabs(want), -t->mantissa);
}

/* ---------------------------------------------------------------- sweep */

static void perf_fill(const perf_lib_t* l, const perf_opts_t* o, void* buf, size_t n, int rank, int rep) {
  for (size_t i = 0; i < n; i++) perf_store(&perf_types[o->type], buf, i, perf_value(o, l->nranks, rank, i, rep));
}

/* Fills this rank's input for a call of counts c; send/recv point to where
 * the call reads and writes. The output is poisoned first (0xff bytes are
 * never an expected value) so stale results never pass a check. */
static void perf_prepare(const perf_lib_t* l, const perf_opts_t* o, const perf_counts_t* c, void* send, void* recv,
                         void* recv_base, int in_place, int rep) {
  size_t ts = perf_types[o->type].size;
  memset(in_place ? recv_base : recv, 0xff, (in_place ? (c->send > c->recv ? c->send : c->recv) : c->recv) * ts);
  if (o->coll == PC_BROADCAST && in_place && l->rank != o->root) return; /* the buffer is only output */
  perf_fill(l, o, send, c->send, l->rank, rep);
}

/* Wrong elements of this rank's output. */
static long perf_count_wrong(const perf_lib_t* l, const perf_opts_t* o, const perf_counts_t* c, const void* recv,
                             int rep) {
  const perf_type_t* t = &perf_types[o->type];
  int n = l->nranks, me = l->rank;
  size_t per = c->param;
  long wrong = 0;
  if (o->coll == PC_REDUCE && me != o->root) return 0;
  for (size_t i = 0; i < c->recv; i++) {
    double want;
    switch (o->coll) {
      case PC_ALL_REDUCE:
      case PC_REDUCE: want = perf_reduced(o, t, n, i, rep); break;
      case PC_REDUCE_SCATTER: want = perf_reduced(o, t, n, (size_t)me * per + i, rep); break;
      case PC_BROADCAST: want = perf_value(o, n, o->root, i, rep); break;
      case PC_ALL_GATHER: want = perf_value(o, n, (int)(i / per), i % per, rep); break;
      case PC_ALLTOALL: want = perf_value(o, n, (int)(i / per), (size_t)me * per + i % per, rep); break;
      case PC_SENDRECV: want = perf_value(o, n, (me + n - 1) % n, i, rep); break;
      default: want = NAN;
    }
    wrong += !perf_equal(o, t, perf_load(t, recv, i), want);
  }
  return wrong;
}

/* The time of one phase as -a asks: rank 0's, the mean, the min or the max. */
static double perf_combine(const perf_lib_t* l, const perf_opts_t* o, double us) {
  switch (o->average) {
    case 0: return l->reduce(l->ctx, l->rank == 0 ? us : 0, PO_SUM);
    case 2: return l->reduce(l->ctx, us, PO_MIN);
    case 3: return l->reduce(l->ctx, us, PO_MAX);
    default: return l->reduce(l->ctx, us, PO_SUM) / l->nranks;
  }
}

static void perf_phase(const perf_lib_t* l, const perf_opts_t* o, const perf_counts_t* c, void* sendbuf,
                       void* recvbuf, int in_place, int* rep, perf_phase_t* out) {
  size_t ts = perf_types[o->type].size;
  size_t bytes = (c->send > c->recv ? c->send : c->recv) * ts;
  void* send = in_place ? (char*)recvbuf + c->send_ip * ts * l->rank : sendbuf;
  void* recv = in_place ? (char*)recvbuf + c->recv_ip * ts * l->rank : recvbuf;
  int iters = perf_iters(o, bytes), warmup = perf_warmup(o, bytes);

  perf_prepare(l, o, c, send, recv, recvbuf, in_place, 0);
  for (int i = 0; i < warmup; i++) l->run(l->ctx, o, send, recv, c->param, in_place);
  l->reduce(l->ctx, 0, PO_SUM); /* lines the ranks up */
  double t0 = perf_now_us();
  for (int i = 0; i < iters; i++) l->run(l->ctx, o, send, recv, c->param, in_place);
  double us = perf_combine(l, o, (perf_now_us() - t0) / iters);

  long wrong = -1;
  for (int k = 0; k < o->check; k++) {
    ++*rep;
    perf_prepare(l, o, c, send, recv, recvbuf, in_place, *rep);
    l->run(l->ctx, o, send, recv, c->param, in_place);
    long w = (long)l->reduce(l->ctx, (double)perf_count_wrong(l, o, c, recv, *rep), PO_SUM);
    wrong = (wrong < 0 ? 0 : wrong) + w;
  }
  out->ran = 1;
  out->us = us;
  out->algbw = bytes / us / 1e3; /* B/us = 1e6 B/s; GB = 1e9 B */
  out->busbw = out->algbw * perf_bus_factor(o->coll, l->nranks);
  out->wrong = wrong;
}

/* --------------------------------------------------------------- output */

static void perf_print_header(const perf_lib_t* l, const perf_opts_t* o, int nprocs) {
  printf("# %s %s: nranks %d (processes %d x ranks per process %d)\n", l->name, perf_colls[o->coll].name, l->nranks,
         nprocs, l->nranks / nprocs);
  printf("# nThread 1 nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: 1 "
         "validation: %d graph: 0\n",
         l->nranks / nprocs, o->minbytes, o->maxbytes, o->factor > 1 ? (size_t)o->factor : o->stepbytes,
         o->factor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->check);
  printf("# above %.1f MiB fewer iterations: at most %zu MiB per timed loop, at least 2\n#\n",
         (double)PERF_LOOP_BYTES / o->iters / (1 << 20), PERF_LOOP_BYTES >> 20);
  printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "",
         "", "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count", "type", "redop",
         "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "", "",
         "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  fflush(stdout);
}

static const char* perf_redop_name(const perf_opts_t* o) {
  return perf_colls[o->coll].reduces ? perf_ops[o->op] : "none";
}

static int perf_root(const perf_opts_t* o) { return perf_colls[o->coll].rooted ? o->root : -1; }

static void perf_print_row(const perf_opts_t* o, const perf_row_t* r) {
  printf("%12zu  %12zu  %8s  %6s  %6i", r->bytes, r->count, perf_types[o->type].name, perf_redop_name(o),
         perf_root(o));
  for (int p = 0; p < 2; p++) {
    const perf_phase_t* ph = &r->phase[p];
    char t[32], w[24] = "N/A";
    if (!ph->ran) {
      printf("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
      continue;
    }
    snprintf(t, sizeof t, ph->us >= 10000 ? "%7.0f" : ph->us >= 100 ? "%7.1f" : "%7.2f", ph->us);
    if (ph->wrong >= 0) snprintf(w, sizeof w, "%ld", ph->wrong);
    printf("  %7s  %6.2f  %6.2f  %5s", t, ph->algbw, ph->busbw, w);
  }
  printf("\n");
  fflush(stdout);
}

static double perf_avg_busbw(const perf_results_t* res) { return res->nbw ? res->sum_busbw / res->nbw : 0.0; }

static void perf_print_footer(const perf_results_t* res) {
  printf("# Out of bounds values : %d %s\n", res->nfailed, res->nfailed ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g \n#\n", perf_avg_busbw(res));
}

static void perf_json_phase(FILE* f, const perf_phase_t* ph) {
  if (!ph->ran) {
    fprintf(f, "null");
    return;
  }
  fprintf(f, "{\"time_us\": %.6g, \"algbw\": %.6g, \"busbw\": %.6g, \"wrong\": ", ph->us, ph->algbw, ph->busbw);
  if (ph->wrong >= 0) fprintf(f, "%ld}", ph->wrong);
  else fprintf(f, "null}");
}

/* The run as one JSON object (schema in README.md, `gocl perf`). */
static void perf_write_json(FILE* f, const perf_lib_t* l, const perf_opts_t* o, int nprocs, const perf_results_t* res) {
  fprintf(f,
          "{\"tool\": \"gocl-perf\", \"schema\": 1, \"library\": \"%s\", \"collective\": \"%s\", \"nranks\": %d, "
          "\"nprocs\": %d, \"ranks_per_proc\": %d, \"type\": \"%s\", \"redop\": \"%s\", \"root\": %d, "
          "\"minbytes\": %zu, \"maxbytes\": %zu, \"stepfactor\": %d, \"iters\": %d, \"warmup_iters\": %d, "
          "\"check\": %d, \"average\": %d, \"busbw_factor\": %.17g,\n \"rows\": [",
          l->name, perf_colls[o->coll].name, l->nranks, nprocs, l->nranks / nprocs, perf_types[o->type].name,
          perf_redop_name(o), perf_root(o), o->minbytes, o->maxbytes, o->factor, o->iters, o->warmup, o->check,
          o->average, perf_bus_factor(o->coll, l->nranks));
  for (int i = 0; i < res->nrows; i++) {
    const perf_row_t* r = &res->rows[i];
    fprintf(f, "%s\n  {\"size\": %zu, \"count\": %zu, \"out_of_place\": ", i ? "," : "", r->bytes, r->count);
    perf_json_phase(f, &r->phase[0]);
    fprintf(f, ", \"in_place\": ");
    perf_json_phase(f, &r->phase[1]);
    fprintf(f, "}");
  }
  fprintf(f, "],\n \"out_of_bounds\": %d, \"avg_busbw\": %.6g}\n", res->nfailed, perf_avg_busbw(res));
}

static void perf_record(perf_results_t* res, const perf_row_t* row) {
  if (res->nrows == res->cap) {
    res->cap = res->cap * 2 + 16;
    res->rows = realloc(res->rows, (size_t)res->cap * sizeof *res->rows);
    if (res->rows == NULL) {
      fprintf(stderr, "%s: out of memory\n", perf_prog);
      exit(1);
    }
  }
  res->rows[res->nrows++] = *row;
  for (int p = 0; p < 2; p++) {
    if (!row->phase[p].ran) continue;
    res->sum_busbw += row->phase[p].busbw;
    res->nbw++;
    res->nfailed += row->phase[p].wrong > 0;
  }
}

/* The whole sweep on one rank; rank 0 prints (nprocs: for the header).
 * Returns 0 if every value was right. */
int perf_run(const perf_lib_t* l, const perf_opts_t* o, int nprocs) {
  size_t ts = perf_types[o->type].size;
  size_t bufbytes = o->maxbytes / ts * ts;
  void* send = malloc(bufbytes ? bufbytes : ts);
  void* recv = malloc(bufbytes ? bufbytes : ts);
  perf_results_t res = {NULL, 0, 0, 0, 0, 0};
  int rep = 0, table = l->rank == 0 && !o->json;
  if (send == NULL || recv == NULL) {
    fprintf(stderr, "%s: rank %d: cannot allocate 2 x %zu bytes\n", perf_prog, l->rank, bufbytes);
    exit(1);
  }
  if (table) perf_print_header(l, o, nprocs);
  /* As nccl-tests: warm up at the largest and the smallest size first, so
   * the first row does not carry connection set-up or first-touch costs. */
  size_t ends[2] = {o->maxbytes, o->minbytes};
  for (int e = 0; e < 2; e++) {
    perf_counts_t c = perf_counts(o->coll, ends[e] / ts, l->nranks);
    if (c.param == 0) continue;
    perf_prepare(l, o, &c, send, recv, recv, 0, 0);
    for (int i = perf_warmup(o, c.send * ts); i > 0; i--) l->run(l->ctx, o, send, recv, c.param, 0);
  }
  for (size_t bytes = o->minbytes; bytes <= o->maxbytes;
       bytes = o->factor > 1 ? bytes * (size_t)o->factor : bytes + o->stepbytes) {
    perf_counts_t c = perf_counts(o->coll, bytes / ts, l->nranks);
    if (c.param == 0) continue;
    perf_row_t row = {.bytes = (c.send > c.recv ? c.send : c.recv) * ts, .count = c.param};
    perf_phase(l, o, &c, send, recv, 0, &rep, &row.phase[0]);
    if (perf_colls[o->coll].in_place) perf_phase(l, o, &c, send, recv, 1, &rep, &row.phase[1]);
    if (l->rank == 0) {
      perf_record(&res, &row);
      if (table) perf_print_row(o, &row);
    }
  }
  int failed = 0;
  if (l->rank == 0) {
    if (table) perf_print_footer(&res);
    if (o->json) perf_write_json(stdout, l, o, nprocs, &res);
    if (o->json_file) {
      FILE* f = fopen(o->json_file, "w");
      if (f == NULL) {
        fprintf(stderr, "%s: cannot write --json=%s: ", perf_prog, o->json_file);
        perror(NULL);
        exit(1);
      }
      perf_write_json(f, l, o, nprocs, &res);
      fclose(f);
    }
    fflush(stdout);
    failed = res.nfailed > 0;
  }
  free(res.rows);
  free(send);
  free(recv);
  /* Every rank's exit status says whether the run failed. */
  return l->reduce(l->ctx, failed, PO_MAX) > 0;
}

_Static_assert(sizeof perf_colls / sizeof perf_colls[0] == PERF_NCOLLS, "perf_colls: one entry per perf_coll_t");
_Static_assert(sizeof perf_types / sizeof perf_types[0] == PERF_NTYPES, "perf_types: one entry per goclDataType_t");
_Static_assert(sizeof perf_ops / sizeof perf_ops[0] == PERF_NOPS, "perf_ops: one name per PO_ value");
