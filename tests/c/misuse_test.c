/* misuse_test.c — the C API's edge cases of issue 39, on ranks of one
 * process (goclCommInitAll, a thread per rank):
 *   - every collective's in-place and alias forms (the NCCL in-place offsets
 *     and sendbuff == recvbuff) give the reference result, or are refused
 *     with the rule (alltoall in place), on 2 and 3 ranks and every root;
 *   - goclGetLastError read from many threads while others fail calls on the
 *     same comm: every string read is a whole, expected message and stays
 *     so.
 *
 *   build/misuse_test      (capi's Go test TestMisuseC builds and runs it)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gocl.h"

static int failed, passed;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

#define CHECK(cond, ...)                                       \
  do {                                                         \
    pthread_mutex_lock(&mu);                                   \
    if (cond) {                                                \
      passed++;                                                \
    } else {                                                   \
      failed++;                                                \
      fprintf(stderr, "misuse_test:%d: FAILED: ", __LINE__);   \
      fprintf(stderr, __VA_ARGS__);                            \
      fprintf(stderr, "\n");                                   \
    }                                                          \
    pthread_mutex_unlock(&mu);                                 \
  } while (0)

enum { COUNT = 5, MAXR = 4 };

typedef enum { ALLREDUCE, BROADCAST, REDUCE, ALLGATHER, REDUCESCATTER, GATHER, SCATTER, ALLTOALL, NCOLL } coll_t;
static const char* coll_names[NCOLL] = {"allreduce", "broadcast", "reduce", "allgather",
                                        "reducescatter", "gather", "scatter", "alltoall"};

/* Where sendbuff sits relative to recvbuff (or recvbuff to sendbuff). */
typedef enum { SEPARATE, SAME, NCCL_INPLACE, NFORM } form_t;
static const char* form_names[NFORM] = {"separate", "sendbuff == recvbuff", "NCCL in-place offset"};

static goclComm_t comms[MAXR];
static int nranks;

/* Rank r's input element i. */
static float in(int r, int i) { return (float)(100 * (r + 1) + i); }

typedef struct {
  coll_t coll;
  form_t form;
  int rank, root;
  goclResult_t rc;
  float got[MAXR * COUNT];
  int ngot;
} job_t;

/* Sizes (elements) of the send and recv buffers of coll. */
static void sizes(coll_t c, int* s, int* r) {
  int n = nranks;
  switch (c) {
    case ALLGATHER: case GATHER: *s = COUNT; *r = n * COUNT; return;
    case REDUCESCATTER: case SCATTER: *s = n * COUNT; *r = COUNT; return;
    case ALLTOALL: *s = *r = n * COUNT; return;
    default: *s = *r = COUNT; return;
  }
}

static void* run_job(void* arg) {
  job_t* j = arg;
  int ns, nr, r = j->rank;
  sizes(j->coll, &ns, &nr);
  /* One arena that holds both buffers; the form places them. */
  float* arena = calloc(2 * MAXR * COUNT, sizeof(float));
  float *send, *recv;
  int big_is_send = ns > nr;
  switch (j->form) {
    case SEPARATE: send = arena; recv = arena + MAXR * COUNT; break;
    case SAME: send = recv = arena; break;
    default: /* NCCL's rule: the small buffer at the big one + rank*count (root's rank for gather) */
      if (ns == nr) { send = recv = arena; break; }
      {
        int at = (j->coll == GATHER ? j->root : r) * COUNT;
        if (big_is_send) { send = arena; recv = arena + at; } else { recv = arena; send = arena + at; }
      }
  }
  /* The inputs (in the in-place forms they lie inside recvbuff). */
  for (int i = 0; i < ns; i++) send[i] = in(r, i);
  goclComm_t c = comms[r];
  switch (j->coll) {
    case ALLREDUCE: j->rc = goclAllReduce(send, recv, COUNT, goclFloat, goclSum, c, NULL); break;
    case BROADCAST: j->rc = goclBroadcast(send, recv, COUNT, goclFloat, j->root, c, NULL); break;
    case REDUCE: j->rc = goclReduce(send, recv, COUNT, goclFloat, goclSum, j->root, c, NULL); break;
    case ALLGATHER: j->rc = goclAllGather(send, recv, COUNT, goclFloat, c, NULL); break;
    case REDUCESCATTER: j->rc = goclReduceScatter(send, recv, COUNT, goclFloat, goclSum, c, NULL); break;
    case GATHER: j->rc = goclGather(send, recv, COUNT, goclFloat, j->root, c, NULL); break;
    case SCATTER: j->rc = goclScatter(send, recv, COUNT, goclFloat, j->root, c, NULL); break;
    case ALLTOALL: j->rc = goclAlltoAll(send, recv, COUNT, goclFloat, c, NULL); break;
    default: break;
  }
  j->ngot = nr;
  memcpy(j->got, recv, nr * sizeof(float));
  free(arena);
  return NULL;
}

/* The reference: element i of rank r's recvbuff. has: whether r's recvbuff
 * is defined (rooted results land at root only). */
static float want(coll_t c, int r, int root, int i, int* has) {
  int n = nranks;
  *has = 1;
  switch (c) {
    case ALLREDUCE: { float s = 0; for (int k = 0; k < n; k++) s += in(k, i); return s; }
    case REDUCE: { *has = r == root; float s = 0; for (int k = 0; k < n; k++) s += in(k, i); return s; }
    case BROADCAST: return in(root, i);
    case ALLGATHER: return in(i / COUNT, i % COUNT);
    case GATHER: *has = r == root; return in(i / COUNT, i % COUNT);
    case REDUCESCATTER: { float s = 0; for (int k = 0; k < n; k++) s += in(k, r * COUNT + i); return s; }
    case SCATTER: return in(root, r * COUNT + i);
    case ALLTOALL: return in(i / COUNT, r * COUNT + i % COUNT);
    default: return 0;
  }
}

static void test_aliases(void) {
  for (int c = 0; c < NCOLL; c++) {
    int rooted = c == BROADCAST || c == REDUCE || c == GATHER || c == SCATTER;
    for (int f = 0; f < NFORM; f++) {
      for (int root = 0; root < (rooted ? nranks : 1); root++) {
        job_t jobs[MAXR];
        pthread_t th[MAXR];
        for (int r = 0; r < nranks; r++) {
          memset(&jobs[r], 0, sizeof jobs[r]);
          jobs[r].coll = c, jobs[r].form = f, jobs[r].rank = r, jobs[r].root = root;
          pthread_create(&th[r], NULL, run_job, &jobs[r]);
        }
        for (int r = 0; r < nranks; r++) pthread_join(th[r], NULL);
        if (c == ALLTOALL && f != SEPARATE) {
          /* refused on every rank, naming the rule */
          for (int r = 0; r < nranks; r++) {
            const char* e = goclGetLastError(comms[r]);
            CHECK(jobs[r].rc == goclInvalidArgument && strstr(e, "cannot run in place"),
                  "%d ranks: alltoall with %s on rank %d: want goclInvalidArgument naming the rule, got %d: %s",
                  nranks, form_names[f], r, jobs[r].rc, e);
          }
          continue;
        }
        for (int r = 0; r < nranks; r++) {
          job_t* j = &jobs[r];
          if (j->rc != goclSuccess) {
            CHECK(0, "%d ranks: %s (%s, root %d) on rank %d failed: %s", nranks, coll_names[c], form_names[f], root,
                  r, goclGetLastError(comms[r]));
            continue;
          }
          int ok = 1, bad = -1, has;
          float w = 0;
          for (int i = 0; i < j->ngot && ok; i++) {
            w = want(c, r, root, i, &has);
            if (has && j->got[i] != w) ok = 0, bad = i;
          }
          CHECK(ok, "%d ranks: %s (%s, root %d) on rank %d: element %d is %g, want %g", nranks, coll_names[c],
                form_names[f], root, r, bad, ok ? 0 : j->got[bad], w);
        }
      }
    }
  }
}

/* ---- goclGetLastError from many threads */

enum { THREADS = 8, ROUNDS = 3000 };
static volatile int stop;

static int expected(const char* s) {
  return s && s[0] && strstr(s, "allreduce on rank 0: datatype ") && strstr(s, "is not a gocl datatype");
}

static void* fail_and_read(void* arg) {
  int t = (int)(long)arg, bad = 0;
  char copy[1024];
  float x = 0;
  for (int i = 0; i < ROUNDS && !bad; i++) {
    /* a bad datatype fails at once, with a message that differs by thread
     * and round (the comm stays usable) */
    goclResult_t rc = goclAllReduce(&x, &x, 1, (goclDataType_t)(1000 + t * 7 + i % 5), goclSum, comms[0], NULL);
    const char* s = goclGetLastError(comms[0]);
    if (rc != goclInvalidArgument || !expected(s)) {
      CHECK(0, "thread %d round %d: rc %d, last error \"%s\"", t, i, rc, s ? s : "(null)");
      bad = 1;
      break;
    }
    snprintf(copy, sizeof copy, "%s", s);
    for (int k = 0; k < 50; k++) { /* others fail meanwhile: the string must stay whole */
      if (strcmp(copy, s) != 0) {
        CHECK(0, "thread %d round %d: the last error changed under the reader: \"%s\" became \"%.200s\"", t, i, copy, s);
        bad = 1;
        break;
      }
    }
    const char* own = goclGetLastError(NULL);
    if (!expected(own)) {
      CHECK(0, "thread %d: the thread's last error is \"%s\"", t, own);
      bad = 1;
    }
  }
  if (!bad) CHECK(1, "%s", "");
  return NULL;
}

static void test_last_error_threads(void) {
  pthread_t th[THREADS];
  for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, fail_and_read, (void*)t);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
}

int main(void) {
  for (nranks = 2; nranks <= 3; nranks++) {
    if (goclCommInitAll(comms, nranks, NULL) != goclSuccess) {
      fprintf(stderr, "misuse_test: goclCommInitAll(%d): %s\n", nranks, goclGetLastError(NULL));
      return 1;
    }
    test_aliases();
    if (nranks == 2) test_last_error_threads();
    for (int r = 0; r < nranks; r++) goclCommDestroy(comms[r]);
  }
  printf("misuse_test: %d passed, %d failed\n", passed, failed);
  return failed != 0;
}
