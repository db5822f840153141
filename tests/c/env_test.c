/* env_test.c — settings made with setenv() inside the program, before a
 * communicator's init, take effect (libgocl reads libc's environment at each
 * init, not the copy Go took when the library was loaded), and a change
 * between two inits applies to the second. Also the per-communicator
 * timeout of goclCommInitRankConfig and its argument checks.
 *
 *   build/env_test            (make test-c runs it)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gocl.h"

static int failed, passed;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (cond) {                                            \
      passed++;                                            \
    } else {                                               \
      failed++;                                            \
      fprintf(stderr, "env_test:%d: FAILED: ", __LINE__);  \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
    }                                                      \
  } while (0)

static char dir[] = "/tmp/gocl-env-test-XXXXXX";

static char* slurp(const char* path) {
  static char buf[1 << 16];
  buf[0] = 0;
  FILE* f = fopen(path, "r");
  if (!f) return buf;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Two in-process ranks logging to file; returns the log's text. */
static const char* init_two_and_log(const char* file) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  setenv("GOCL_DEBUG_FILE", path, 1);
  goclComm_t comms[2];
  goclResult_t rc = goclCommInitAll(comms, 2, NULL);
  CHECK(rc == goclSuccess, "init (%s): %s", file, goclGetLastError(NULL));
  if (rc == goclSuccess) {
    goclCommDestroy(comms[0]);
    goclCommDestroy(comms[1]);
  }
  return slurp(path);
}

struct joiner {
  goclUniqueId id;
  int rank;
  goclConfig_t* config;
  goclComm_t comm;
  goclResult_t rc;
};

static void* join(void* arg) {
  struct joiner* j = arg;
  j->rc = goclCommInitRankConfig(&j->comm, 2, j->id, j->rank, j->config);
  return NULL;
}

/* Two ranks, one thread each, joined with goclCommInitRankConfig; then only
 * rank 0 calls allreduce. Returns how long it took to fail. */
static double lonely_allreduce(goclConfig_t* config, goclResult_t* rc, const char** msg) {
  struct joiner j[2];
  pthread_t th[2];
  goclUniqueId id;
  if (goclGetUniqueId(&id) != goclSuccess) {
    *rc = goclInternalError;
    *msg = goclGetLastError(NULL);
    return 0;
  }
  for (int r = 0; r < 2; r++) {
    j[r] = (struct joiner){.id = id, .rank = r, .config = config};
    pthread_create(&th[r], NULL, join, &j[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  if (j[0].rc != goclSuccess || j[1].rc != goclSuccess) {
    *rc = j[0].rc ? j[0].rc : j[1].rc;
    *msg = goclGetLastError(NULL);
    return 0;
  }
  float x[16] = {0};
  double t0 = now();
  *rc = goclAllReduce(x, x, 16, goclFloat32, goclSum, j[0].comm, NULL);
  double took = now() - t0;
  static char keep[1024];
  snprintf(keep, sizeof keep, "%s", goclGetLastError(j[0].comm));
  *msg = keep;
  goclCommAbort(j[0].comm);
  goclCommAbort(j[1].comm);
  return took;
}

int main(void) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  /* Nothing below is in the environment this process started with. */
  unsetenv("GOCL_DEBUG");
  unsetenv("NCCL_DEBUG");
  unsetenv("GOCL_P2P_DISABLE");
  unsetenv("NCCL_P2P_DISABLE");
  setenv("GOCL_TIMEOUT", "60", 1);

  setenv("GOCL_DEBUG", "INFO", 1);
  setenv("GOCL_DEBUG_SUBSYS", "INIT", 1);
  const char* log = init_two_and_log("first.log");
  CHECK(strstr(log, "GOCL INFO") && strstr(log, "via inproc"), "GOCL_DEBUG=INFO set by setenv: log was:\n%s", log);

  /* NCCL_ fallbacks set between two inits reach the next one. */
  setenv("NCCL_P2P_DISABLE", "1", 1);
  log = init_two_and_log("second.log");
  CHECK(strstr(log, "via shm") && !strstr(log, "via inproc"), "NCCL_P2P_DISABLE=1 set by setenv: log was:\n%s", log);
  setenv("NCCL_SHM_DISABLE", "1", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  log = init_two_and_log("second-b.log");
  CHECK(strstr(log, "via socket") && !strstr(log, "via shm"), "NCCL_SHM_DISABLE=1 set by setenv: log was:\n%s", log);
  unsetenv("NCCL_P2P_DISABLE");
  unsetenv("NCCL_SHM_DISABLE");

  /* Turned off again: nothing is written. */
  setenv("GOCL_DEBUG", "", 1);
  log = init_two_and_log("third.log");
  CHECK(!strstr(log, "GOCL INFO"), "GOCL_DEBUG emptied: log was:\n%s", log);

  /* GOCL_TIMEOUT set by setenv bounds the next communicator's operations. */
  goclResult_t rc;
  const char* msg;
  setenv("GOCL_TIMEOUT", "1", 1);
  double took = lonely_allreduce(NULL, &rc, &msg);
  CHECK(rc == goclTimeout && took > 0.8 && took < 10 && strstr(msg, "timed out") && strstr(msg, "rank 1"),
        "GOCL_TIMEOUT=1: rc %d after %.2f s: %s", rc, took, msg);

  /* A communicator's own timeout wins over GOCL_TIMEOUT. */
  setenv("GOCL_TIMEOUT", "60", 1);
  goclConfig_t config = GOCL_CONFIG_INITIALIZER;
  config.timeout = 1.5;
  took = lonely_allreduce(&config, &rc, &msg);
  CHECK(rc == goclTimeout && took > 1.3 && took < 10 && strstr(msg, "rank 1"),
        "config.timeout=1.5 under GOCL_TIMEOUT=60: rc %d after %.2f s: %s", rc, took, msg);

  /* Bad configs and bad settings: an error naming the field or variable. */
  goclUniqueId id;
  goclComm_t comm;
  goclConfig_t bad = GOCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  CHECK(goclGetUniqueId(&id) == goclSuccess, "unique id: %s", goclGetLastError(NULL));
  rc = goclCommInitRankConfig(&comm, 1, id, 0, &bad);
  msg = goclGetLastError(NULL);
  CHECK(rc == goclInvalidArgument && strstr(msg, "GOCL_CONFIG_INITIALIZER"), "bad magic: rc %d: %s", rc, msg);
  bad = (goclConfig_t)GOCL_CONFIG_INITIALIZER;
  bad.timeout = -5;
  rc = goclCommInitRankConfig(&comm, 1, id, 0, &bad);
  msg = goclGetLastError(NULL);
  CHECK(rc == goclInvalidArgument && strstr(msg, "config.timeout"), "negative timeout: rc %d: %s", rc, msg);
  config = (goclConfig_t)GOCL_CONFIG_INITIALIZER;
  rc = goclCommInitRankConfig(&comm, 1, id, 0, &config);
  CHECK(rc == goclSuccess, "1-rank init with the initializer: %s", goclGetLastError(NULL));
  if (rc == goclSuccess) goclCommDestroy(comm);

  setenv("GOCL_BUFFSIZE", "big", 1);
  rc = goclGetUniqueId(&id);
  msg = goclGetLastError(NULL);
  CHECK(rc == goclInvalidArgument && strstr(msg, "GOCL_BUFFSIZE"), "GOCL_BUFFSIZE=big: rc %d: %s", rc, msg);
  unsetenv("GOCL_BUFFSIZE");

  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "env_test: could not remove %s\n", dir);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
