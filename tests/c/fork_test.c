/* fork_test.c — after fork() without exec, every gocl call in the child must
 * fail fast with goclInvalidUsage and a message recommending spawn, instead of
 * hanging in a Go runtime that lost its threads. The parent keeps working.
 *
 *   gcc -O2 -I build/include tests/c/fork_test.c -L build -lgocl -Wl,-rpath,'$ORIGIN' -o build/fork_test
 */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gocl.h"

static int child(goclComm_t comm) {
  alarm(10); /* a hang is the failure this test exists to catch */
  float x = 1;
  int version = 0;
  goclResult_t a = goclGetVersion(&version);
  goclResult_t b = goclAllReduce(&x, &x, 1, goclFloat32, goclSum, comm, NULL);
  const char* msg = goclGetLastError(comm);
  if (a != goclInvalidUsage || b != goclInvalidUsage || !strstr(msg, "fork") || !strstr(msg, "spawn")) {
    fprintf(stderr, "child: got %d/%d, message %s\n", a, b, msg);
    return 1;
  }
  return 0;
}

int main(void) {
  goclComm_t comm;
  if (goclCommInitAll(&comm, 1, NULL) != goclSuccess) {
    fprintf(stderr, "init: %s\n", goclGetLastError(NULL));
    return 1;
  }
  float x = 2;
  pid_t pid = fork();
  if (pid == 0) _exit(child(comm));
  int status = 0;
  waitpid(pid, &status, 0);
  int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!ok) fprintf(stderr, "fork_test: child failed (status %#x)\n", status);
  /* The parent is unaffected. */
  if (goclAllReduce(&x, &x, 1, goclFloat32, goclSum, comm, NULL) != goclSuccess || x != 2) {
    fprintf(stderr, "fork_test: parent allreduce failed: %s\n", goclGetLastError(comm));
    ok = 0;
  }
  goclCommDestroy(comm);
  printf("%d passed, %d failed\n", ok ? 2 : 0, ok ? 0 : 1);
  return ok ? 0 : 1;
}
