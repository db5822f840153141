/*
 * gocl_test.c — correctness test of gocl's C API, run as several processes.
 *
 * Build (from the repository root, after `make lib`):
 *   gcc -O2 -Wall -I build/include -I cmd/gocl-perf tests/c/gocl_test.c cmd/gocl-perf/launch.c \
 *       -L build -lgocl -Wl,-rpath,'$ORIGIN' -lm -o build/gocl_test
 * Run:
 *   build/gocl_test -n 4                  every collective x dtype x op x size, in and out of place
 *   build/gocl_test -n 3 --kill-rank 1    rank 1 dies after init; the others must get an error naming it,
 *                                         then shrink (agreeing on who is gone) and all-reduce right
 * Options: -n N ranks (default 2), -T S wall-clock limit in seconds (default 600).
 *
 * The parent starts N copies of itself (launch.h). Every rank runs the same
 * sequence of calls and can compute every rank's input, so it checks its own
 * results against a local reference. A failing check prints one line; each
 * rank prints `rank R: P checks passed, F failed`; the parent prints the sum
 * as `P passed, F failed` and exits non-zero if anything failed.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gocl.h"
#include "launch.h"

/* ------------------------------------------------------------ data types */

typedef enum { KIND_SIGNED, KIND_UNSIGNED, KIND_FLOAT } kind_t;

typedef struct {
  goclDataType_t type;
  const char* name;
  size_t size;
  kind_t kind;
  /* Floats: allowed error relative to the sum of the terms' magnitudes. A
   * ring rounds to the type at each of the n-1 hops: 2^-9 each for bfloat16. */
  double tol;
} dtype_t;

static const dtype_t dtypes[] = {
    {goclInt8, "int8", 1, KIND_SIGNED, 0},        {goclUint8, "uint8", 1, KIND_UNSIGNED, 0},
    {goclInt32, "int32", 4, KIND_SIGNED, 0},      {goclUint32, "uint32", 4, KIND_UNSIGNED, 0},
    {goclInt64, "int64", 8, KIND_SIGNED, 0},      {goclUint64, "uint64", 8, KIND_UNSIGNED, 0},
    {goclFloat16, "half", 2, KIND_FLOAT, 1e-2},   {goclFloat32, "float", 4, KIND_FLOAT, 1e-5},
    {goclFloat64, "double", 8, KIND_FLOAT, 1e-12}, {goclBfloat16, "bfloat16", 2, KIND_FLOAT, 2e-2},
};
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])

static const dtype_t* dtype_of(goclDataType_t type) {
  for (size_t i = 0; i < NDTYPES; i++)
    if (dtypes[i].type == type) return &dtypes[i];
  abort();
}

/* Elements are handled as their bits, zero-extended to 64 (little endian). */
static uint64_t load(const dtype_t* dt, const void* buf, size_t i) {
  uint64_t v = 0;
  memcpy(&v, (const char*)buf + i * dt->size, dt->size);
  return v;
}

static void store(const dtype_t* dt, void* buf, size_t i, uint64_t v) {
  memcpy((char*)buf + i * dt->size, &v, dt->size);
}

static void* at(const dtype_t* dt, void* buf, size_t i) { return (char*)buf + i * dt->size; }

static uint64_t trunc_bits(const dtype_t* dt, uint64_t v) {
  return dt->size == 8 ? v : v & ((UINT64_C(1) << (8 * dt->size)) - 1);
}

static int64_t sign_extend(const dtype_t* dt, uint64_t v) {
  int shift = 64 - 8 * (int)dt->size;
  return (int64_t)(v << shift) >> shift;
}

static double half_to_double(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
  return h & 0x8000 ? -v : v;
}

/* Round to nearest even, through the 11-bit significand n of x = n * 2^q. */
static uint16_t half_from_double(double x) {
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  int e;
  x = fabs(x);
  if (isnan(x)) return 0x7e00;
  if (x >= 65520.0) return sign | 0x7c00;
  frexp(x, &e);
  int q = x < 0x1p-14 ? -24 : e - 11;
  uint32_t n = (uint32_t)nearbyint(ldexp(x, -q));
  if (q == -24) return sign | (uint16_t)n; /* subnormal; n == 1024 is the smallest normal */
  if (n == 2048) n = 1024, q++;
  return sign | (uint16_t)((q + 25) << 10 | (n - 1024));
}

static double bf16_to_double(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t bf16_from_double(double x) {
  float f = (float)x;
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return (uint16_t)(u >> 16) | 0x40;
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

static double to_double(const dtype_t* dt, uint64_t bits) {
  float f;
  double d;
  switch (dt->type) {
    case goclFloat16: return half_to_double((uint16_t)bits);
    case goclBfloat16: return bf16_to_double((uint16_t)bits);
    case goclFloat32: memcpy(&f, &bits, 4); return f;
    case goclFloat64: memcpy(&d, &bits, 8); return d;
    default: abort();
  }
}

static uint64_t from_double(const dtype_t* dt, double x) {
  uint64_t bits = 0;
  float f = (float)x;
  switch (dt->type) {
    case goclFloat16: return half_from_double(x);
    case goclBfloat16: return bf16_from_double(x);
    case goclFloat32: memcpy(&bits, &f, 4); return bits;
    case goclFloat64: memcpy(&bits, &x, 8); return bits;
    default: abort();
  }
}

static void format_value(const dtype_t* dt, uint64_t bits, char* out, size_t n) {
  if (dt->kind == KIND_FLOAT)
    snprintf(out, n, "%.9g (0x%0*llx)", to_double(dt, bits), (int)dt->size * 2, (unsigned long long)bits);
  else if (dt->kind == KIND_SIGNED)
    snprintf(out, n, "%lld", (long long)sign_extend(dt, bits));
  else
    snprintf(out, n, "%llu", (unsigned long long)bits);
}

/* ------------------------------------------------------------ inputs */

/* A hash of (rank, index, seed) to 0..15. */
static unsigned mix(int rank, size_t i, unsigned seed) {
  uint32_t h = (uint32_t)i * 0x9E3779B1u ^ (uint32_t)rank * 0x85EBCA77u ^ seed * 0xC2B2AE3Du;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 13;
  return h & 15;
}

/* Small values, so sums stay exact and float products stay in range: -8..7
 * or 0..15 for integers (products wrap, as the reference does), +-0.25..2
 * (never 0) for floats. */
static uint64_t input(const dtype_t* dt, int rank, size_t i, unsigned seed) {
  unsigned h = mix(rank, i, seed);
  switch (dt->kind) {
    case KIND_SIGNED: return trunc_bits(dt, (uint64_t)((int64_t)h - 8));
    case KIND_UNSIGNED: return h;
    default: return from_double(dt, (h & 8 ? -0.25 : 0.25) * ((h & 7) + 1));
  }
}

/* buf[k] = rank's input at index first+k. */
static void fill_input(const dtype_t* dt, void* buf, size_t count, int rank, size_t first, unsigned seed) {
  for (size_t k = 0; k < count; k++) store(dt, buf, k, input(dt, rank, first + k, seed));
}

/* Not a plausible result, so a buffer the library never wrote is noticed. */
static void fill_garbage(void* buf, size_t bytes) { memset(buf, 0xA5, bytes); }

static void* xmalloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (p == NULL) {
    perror("malloc");
    exit(3);
  }
  return p;
}

/* ------------------------------------------------------------ reductions */

typedef enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_PREMULSUM, NOPS } opkind_t;
static const char* const op_names[NOPS] = {"sum", "prod", "max", "min", "avg", "premulsum"};
#define INT_SCALAR 3
#define FLOAT_SCALAR 0.5

static int int_less(const dtype_t* dt, uint64_t a, uint64_t b) {
  return dt->kind == KIND_SIGNED ? sign_extend(dt, a) < sign_extend(dt, b) : a < b;
}

/* Integers wrap: unsigned 64-bit arithmetic truncated to the type is the
 * two's complement result for every width and signedness. */
static uint64_t reduce_int(const dtype_t* dt, opkind_t op, int nranks, size_t i, unsigned seed) {
  uint64_t acc = op == OP_PREMULSUM ? 0 : input(dt, 0, i, seed);
  for (int r = op == OP_PREMULSUM ? 0 : 1; r < nranks; r++) {
    uint64_t x = input(dt, r, i, seed);
    switch (op) {
      case OP_SUM:
      case OP_AVG: acc += x; break;
      case OP_PREMULSUM: acc += x * INT_SCALAR; break;
      case OP_PROD: acc *= x; break;
      case OP_MAX: acc = int_less(dt, acc, x) ? x : acc; break;
      case OP_MIN: acc = int_less(dt, x, acc) ? x : acc; break;
      default: abort();
    }
  }
  acc = trunc_bits(dt, acc);
  if (op == OP_AVG)
    acc = dt->kind == KIND_SIGNED ? (uint64_t)(sign_extend(dt, acc) / nranks) : acc / (uint64_t)nranks;
  return trunc_bits(dt, acc);
}

/* *mag: the scale of the rounding errors a correct implementation may make. */
static uint64_t reduce_float(const dtype_t* dt, opkind_t op, int nranks, size_t i, unsigned seed,
                             double* mag) {
  double acc = 0, sum_abs = 0;
  for (int r = 0; r < nranks; r++) {
    double x = to_double(dt, input(dt, r, i, seed));
    if (op == OP_PREMULSUM) x *= FLOAT_SCALAR;
    sum_abs += fabs(x);
    switch (op) {
      case OP_SUM:
      case OP_AVG:
      case OP_PREMULSUM: acc += x; break;
      case OP_PROD: acc = r ? acc * x : x; break;
      case OP_MAX: acc = r ? fmax(acc, x) : x; break;
      case OP_MIN: acc = r ? fmin(acc, x) : x; break;
      default: abort();
    }
  }
  if (op == OP_AVG) acc /= nranks, sum_abs /= nranks;
  *mag = op == OP_SUM || op == OP_AVG || op == OP_PREMULSUM ? sum_abs : fabs(acc);
  return from_double(dt, acc);
}

/* The expected result at every index 0..n-1, as bits, with error scales. */
typedef struct {
  void* bits;
  double* mag; /* NULL for integers: exact */
} ref_t;

static ref_t make_ref(const dtype_t* dt, opkind_t op, int nranks, size_t n, unsigned seed) {
  ref_t ref = {xmalloc(n * dt->size), NULL};
  if (dt->kind == KIND_FLOAT) ref.mag = xmalloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++)
    store(dt, ref.bits, i,
          ref.mag ? reduce_float(dt, op, nranks, i, seed, &ref.mag[i]) : reduce_int(dt, op, nranks, i, seed));
  return ref;
}

static void free_ref(ref_t* ref) {
  free(ref->bits);
  free(ref->mag);
}

/* ------------------------------------------------------------ checks */

typedef struct {
  goclComm_t comm;
  int rank, nranks;
  unsigned seed; /* advanced identically on every rank: fresh data per case */
  long passed, failed;
} ctx_t;

/* What a data check is about, for its failure line. */
typedef struct {
  const char* coll;
  const dtype_t* dt;
  const char* op; /* "-" without one */
  size_t count;
  int inplace;
  int root; /* -1 without one */
} case_t;

static void vfail(ctx_t* t, const char* fmt, va_list ap) {
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  printf("rank %d: FAIL %s\n", t->rank, msg);
  t->failed++;
}

/* Counts one check: passes if ok, else prints the formatted reason. */
__attribute__((format(printf, 3, 4))) static int check(ctx_t* t, int ok, const char* fmt, ...) {
  if (ok) {
    t->passed++;
    return 1;
  }
  va_list ap;
  va_start(ap, fmt);
  vfail(t, fmt, ap);
  va_end(ap);
  return 0;
}

__attribute__((format(printf, 3, 4))) static void fail_case(ctx_t* t, const case_t* c, const char* fmt, ...) {
  char what[768], root[16] = "-";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (c->root >= 0) snprintf(root, sizeof root, "%d", c->root);
  check(t, 0, "%s dtype=%s op=%s count=%zu %s root=%s: %s", c->coll, c->dt->name, c->op, c->count,
        c->inplace ? "in-place" : "out-of-place", root, what);
}

/* A failed call is a failed check; a successful one is checked by its data. */
static int call_ok(ctx_t* t, const case_t* c, goclResult_t rc) {
  if (rc == goclSuccess) return 1;
  fail_case(t, c, "returned %d (%s): %s", rc, goclGetErrorString(rc), goclGetLastError(t->comm));
  return 0;
}

/* Compares count elements of got (named what) with exp: floats within the
 * type's tolerance times mag[i] when mag is given, bit for bit otherwise. */
static void check_data(ctx_t* t, const case_t* c, const char* what, const void* got, const void* exp,
                       const double* mag, size_t count) {
  const dtype_t* dt = c->dt;
  for (size_t i = 0; i < count; i++) {
    uint64_t g = load(dt, got, i), e = load(dt, exp, i);
    if (g == e || (mag && fabs(to_double(dt, g) - to_double(dt, e)) <= dt->tol * mag[i])) continue;
    char gs[64], es[64];
    format_value(dt, g, gs, sizeof gs);
    format_value(dt, e, es, sizeof es);
    fail_case(t, c, "%s index %zu got %s expected %s", what, i, gs, es);
    return;
  }
  t->passed++;
}

/* Expects a rank's input at indexes first.. in buf, bit for bit. */
static void check_inputs(ctx_t* t, const case_t* c, const char* what, const void* buf, size_t count,
                         int rank, size_t first) {
  void* exp = xmalloc(count * c->dt->size);
  fill_input(c->dt, exp, count, rank, first, t->seed);
  check_data(t, c, what, buf, exp, NULL, count);
  free(exp);
}

/* -------------------------------------------------- reduction collectives */

typedef struct {
  opkind_t kind;
  goclRedOp_t op;
} op_t;

static void test_allreduce(ctx_t* t, const dtype_t* dt, op_t op, size_t count, const ref_t* ref, int inplace) {
  case_t c = {"allreduce", dt, op_names[op.kind], count, inplace, -1};
  void* send = xmalloc(count * dt->size);
  void* recv = inplace ? send : xmalloc(count * dt->size);
  fill_input(dt, send, count, t->rank, 0, t->seed);
  if (!inplace) fill_garbage(recv, count * dt->size);
  if (call_ok(t, &c, goclAllReduce(send, recv, count, dt->type, op.op, t->comm, NULL))) {
    check_data(t, &c, "recvbuff", recv, ref->bits, ref->mag, count);
    if (!inplace) check_inputs(t, &c, "sendbuff changed:", send, count, t->rank, 0);
  }
  if (!inplace) free(recv);
  free(send);
}

static void test_reduce(ctx_t* t, const dtype_t* dt, op_t op, size_t count, const ref_t* ref, int inplace,
                        int root) {
  case_t c = {"reduce", dt, op_names[op.kind], count, inplace, root};
  void* send = xmalloc(count * dt->size);
  void* recv = inplace ? send : xmalloc(count * dt->size);
  fill_input(dt, send, count, t->rank, 0, t->seed);
  if (!inplace) fill_garbage(recv, count * dt->size);
  if (call_ok(t, &c, goclReduce(send, recv, count, dt->type, op.op, root, t->comm, NULL))) {
    if (t->rank == root) check_data(t, &c, "recvbuff", recv, ref->bits, ref->mag, count);
    else t->passed++;
    if (!inplace) check_inputs(t, &c, "sendbuff changed:", send, count, t->rank, 0);
  }
  if (!inplace) free(recv);
  free(send);
}

/* Rank i gets reduced block i of the n*count inputs. */
static void test_reducescatter(ctx_t* t, const dtype_t* dt, op_t op, size_t count, const ref_t* ref,
                               int inplace) {
  case_t c = {"reducescatter", dt, op_names[op.kind], count, inplace, -1};
  size_t total = count * (size_t)t->nranks, mine = count * (size_t)t->rank;
  void* send = xmalloc(total * dt->size);
  void* recv = inplace ? at(dt, send, mine) : xmalloc(count * dt->size);
  fill_input(dt, send, total, t->rank, 0, t->seed);
  if (!inplace) fill_garbage(recv, count * dt->size);
  if (call_ok(t, &c, goclReduceScatter(send, recv, count, dt->type, op.op, t->comm, NULL))) {
    check_data(t, &c, "recvbuff", recv, at(dt, ref->bits, mine), ref->mag ? ref->mag + mine : NULL, count);
    if (!inplace) check_inputs(t, &c, "sendbuff changed:", send, total, t->rank, 0);
  }
  if (!inplace) free(recv);
  free(send);
}

static goclRedOp_t create_premulsum(ctx_t* t, const dtype_t* dt) {
  goclRedOp_t op = goclNumOps;
  uint64_t scalar = dt->kind == KIND_FLOAT ? from_double(dt, FLOAT_SCALAR) : INT_SCALAR;
  goclResult_t rc = goclRedOpCreatePreMulSum(&op, &scalar, dt->type, goclScalarHostImmediate, t->comm);
  check(t, rc == goclSuccess, "goclRedOpCreatePreMulSum dtype=%s returned %d: %s", dt->name, rc,
        goclGetLastError(t->comm));
  return rc == goclSuccess ? op : goclMaxRedOp;
}

/* Sizes: 0, 1, odd, around chunk sizes; plus one >= 4 MiB case for float sum. */
static const size_t counts[] = {0, 1, 7, 1023, 131073};
#define NCOUNTS (sizeof counts / sizeof counts[0])
#define BIG_COUNT ((size_t)(4 << 20) / 4 + 3)

static size_t ncounts_for(const dtype_t* dt, int is_sum) {
  return dt->type == goclFloat32 && is_sum ? NCOUNTS + 1 : NCOUNTS;
}

static size_t count_at(size_t k) { return k < NCOUNTS ? counts[k] : BIG_COUNT; }

static void test_reductions_with(ctx_t* t, const dtype_t* dt, op_t op) {
  for (size_t k = 0; k < ncounts_for(dt, op.kind == OP_SUM); k++) {
    size_t count = count_at(k);
    t->seed++;
    /* Reductions of all n*count inputs: allreduce and reduce use the first
     * count, reducescatter block rank. */
    ref_t ref = make_ref(dt, op.kind, t->nranks, count * (size_t)t->nranks, t->seed);
    for (int inplace = 0; inplace <= 1; inplace++) {
      test_allreduce(t, dt, op, count, &ref, inplace);
      for (int root = 0; root < t->nranks; root++) test_reduce(t, dt, op, count, &ref, inplace, root);
      test_reducescatter(t, dt, op, count, &ref, inplace);
    }
    free_ref(&ref);
  }
}

static void test_reductions(ctx_t* t) {
  static const goclRedOp_t builtin[] = {goclSum, goclProd, goclMax, goclMin, goclAvg};
  for (size_t d = 0; d < NDTYPES; d++) {
    const dtype_t* dt = &dtypes[d];
    for (int k = OP_SUM; k <= OP_AVG; k++) test_reductions_with(t, dt, (op_t){k, builtin[k]});
    goclRedOp_t premul = create_premulsum(t, dt);
    if (premul == goclMaxRedOp) continue;
    test_reductions_with(t, dt, (op_t){OP_PREMULSUM, premul});
    goclResult_t rc = goclRedOpDestroy(premul, t->comm);
    check(t, rc == goclSuccess, "goclRedOpDestroy dtype=%s returned %d: %s", dt->name, rc,
          goclGetLastError(t->comm));
  }
}

/* ------------------------------------------------------- data movement */

static void test_broadcast(ctx_t* t, const dtype_t* dt, size_t count, int inplace, int root) {
  case_t c = {"broadcast", dt, "-", count, inplace, root};
  size_t bytes = count * dt->size;
  void* send = xmalloc(bytes);
  void* recv = inplace ? send : xmalloc(bytes);
  /* Out of place, non-roots offer their own data, which must be ignored. */
  if (inplace && t->rank != root) fill_garbage(send, bytes);
  else fill_input(dt, send, count, t->rank, 0, t->seed);
  if (!inplace) fill_garbage(recv, bytes);
  if (call_ok(t, &c, goclBroadcast(send, recv, count, dt->type, root, t->comm, NULL))) {
    check_inputs(t, &c, "recvbuff", recv, count, root, 0);
    if (!inplace) check_inputs(t, &c, "sendbuff changed:", send, count, t->rank, 0);
  }
  if (!inplace) free(recv);
  free(send);
}

/* Block r of a gathered buffer holds rank r's inputs first..first+count. */
static void check_blocks(ctx_t* t, const case_t* c, const void* got, size_t first) {
  size_t count = c->count, total = count * (size_t)t->nranks;
  void* exp = xmalloc(total * c->dt->size);
  for (int r = 0; r < t->nranks; r++) fill_input(c->dt, at(c->dt, exp, count * r), count, r, first, t->seed);
  check_data(t, c, "recvbuff", got, exp, NULL, total);
  free(exp);
}

static void test_allgather(ctx_t* t, const dtype_t* dt, size_t count, int inplace) {
  case_t c = {"allgather", dt, "-", count, inplace, -1};
  size_t total = count * (size_t)t->nranks;
  void* recv = xmalloc(total * dt->size);
  void* send = inplace ? at(dt, recv, count * t->rank) : xmalloc(count * dt->size);
  fill_garbage(recv, total * dt->size);
  fill_input(dt, send, count, t->rank, 0, t->seed);
  if (call_ok(t, &c, goclAllGather(send, recv, count, dt->type, t->comm, NULL))) {
    check_blocks(t, &c, recv, 0);
    if (!inplace) check_inputs(t, &c, "sendbuff changed:", send, count, t->rank, 0);
  }
  if (!inplace) free(send);
  free(recv);
}

static void test_gather(ctx_t* t, const dtype_t* dt, size_t count, int inplace, int root) {
  case_t c = {"gather", dt, "-", count, inplace, root};
  size_t total = count * (size_t)t->nranks;
  int here = inplace && t->rank == root; /* in place only means something at root */
  void* recv = xmalloc(total * dt->size);
  void* send = here ? at(dt, recv, count * root) : xmalloc(count * dt->size);
  fill_garbage(recv, total * dt->size);
  fill_input(dt, send, count, t->rank, 0, t->seed);
  if (call_ok(t, &c, goclGather(send, recv, count, dt->type, root, t->comm, NULL))) {
    if (t->rank == root) check_blocks(t, &c, recv, 0);
    else t->passed++;
    if (!here) check_inputs(t, &c, "sendbuff changed:", send, count, t->rank, 0);
  }
  if (!here) free(send);
  free(recv);
}

static void test_scatter(ctx_t* t, const dtype_t* dt, size_t count, int inplace, int root) {
  case_t c = {"scatter", dt, "-", count, inplace, root};
  size_t total = count * (size_t)t->nranks;
  int here = inplace && t->rank == root;
  void* send = xmalloc(total * dt->size);
  void* recv = here ? at(dt, send, count * root) : xmalloc(count * dt->size);
  /* Non-roots offer their own data, which must be ignored. */
  fill_input(dt, send, total, t->rank, 0, t->seed);
  if (!here) fill_garbage(recv, count * dt->size);
  if (call_ok(t, &c, goclScatter(send, recv, count, dt->type, root, t->comm, NULL))) {
    check_inputs(t, &c, "recvbuff", recv, count, root, count * (size_t)t->rank);
    if (!here) check_inputs(t, &c, "sendbuff changed:", send, total, t->rank, 0);
  }
  if (!here) free(recv);
  free(send);
}

/* Block j of rank r's input goes to rank j: rank i's block r is r's inputs
 * from i*count. */
static void test_alltoall(ctx_t* t, const dtype_t* dt, size_t count) {
  case_t c = {"alltoall", dt, "-", count, 0, -1};
  size_t total = count * (size_t)t->nranks;
  void* send = xmalloc(total * dt->size);
  void* recv = xmalloc(total * dt->size);
  fill_input(dt, send, total, t->rank, 0, t->seed);
  fill_garbage(recv, total * dt->size);
  if (call_ok(t, &c, goclAlltoAll(send, recv, count, dt->type, t->comm, NULL))) {
    check_blocks(t, &c, recv, count * (size_t)t->rank);
    check_inputs(t, &c, "sendbuff changed:", send, total, t->rank, 0);
  }
  free(recv);
  free(send);
}

/* Every rank sends to the next and receives from the previous one, in one
 * group (with one rank, to itself). */
static void test_sendrecv(ctx_t* t, const dtype_t* dt, size_t count) {
  case_t c = {"sendrecv-ring", dt, "-", count, 0, -1};
  int next = (t->rank + 1) % t->nranks, prev = (t->rank + t->nranks - 1) % t->nranks;
  void* send = xmalloc(count * dt->size);
  void* recv = xmalloc(count * dt->size);
  fill_input(dt, send, count, t->rank, 0, t->seed);
  fill_garbage(recv, count * dt->size);
  goclResult_t rc = goclGroupStart();
  if (rc == goclSuccess) rc = goclSend(send, count, dt->type, next, t->comm, NULL);
  if (rc == goclSuccess) rc = goclRecv(recv, count, dt->type, prev, t->comm, NULL);
  goclResult_t end = goclGroupEnd(); /* always close the group */
  if (call_ok(t, &c, rc == goclSuccess ? end : rc)) {
    check_inputs(t, &c, "recvbuff", recv, count, prev, 0);
    check_inputs(t, &c, "sendbuff changed:", send, count, t->rank, 0);
  }
  free(recv);
  free(send);
}

static void test_data_movement(ctx_t* t) {
  for (size_t d = 0; d < NDTYPES; d++) {
    const dtype_t* dt = &dtypes[d];
    for (size_t k = 0; k < ncounts_for(dt, 1); k++) {
      size_t count = count_at(k);
      for (int inplace = 0; inplace <= 1; inplace++) {
        for (int root = 0; root < t->nranks; root++) {
          t->seed++;
          test_broadcast(t, dt, count, inplace, root);
          test_gather(t, dt, count, inplace, root);
          test_scatter(t, dt, count, inplace, root);
        }
        t->seed++;
        test_allgather(t, dt, count, inplace);
      }
      t->seed++;
      test_alltoall(t, dt, count);
      test_sendrecv(t, dt, count);
    }
  }
}

/* ------------------------------------------------------ streams, events */

#define NQUEUED 4
#define STREAM_COUNT 65537

/* Queues NQUEUED float sums (in place or not) on s; fills bufs[k] with data
 * of seed+k. */
static goclResult_t queue_allreduces(ctx_t* t, goclStream_t s, float* send[], float* recv[], int inplace) {
  const dtype_t* dt = dtype_of(goclFloat32);
  for (int k = 0; k < NQUEUED; k++) {
    fill_input(dt, send[k], STREAM_COUNT, t->rank, 0, t->seed + k);
    void* out = inplace ? send[k] : recv[k];
    goclResult_t rc = goclAllReduce(send[k], out, STREAM_COUNT, goclFloat32, goclSum, t->comm, s);
    if (rc != goclSuccess) return rc;
  }
  return goclSuccess;
}

static void check_queued(ctx_t* t, float* out[], int inplace) {
  const dtype_t* dt = dtype_of(goclFloat32);
  case_t c = {"stream-allreduce", dt, "sum", STREAM_COUNT, inplace, -1};
  for (int k = 0; k < NQUEUED; k++) {
    ref_t ref = make_ref(dt, OP_SUM, t->nranks, STREAM_COUNT, t->seed + k);
    check_data(t, &c, "recvbuff", out[k], ref.bits, ref.mag, STREAM_COUNT);
    free_ref(&ref);
  }
}

static void test_stream(ctx_t* t) {
  float *send[NQUEUED], *recv[NQUEUED];
  goclStream_t s;
  goclEvent_t ev;
  goclResult_t rc = goclStreamCreate(&s);
  if (!check(t, rc == goclSuccess, "goclStreamCreate returned %d: %s", rc, goclGetLastError(NULL))) return;
  rc = goclEventCreate(&ev);
  if (!check(t, rc == goclSuccess, "goclEventCreate returned %d: %s", rc, goclGetLastError(NULL))) return;
  rc = goclEventQuery(ev);
  check(t, rc == goclSuccess, "goclEventQuery of a never recorded event returned %d, want 0", rc);
  for (int k = 0; k < NQUEUED; k++) {
    send[k] = xmalloc(STREAM_COUNT * sizeof(float));
    recv[k] = xmalloc(STREAM_COUNT * sizeof(float));
  }

  /* Out of place, waited for through an event. */
  rc = queue_allreduces(t, s, send, recv, 0);
  check(t, rc == goclSuccess, "queueing allreduce on a stream returned %d: %s", rc, goclGetLastError(t->comm));
  rc = goclEventRecord(ev, s);
  check(t, rc == goclSuccess, "goclEventRecord returned %d: %s", rc, goclGetLastError(NULL));
  rc = goclEventQuery(ev);
  check(t, rc == goclSuccess || rc == goclInProgress, "goclEventQuery returned %d, want 0 or 7", rc);
  rc = goclEventSynchronize(ev);
  check(t, rc == goclSuccess, "goclEventSynchronize returned %d: %s", rc, goclGetLastError(t->comm));
  check(t, goclEventQuery(ev) == goclSuccess, "goclEventQuery after goclEventSynchronize is not 0");
  check_queued(t, recv, 0);
  t->seed += NQUEUED;

  /* In place, waited for through the stream. */
  rc = queue_allreduces(t, s, send, recv, 1);
  check(t, rc == goclSuccess, "queueing allreduce on a stream returned %d: %s", rc, goclGetLastError(t->comm));
  rc = goclStreamSynchronize(s);
  check(t, rc == goclSuccess, "goclStreamSynchronize returned %d: %s", rc, goclGetLastError(t->comm));
  rc = goclStreamQuery(s);
  check(t, rc == goclSuccess, "goclStreamQuery after goclStreamSynchronize returned %d, want 0", rc);
  check_queued(t, send, 1);
  t->seed += NQUEUED;

  check(t, goclEventDestroy(ev) == goclSuccess, "goclEventDestroy failed: %s", goclGetLastError(NULL));
  check(t, goclStreamDestroy(s) == goclSuccess, "goclStreamDestroy failed: %s", goclGetLastError(NULL));
  for (int k = 0; k < NQUEUED; k++) {
    free(send[k]);
    free(recv[k]);
  }
}

/* ---------------------------------------------------- communicator calls */

static void test_info(ctx_t* t) {
  int v = -1, count = -1, rank = -1, dev = -1;
  goclResult_t async = goclInternalError;
  check(t, goclGetVersion(&v) == goclSuccess && v == GOCL_VERSION_CODE, "goclGetVersion gave %d, want %d", v,
        GOCL_VERSION_CODE);
  check(t, goclCommCount(t->comm, &count) == goclSuccess && count == t->nranks, "goclCommCount gave %d, want %d",
        count, t->nranks);
  check(t, goclCommUserRank(t->comm, &rank) == goclSuccess && rank == t->rank,
        "goclCommUserRank gave %d, want %d", rank, t->rank);
  /* All ranks share this host, so the local rank is the rank. */
  check(t, goclCommCuDevice(t->comm, &dev) == goclSuccess && dev == t->rank, "goclCommCuDevice gave %d, want %d",
        dev, t->rank);
  check(t, goclCommGetAsyncError(t->comm, &async) == goclSuccess && async == goclSuccess,
        "goclCommGetAsyncError on a healthy comm gave %d", async);
  const char* err = goclGetLastError(t->comm);
  check(t, err != NULL, "goclGetLastError returned NULL");
  for (int r = 0; r < goclNumResults; r++) {
    const char* s = goclGetErrorString((goclResult_t)r);
    int distinct = 1;
    for (int q = 0; q < r && s != NULL; q++) distinct &= strcmp(s, goclGetErrorString((goclResult_t)q)) != 0;
    check(t, s != NULL && *s != '\0' && distinct, "goclGetErrorString(%d) is \"%s\" (empty or not distinct)", r,
          s ? s : "(null)");
  }
  check(t, goclGetErrorString((goclResult_t)99) != NULL, "goclGetErrorString(99) returned NULL");
}

static void allreduce_int32(ctx_t* t, goclComm_t comm, const char* what, int value, int want) {
  int got = -1;
  goclResult_t rc = goclAllReduce(&value, &got, 1, goclInt32, goclSum, comm, NULL);
  check(t, rc == goclSuccess && got == want, "%s: allreduce returned %d (%s) with %d, want %d", what, rc,
        goclGetLastError(comm), got, want);
}

/* Even and odd ranks, each color in reverse rank order (key = nranks-rank). */
static void test_split(ctx_t* t) {
  int color = t->rank % 2, count = -1, rank = -1, want_sum = 0;
  goclComm_t sub = NULL;
  goclResult_t rc = goclCommSplit(t->comm, color, t->nranks - t->rank, &sub, NULL);
  if (!check(t, rc == goclSuccess && sub != NULL, "goclCommSplit(color %d) returned %d: %s", color, rc,
             goclGetLastError(t->comm)))
    return;
  int want_count = (t->nranks + 1 - color) / 2, want_rank = (t->nranks - 1 - t->rank) / 2;
  check(t, goclCommCount(sub, &count) == goclSuccess && count == want_count,
        "split comm: goclCommCount gave %d, want %d", count, want_count);
  check(t, goclCommUserRank(sub, &rank) == goclSuccess && rank == want_rank,
        "split comm: goclCommUserRank gave %d, want %d", rank, want_rank);
  for (int r = color; r < t->nranks; r += 2) want_sum += r + 1;
  allreduce_int32(t, sub, "split comm", t->rank + 1, want_sum);
  check(t, goclCommDestroy(sub) == goclSuccess, "goclCommDestroy(split comm) failed");

  /* The last rank opts out and gets no comm; the rest keep their order. */
  int last = t->rank == t->nranks - 1;
  sub = NULL;
  rc = goclCommSplit(t->comm, last ? GOCL_SPLIT_NOCOLOR : 7, 0, &sub, NULL);
  if (!check(t, rc == goclSuccess && (sub == NULL) == last, "goclCommSplit(%s) returned %d, comm %p: %s",
             last ? "NOCOLOR" : "7", rc, (void*)sub, goclGetLastError(t->comm)) ||
      last)
    return;
  check(t, goclCommCount(sub, &count) == goclSuccess && count == t->nranks - 1,
        "split comm without the last rank: count %d, want %d", count, t->nranks - 1);
  allreduce_int32(t, sub, "split comm without the last rank", 1, t->nranks - 1);
  check(t, goclCommDestroy(sub) == goclSuccess, "goclCommDestroy(split comm) failed");
}

/* ----------------------------------------------------------- bad inputs */

/* Expects result want and a last error on errcomm that names the argument:
 * one of the '|'-separated words, case-insensitively. */
static void expect_error(ctx_t* t, const char* what, goclResult_t got, goclResult_t want, goclResult_t want2,
                         goclComm_t errcomm, const char* words) {
  const char* msg = goclGetLastError(errcomm);
  int named = 0;
  char list[128];
  snprintf(list, sizeof list, "%s", words);
  for (char *save, *w = strtok_r(list, "|", &save); w && msg; w = strtok_r(NULL, "|", &save))
    named |= strcasestr(msg, w) != NULL;
  check(t, (got == want || got == want2) && named,
        "bad input: %s returned %d (%s), want %d; last error \"%s\"%s%s", what, got, goclGetErrorString(got), want,
        msg ? msg : "(null)", named ? "" : " does not mention any of ", named ? "" : words);
}

/* Where a failed call on a destroyed comm left its message: on the handle if
 * the library still answers for it, else on the thread. */
static goclComm_t error_comm(goclComm_t destroyed) {
  const char* msg = goclGetLastError(destroyed);
  return msg && *msg ? destroyed : NULL;
}

static void test_bad_inputs(ctx_t* t, const goclUniqueId* id) {
  const goclResult_t A = goclInvalidArgument;
  float a[8] = {0}, b[8] = {0};
  goclComm_t c = t->comm, other = NULL;
  int n = t->nranks;

  expect_error(t, "allreduce with NULL comm", goclAllReduce(a, b, 1, goclFloat, goclSum, NULL, NULL), A, A, NULL,
               "comm");
  expect_error(t, "allreduce with NULL sendbuff", goclAllReduce(NULL, b, 4, goclFloat, goclSum, c, NULL), A, A, c,
               "sendbuff|send buffer");
  expect_error(t, "allreduce with NULL recvbuff", goclAllReduce(a, NULL, 4, goclFloat, goclSum, c, NULL), A, A, c,
               "recvbuff|receive buffer|recv buffer");
  expect_error(t, "allreduce with datatype 42", goclAllReduce(a, b, 1, (goclDataType_t)42, goclSum, c, NULL), A,
               A, c, "datatype|data type|dtype");
  expect_error(t, "allreduce with op 42", goclAllReduce(a, b, 1, goclFloat, (goclRedOp_t)42, c, NULL), A, A, c,
               "op");
  expect_error(t, "allreduce with count SIZE_MAX/2",
               goclAllReduce(a, b, SIZE_MAX / 2, goclFloat, goclSum, c, NULL), A, A, c, "count");
  for (int i = 0; i < 2; i++) {
    int root = i ? n : -1;
    char what[64];
    snprintf(what, sizeof what, "broadcast with root %d", root);
    expect_error(t, what, goclBroadcast(a, b, 1, goclFloat, root, c, NULL), A, A, c, "root");
    snprintf(what, sizeof what, "reduce with root %d", root);
    expect_error(t, what, goclReduce(a, b, 1, goclFloat, goclSum, root, c, NULL), A, A, c, "root");
    snprintf(what, sizeof what, "gather with root %d", root);
    expect_error(t, what, goclGather(a, b, 1, goclFloat, root, c, NULL), A, A, c, "root");
    snprintf(what, sizeof what, "scatter with root %d", root);
    expect_error(t, what, goclScatter(a, b, 1, goclFloat, root, c, NULL), A, A, c, "root");
  }
  expect_error(t, "send to peer nranks", goclSend(a, 1, goclFloat, n, c, NULL), A, A, c, "peer");
  expect_error(t, "recv from peer -1", goclRecv(b, 1, goclFloat, -1, c, NULL), A, A, c, "peer");
  expect_error(t, "alltoall in place", goclAlltoAll(a, a, 1, goclFloat, c, NULL), A, A, c,
               "in place|in-place|inplace");
  expect_error(t, "goclGetUniqueId(NULL)", goclGetUniqueId(NULL), A, A, NULL, "uniqueId|unique id|unique_id");
  expect_error(t, "goclCommInitRank with NULL comm pointer", goclCommInitRank(NULL, n, *id, t->rank), A, A, NULL,
               "comm");
  expect_error(t, "goclCommInitRank with nranks 0", goclCommInitRank(&other, 0, *id, 0), A, A, NULL, "nranks");
  expect_error(t, "goclCommInitRank with nranks -1", goclCommInitRank(&other, -1, *id, 0), A, A, NULL, "nranks");
  expect_error(t, "goclCommInitRank with rank nranks", goclCommInitRank(&other, n, *id, n), A, A, NULL, "rank");
  expect_error(t, "goclCommInitRank with rank -1", goclCommInitRank(&other, n, *id, -1), A, A, NULL, "rank");

  /* Zero elements need no buffers. */
  goclResult_t rc = goclAllReduce(NULL, NULL, 0, goclFloat, goclSum, c, NULL);
  check(t, rc == goclSuccess, "allreduce of 0 elements with NULL buffers returned %d: %s", rc,
        goclGetLastError(c));

  /* A destroyed comm is refused, not dereferenced. */
  rc = goclCommSplit(c, 0, t->rank, &other, NULL);
  if (check(t, rc == goclSuccess, "goclCommSplit(0) returned %d: %s", rc, goclGetLastError(c))) {
    check(t, goclCommDestroy(other) == goclSuccess, "goclCommDestroy failed: %s", goclGetLastError(NULL));
    rc = goclAllReduce(a, b, 1, goclFloat, goclSum, other, NULL);
    expect_error(t, "allreduce on a destroyed comm", rc, A, goclInvalidUsage, error_comm(other),
                 "destroy|comm|freed");
    int count;
    rc = goclCommCount(other, &count);
    expect_error(t, "goclCommCount on a destroyed comm", rc, A, goclInvalidUsage, error_comm(other),
                 "destroy|comm|freed");
  }

  /* None of the above may have hurt the comm. */
  allreduce_int32(t, c, "after the bad inputs", 1, n);
  goclResult_t async = goclInternalError;
  check(t, goclCommGetAsyncError(c, &async) == goclSuccess && async == goclSuccess,
        "goclCommGetAsyncError after the bad inputs gave %d", async);
}

/* ------------------------------------------------------------- dead peer */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Whether msg says "rank <k>" (also "rank=k", "rank: k", "rank #k"). */
static int mentions_rank(const char* msg, int k) {
  for (const char* p = msg; p && (p = strcasestr(p, "rank")) != NULL;) {
    p += 4;
    p += strspn(p, " =:#");
    char* end;
    long v = strtol(p, &end, 10);
    if (end != p && v == k) return 1;
  }
  return 0;
}

#define DEAD_PEER_TIMEOUT_S "20" /* GOCL_TIMEOUT given to the ranks in this mode */
#define DEAD_PEER_BOUND_S 30.0  /* how long the failing allreduce may take */

static void test_dead_peer(ctx_t* t, int victim) {
  if (t->rank == victim) {
    /* Give the others time to finish their init, then vanish without a word. */
    sleep(2);
    _exit(0);
  }
  static float buf[1024];
  double t0 = now_s();
  goclResult_t rc = goclAllReduce(buf, buf, 1024, goclFloat, goclSum, t->comm, NULL);
  double elapsed = now_s() - t0;
  const char* msg = goclGetLastError(t->comm);
  char copy[1024];
  snprintf(copy, sizeof copy, "%s", msg ? msg : "(null)");
  printf("rank %d: allreduce with rank %d dead returned %d after %.2f s: %s\n", t->rank, victim, rc, elapsed, copy);
  check(t, rc == goclRemoteError || rc == goclSystemError || rc == goclTimeout,
        "dead peer: allreduce returned %d (%s), want 6, 2 or 8", rc, goclGetErrorString(rc));
  check(t, elapsed <= DEAD_PEER_BOUND_S, "dead peer: allreduce took %.1f s", elapsed);
  check(t, mentions_rank(copy, victim), "dead peer: last error \"%s\" does not name rank %d", copy, victim);
  goclResult_t async = goclSuccess;
  check(t, goclCommGetAsyncError(t->comm, &async) == goclSuccess && async != goclSuccess,
        "dead peer: goclCommGetAsyncError gave %d, want an error", async);
  /* The header promises the string lives until the next failing call, and
   * goclCommGetAsyncError succeeded. */
  check(t, msg != NULL && strcmp(msg, copy) == 0,
        "dead peer: the goclGetLastError string changed under a successful goclCommGetAsyncError: \"%.60s\"",
        msg ? msg : "(null)");

  /* The survivors shrink the failed communicator, agreeing on who is gone
   * (a NULL list). */
  int want_rank = t->rank - (t->rank > victim);
  goclComm_t agreed = NULL, same = NULL;
  rc = goclCommShrink(t->comm, NULL, 0, &agreed, NULL, GOCL_SHRINK_DEFAULT);
  check(t, rc == goclSuccess, "shrink by agreement returned %d: %s", rc, goclGetLastError(t->comm));
  if (rc != goclSuccess) return;
  int n = 0, r = -1;
  goclCommCount(agreed, &n);
  goclCommUserRank(agreed, &r);
  check(t, n == t->nranks - 1 && r == want_rank, "shrunk: rank %d of %d, want %d of %d", r, n, want_rank,
        t->nranks - 1);
  /* Then, from that one, an explicit empty list: both all-reduce right.
   * (Not GOCL_SHRINK_ABORT here: its revoke may end a peer's tail of the
   * all-reduce just done, as it is meant to.) */
  float sum = (float)((t->nranks - 1) * (t->nranks - 2) / 2);
  for (int k = 0; k < 2; k++) {
    goclComm_t c = agreed;
    if (k == 1) {
      int none[1] = {0};
      rc = goclCommShrink(agreed, none, 0, &same, NULL, GOCL_SHRINK_DEFAULT);
      check(t, rc == goclSuccess, "shrink excluding nobody returned %d: %s", rc, goclGetLastError(agreed));
      if (rc != goclSuccess) break;
      c = same;
    }
    for (int i = 0; i < 1024; i++) buf[i] = (float)want_rank;
    goclResult_t arc = goclAllReduce(buf, buf, 1024, goclFloat, goclSum, c, NULL);
    check(t, arc == goclSuccess && buf[0] == sum && buf[1023] == sum, "all_reduce on shrunk comm %d: rc %d, %g want %g",
          k, arc, buf[0], sum);
  }
  int bad[1] = {want_rank};
  goclComm_t nope = NULL;
  check(t, goclCommShrink(agreed, bad, 1, &nope, NULL, GOCL_SHRINK_DEFAULT) == goclInvalidArgument,
        "shrink excluding itself must be an invalid argument");
  if (same) goclCommDestroy(same);
  goclCommDestroy(agreed);
}

/* ----------------------------------------------------------------- main */

typedef struct {
  int nranks;
  int kill_rank; /* -1: normal mode */
  double timeout_s;
} opts_t;

static void usage(const char* argv0) {
  fprintf(stderr, "usage: %s [-n nranks] [-T seconds] [--kill-rank r]\n", argv0);
  exit(2);
}

static opts_t parse_opts(int argc, char** argv) {
  static const struct option longopts[] = {{"kill-rank", required_argument, NULL, 'k'}, {NULL, 0, NULL, 0}};
  opts_t o = {2, -1, 600};
  int ch;
  while ((ch = getopt_long(argc, argv, "n:T:", longopts, NULL)) != -1) {
    switch (ch) {
      case 'n': o.nranks = atoi(optarg); break;
      case 'T': o.timeout_s = atof(optarg); break;
      case 'k': o.kill_rank = atoi(optarg); break;
      default: usage(argv[0]);
    }
  }
  if (optind != argc || o.nranks < 1 || o.timeout_s <= 0 || o.kill_rank >= o.nranks ||
      (o.kill_rank >= 0 && o.nranks < 2) || o.kill_rank < -1)
    usage(argv[0]);
  return o;
}

static int rank_main(const launch_child_t* lc, const opts_t* o) {
  ctx_t t = {NULL, lc->rank, lc->nranks, 0, 0, 0};
  goclResult_t rc = goclCommInitRank(&t.comm, lc->nranks, lc->id, lc->rank);
  if (check(&t, rc == goclSuccess, "goclCommInitRank returned %d (%s): %s", rc,
            goclGetErrorString(rc), goclGetLastError(NULL))) {
    if (o->kill_rank >= 0) {
      test_dead_peer(&t, o->kill_rank);
    } else {
      test_info(&t);
      test_reductions(&t);
      test_data_movement(&t);
      test_stream(&t);
      test_split(&t);
      test_bad_inputs(&t, &lc->id);
    }
    rc = goclCommDestroy(t.comm);
    if (o->kill_rank < 0) check(&t, rc == goclSuccess, "goclCommDestroy returned %d: %s", rc, goclGetLastError(NULL));
  }
  printf("rank %d: %ld checks passed, %ld failed\n", t.rank, t.passed, t.failed);
  launch_report("result %d %ld %ld", t.rank, t.passed, t.failed);
  return t.failed ? 1 : 0;
}

/* Sums the ranks' result lines; a rank that should have reported and did
 * not counts as one failure. */
static void sum_reports(const char* reports, const opts_t* o, long* passed, long* failed) {
  char* seen = calloc((size_t)o->nranks, 1);
  const char* p = reports;
  int rank, used;
  long ps, fs;
  while (sscanf(p, "result %d %ld %ld\n%n", &rank, &ps, &fs, &used) == 3) {
    if (rank >= 0 && rank < o->nranks) seen[rank] = 1;
    *passed += ps;
    *failed += fs;
    p += used;
  }
  for (int r = 0; r < o->nranks; r++) {
    if (seen[r] || r == o->kill_rank) continue;
    printf("rank %d: FAIL no result reported (crashed or killed)\n", r);
    (*failed)++;
  }
  free(seen);
}

int main(int argc, char** argv) {
  opts_t o = parse_opts(argc, argv);
  launch_child_t lc;
  if (launch_child(&lc)) return rank_main(&lc, &o);

  static const char* const dead_peer_env[] = {"GOCL_TIMEOUT=" DEAD_PEER_TIMEOUT_S, NULL};
  char* reports = NULL;
  int bad = launch_run(o.nranks, argv, o.kill_rank >= 0 ? dead_peer_env : NULL, o.timeout_s, &reports);
  if (bad < 0) return 1;
  long passed = 0, failed = 0;
  sum_reports(reports, &o, &passed, &failed);
  free(reports);
  printf("%ld passed, %ld failed\n", passed, failed);
  return failed > 0 || bad > 0;
}
