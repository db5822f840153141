/*
 * mpiabi_test.c — gocl's MPI ABI library as MPItrampoline sees it.
 *
 *   mpiabi_test LIB NAMES          dlopen LIB as MPItrampoline does (RTLD_LAZY,
 *                                  RTLD_LOCAL, RTLD_DEEPBIND) and resolve every
 *                                  symbol NAMES lists (mpiabi/mpiabi_names.txt:
 *                                  MPItrampoline's tables); check the ABI version
 *   mpiabi_test LIB NAMES --run    then, as one rank of the launcher's world
 *                                  (gocl run -n N, or alone: a world of 1), call
 *                                  what XLA's MPI collectives call, from worker
 *                                  threads, and check every result
 *   mpiabi_test LIB NAMES --world HOSTNAME
 *                                  print the launcher's world as the library
 *                                  reads it from this environment (one JSON
 *                                  line; HOSTNAME: a Kubernetes pod's name):
 *                                  test_world.py runs the cases of
 *                                  tests/testdata/launcher_worlds.json, the
 *                                  spec of both readers, through it
 *   mpiabi_test LIB NAMES --split MOD OFFSET
 *                                  as a rank of the launcher's world, split
 *                                  it as XLA would with color 0 and key
 *                                  rank % MOD + OFFSET (two JAX worlds in one
 *                                  launcher's world: MOD 2; a JAX world larger
 *                                  than it: OFFSET 1) and print the result
 *
 * Handles and constants are read from the library, as MPItrampoline does.
 * Prints "mpiabi_test: OK ..." and exits 0 when everything holds.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void* lib;
static int rank, size;

#define CHECK(cond, ...)                                         \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "mpiabi_test rank %d: FAILED: ", rank);   \
      fprintf(stderr, __VA_ARGS__);                              \
      fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);         \
      exit(1);                                                   \
    }                                                            \
  } while (0)

static void* sym(const char* name) {
  void* p = dlsym(lib, name);
  CHECK(p != NULL, "cannot resolve %s: %s", name, dlerror());
  return p;
}
#define FN(type, name) ((type)sym("MPIABI_" #name))
#define H(name) (*(uintptr_t*)sym("MPIABI_" #name))
#define I(name) (*(int*)sym("MPIABI_" #name))
#define P(name) (*(void**)sym("MPIABI_" #name))

typedef int (*allreduce_fn)(const void*, void*, int, uintptr_t, uintptr_t, uintptr_t);
typedef int (*split_fn)(uintptr_t, int, int, uintptr_t*);
typedef int (*int_fn)(uintptr_t, int*);

static void error_string(int code, char* out) {
  int len = 0;
  FN(int (*)(int, char*, int*), Error_string)(code, out, &len);
}

/* Called on a worker thread: XLA creates communicators and runs collectives there. */
static void* worker(void* arg) {
  (void)arg;
  int flag = 0, err;
  char msg[1024];
  uintptr_t world = H(COMM_WORLD), sum = H(SUM), prod = H(PROD), max = H(MAX), min = H(MIN);
  FN(int (*)(int*), Is_thread_main)(&flag);
  CHECK(flag == 1, "MPI_Is_thread_main says no on a worker thread");

  /* A sub-communicator per clique, as XLA makes them: color = the first
   * member's rank, key = the rank within. Pairs {0,1}, {2,3}, ...; a last
   * odd rank alone. */
  uintptr_t pair = 0;
  int color = rank - rank % 2, key = rank % 2;
  err = FN(split_fn, Comm_split)(world, color, key, &pair);
  error_string(err, msg);
  CHECK(err == 0 && pair != 0, "MPI_Comm_split: %s", msg);
  int prank = -1, psize = -1;
  FN(int_fn, Comm_rank)(pair, &prank);
  FN(int_fn, Comm_size)(pair, &psize);
  int want = (size % 2 == 1 && rank == size - 1) ? 1 : 2;
  CHECK(prank == key && psize == want, "split gave rank %d of %d, want %d of %d", prank, psize, key, want);

  /* float32 sum in place over the world, int16 max (reduced here), complex64 product. */
  float f[3] = {1.0f * rank, 2.0f, -1.0f * rank};
  err = FN(allreduce_fn, Allreduce)(P(IN_PLACE), f, 3, H(FLOAT), sum, world);
  error_string(err, msg);
  CHECK(err == 0, "MPI_Allreduce float: %s", msg);
  float tri = size * (size - 1) / 2.0f;
  CHECK(f[0] == tri && f[1] == 2.0f * size && f[2] == -tri, "float sum %g %g %g", f[0], f[1], f[2]);

  int16_t s[2] = {(int16_t)(rank * 3), (int16_t)-rank}, sr[2];
  err = FN(allreduce_fn, Allreduce)(s, sr, 2, H(INT16_T), max, world);
  error_string(err, msg);
  CHECK(err == 0 && sr[0] == 3 * (size - 1) && sr[1] == 0, "int16 max: %d %d (%s)", sr[0], sr[1], msg);
  err = FN(allreduce_fn, Allreduce)(s, sr, 2, H(INT16_T), min, world);
  CHECK(err == 0 && sr[0] == 0 && sr[1] == -(size - 1), "int16 min: %d %d", sr[0], sr[1]);

  float c[2] = {0.0f, 1.0f}, cr[2]; /* i^size */
  err = FN(allreduce_fn, Allreduce)(c, cr, 1, H(C_COMPLEX), prod, world);
  CHECK(err == 0, "complex prod");
  static const float ire[4] = {1, 0, -1, 0}, iim[4] = {0, 1, 0, -1};
  CHECK(fabsf(cr[0] - ire[size % 4]) < 1e-6 && fabsf(cr[1] - iim[size % 4]) < 1e-6, "i^%d = %g%+gi", size, cr[0], cr[1]);

  /* uint8 (XLA's bool) and double sums on the pair communicator. */
  uint8_t b = 1, br = 0;
  err = FN(allreduce_fn, Allreduce)(&b, &br, 1, H(UINT8_T), sum, pair);
  CHECK(err == 0 && br == want, "uint8 sum on the pair: %d", br);

  /* All-gather and reduce-scatter (XLA passes recvcounts, all equal). */
  int32_t mine[2] = {rank, 10 * rank}, all[2 * 64];
  CHECK(size <= 64, "at most 64 ranks");
  err = FN(int (*)(const void*, int, uintptr_t, void*, int, uintptr_t, uintptr_t), Allgather)(
      mine, 2, H(INT32_T), all, 2, H(INT32_T), world);
  CHECK(err == 0, "MPI_Allgather");
  for (int i = 0; i < size; i++) CHECK(all[2 * i] == i && all[2 * i + 1] == 10 * i, "allgather block %d", i);

  double in[64], out = -1;
  int counts[64];
  for (int i = 0; i < size; i++) in[i] = i + 0.5 * rank, counts[i] = 1;
  err = FN(int (*)(const void*, void*, const int*, uintptr_t, uintptr_t, uintptr_t), Reduce_scatter)(
      in, &out, counts, H(DOUBLE), sum, world);
  double rs = size * rank + 0.5 * size * (size - 1) / 2.0;
  CHECK(err == 0 && out == rs, "reduce_scatter: %g, want %g", out, rs);

  /* XLA's collective permute: Irecv from the left, Isend to the right, MPI_BYTE, tag 0. */
  uintptr_t reqs[2];
  int64_t token = 100 + rank, got = -1;
  int left = (rank + size - 1) % size, right = (rank + 1) % size;
  FN(int (*)(void*, int, uintptr_t, int, int, uintptr_t, uintptr_t*), Irecv)(&got, 8, H(BYTE), left, 0, world,
                                                                            &reqs[0]);
  FN(int (*)(const void*, int, uintptr_t, int, int, uintptr_t, uintptr_t*), Isend)(&token, 8, H(BYTE), right, 0,
                                                                                  world, &reqs[1]);
  for (int i = 0; i < 2; i++) {
    err = FN(int (*)(uintptr_t*, void*), Wait)(&reqs[i], P(STATUS_IGNORE));
    error_string(err, msg);
    CHECK(err == 0 && reqs[i] == 0, "MPI_Wait %d: %s", i, msg);
  }
  CHECK(got == 100 + left, "permute got %lld from %d", (long long)got, left);

  /* XLA's all-to-all: a ring of MPI_Sendrecv. */
  int32_t sendb[64], recvb[64];
  for (int i = 0; i < size; i++) sendb[i] = 1000 * rank + i, recvb[i] = -1;
  recvb[rank] = sendb[rank];
  for (int i = 1; i < size; i++) {
    int to = (rank + i) % size, from = (rank + size - i) % size;
    err = FN(int (*)(const void*, int, uintptr_t, int, int, void*, int, uintptr_t, int, int, uintptr_t, void*),
             Sendrecv)(&sendb[to], 4, H(BYTE), to, 0, &recvb[from], 4, H(BYTE), from, 0, world, P(STATUS_IGNORE));
    CHECK(err == 0, "MPI_Sendrecv step %d", i);
  }
  for (int i = 0; i < size; i++) CHECK(recvb[i] == 1000 * i + rank, "all-to-all block %d: %d", i, recvb[i]);

  /* A round whose keys cannot be one clique's (every rank key 5 of color 0):
   * every rank fails it with a sentence (in a world of 5 or fewer, that a JAX
   * world larger than the launcher's would ask for it; otherwise, that the
   * ranks split in different orders), and the next round works. */
  uintptr_t bad = 12345;
  err = FN(split_fn, Comm_split)(world, 0, 5, &bad);
  error_string(err, msg);
  CHECK(err != 0 && bad == 0 && strstr(msg, size <= 5 ? "larger than the launcher's" : "different orders") != NULL,
        "bad split: %d %s", err, msg);
  uintptr_t again = 0;
  err = FN(split_fn, Comm_split)(world, rank % 2, rank / 2, &again);
  error_string(err, msg);
  CHECK(err == 0 && again != 0, "split after a failed one: %s", msg);
  FN(int_fn, Comm_size)(again, &psize);
  CHECK(psize == (size - rank % 2 + 1) / 2, "split by parity: size %d", psize);
  CHECK(FN(int (*)(uintptr_t*), Comm_free)(&again) == 0, "free");

  err = FN(int (*)(uintptr_t), Barrier)(world);
  CHECK(err == 0, "MPI_Barrier");
  err = FN(int (*)(uintptr_t*), Comm_free)(&pair);
  CHECK(err == 0 && pair == 0, "MPI_Comm_free");
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: mpiabi_test LIB NAMES [--run | --world HOSTNAME | --split MOD OFFSET]\n");
    return 2;
  }
  lib = dlopen(argv[1], RTLD_LAZY | RTLD_LOCAL | RTLD_DEEPBIND);
  CHECK(lib != NULL, "dlopen %s: %s", argv[1], dlerror());
  FILE* f = fopen(argv[2], "r");
  CHECK(f != NULL, "cannot open %s", argv[2]);
  char line[256];
  int n = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    if (line[0] == '\0') continue;
    sym(line);
    n++;
  }
  fclose(f);
  CHECK(n > 600, "only %d names in %s", n, argv[2]);
  CHECK(*(int*)sym("mpiabi_version_major") == 2 && *(int*)sym("mpiabi_version_minor") >= 9,
        "MPI ABI version %d.%d: MPItrampoline 5.3 (jaxlib 0.10) needs 2.9 or later",
        *(int*)sym("mpiabi_version_major"), *(int*)sym("mpiabi_version_minor"));
  CHECK(H(COMM_WORLD) != H(COMM_NULL) && H(FLOAT) != H(DOUBLE) && I(SUCCESS) == 0, "constants");
  if (argc >= 5 && strcmp(argv[3], "--world") == 0) {
    char out[4096];
    int (*world)(const char*, char*, size_t) = (int (*)(const char*, char*, size_t))(uintptr_t)dlsym(lib, "gocl_mpiabi_launcher_world");
    CHECK(world != NULL, "cannot resolve gocl_mpiabi_launcher_world: %s", dlerror());
    int have = world(argv[4], out, sizeof out);
    printf("%s\n", out);
    return have < 0 ? 3 : 0;
  }
  if (argc >= 6 && strcmp(argv[3], "--split") == 0) {
    char msg[1024] = "";
    int provided = -1;
    int err = FN(int (*)(int*, char***, int, int*), Init_thread)(NULL, NULL, I(THREAD_FUNNELED), &provided);
    error_string(err, msg);
    CHECK(err == 0, "MPI_Init_thread: %s", msg);
    FN(int_fn, Comm_rank)(H(COMM_WORLD), &rank);
    FN(int_fn, Comm_size)(H(COMM_WORLD), &size);
    uintptr_t comm = 0;
    err = FN(split_fn, Comm_split)(H(COMM_WORLD), 0, rank % atoi(argv[4]) + atoi(argv[5]), &comm);
    error_string(err, msg);
    printf("mpiabi_test: split on rank %d of %d: %s\n", rank, size, err == 0 ? "OK" : msg);
    fflush(stdout);
    FN(int (*)(void), Finalize)();
    return 0;
  }
  if (argc < 4 || strcmp(argv[3], "--run") != 0) {
    printf("mpiabi_test: OK, resolved %d symbols\n", n);
    return 0;
  }

  char msg[1024];
  int provided = -1, err;
  err = FN(int (*)(int*, char***, int, int*), Init_thread)(NULL, NULL, I(THREAD_FUNNELED), &provided);
  error_string(err, msg);
  CHECK(err == 0, "MPI_Init_thread: %s", msg);
  CHECK(provided == I(THREAD_MULTIPLE), "provided thread level %d", provided);
  FN(int_fn, Comm_rank)(H(COMM_WORLD), &rank);
  FN(int_fn, Comm_size)(H(COMM_WORLD), &size);

  /* Every rank runs the collectives on a thread that is not main's. */
  pthread_t t;
  pthread_create(&t, NULL, worker, NULL);
  pthread_join(t, NULL);

  /* A function gocl does not provide fails with a sentence naming it. */
  err = FN(int (*)(void*, intptr_t, int, uintptr_t, uintptr_t, uintptr_t*), Win_create)(NULL, 0, 1, 0, H(COMM_WORLD),
                                                                                        NULL);
  error_string(err, msg);
  CHECK(err != 0 && strstr(msg, "MPI_Win_create is not provided by gocl's MPI ABI") != NULL, "Win_create: %d %s",
        err, msg);

  uintptr_t late = 0;
  err = FN(int (*)(uintptr_t, uintptr_t*), Comm_dup)(H(COMM_WORLD), &late);
  CHECK(err == 0 && late != 0, "MPI_Comm_dup");
  err = FN(int (*)(void), Finalize)();
  CHECK(err == 0, "MPI_Finalize");
  CHECK(FN(int (*)(uintptr_t*), Comm_free)(&late) == 0 && late == 0, "MPI_Comm_free after finalize");
  /* After MPI_Finalize (XLA frees its communicators during teardown): harmless. */
  uintptr_t c = H(COMM_WORLD);
  float x = 1.0f;
  CHECK(FN(int (*)(void), Finalize)() == 0, "a second MPI_Finalize");
  CHECK(FN(allreduce_fn, Allreduce)(P(IN_PLACE), &x, 1, H(FLOAT), H(SUM), c) == 0, "MPI_Allreduce after finalize");
  int fin = 0;
  FN(int (*)(int*), Finalized)(&fin);
  CHECK(fin == 1, "MPI_Finalized");
  printf("mpiabi_test: OK rank %d of %d\n", rank, size);
  return 0;
}
