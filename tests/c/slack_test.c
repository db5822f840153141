/* slack_test.c — a C program linked against libgocl at start-up: the Go
 * runtime's own threads (present once the library has loaded: its first
 * thread, sysmon...) get 1 ms of timer slack (capi/gocl.c's constructors), and
 * the thread that loaded the library keeps the slack it was started with (exec
 * keeps a thread's slack, so that is the parent's), also after calls.
 *
 *   gcc -O2 -I build/include tests/c/slack_test.c -L build -lgocl -Wl,-rpath,'$ORIGIN' -o build/slack_test
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "gocl.h"

static long slack(long tid) { /* only /proc/TID has it, not /proc/PID/task/TID */
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/timerslack_ns", tid);
  FILE* f = fopen(path, "r");
  long v = -1;
  if (f) {
    if (fscanf(f, "%ld", &v) != 1) v = -1;
    fclose(f);
  }
  return v;
}

int main(void) {
  long pid = getpid(), parent = slack(getppid());
  struct timespec settle = {0, 200 * 1000 * 1000}; /* the runtime's first thread starts sysmon */
  nanosleep(&settle, NULL);
  int failed = 0, go = 0;
  DIR* d = opendir("/proc/self/task");
  struct dirent* e;
  while (d && (e = readdir(d))) {
    long tid = atol(e->d_name);
    if (tid <= 0 || tid == pid) continue;
    go++;
    if (slack(tid) != 1000000) {
      fprintf(stderr, "slack_test: Go thread %ld has slack %ld, want 1000000\n", tid, slack(tid));
      failed++;
    }
  }
  if (d) closedir(d);
  if (go < 2) {
    fprintf(stderr, "slack_test: only %d other threads\n", go);
    failed++;
  }
  goclComm_t comm;
  if (goclCommInitAll(&comm, 1, NULL) != goclSuccess) {
    fprintf(stderr, "init: %s\n", goclGetLastError(NULL));
    return 1;
  }
  float x = 1;
  goclAllReduce(&x, &x, 1, goclFloat32, goclSum, comm, NULL);
  goclCommDestroy(comm);
  long mine = slack(pid);
  if (parent <= 0 || mine != parent) {
    fprintf(stderr, "slack_test: the loading thread's slack is %ld, its parent's %ld\n", mine, parent);
    failed++;
  }
  printf("%d passed, %d failed\n", failed ? 0 : 2, failed);
  return failed ? 1 : 0;
}
