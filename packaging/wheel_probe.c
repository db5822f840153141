/* A wheel's libgocl.so, loaded the way a C program would on the wheel's
 * architecture (tests/python/test_wheels.py runs it under qemu-user for the
 * aarch64 wheel): prints goclGetVersion, then a 2-rank all-reduce inside one
 * process (goclCommInitAll, one group) checked element by element. */
#include <stdio.h>

#include "gocl.h"

#define N 1000

static int check(goclResult_t rc, const char* what) {
  if (rc != goclSuccess) fprintf(stderr, "%s: %s\n", what, goclGetErrorString(rc));
  return rc != goclSuccess;
}

int main(void) {
  int version = 0;
  if (check(goclGetVersion(&version), "goclGetVersion")) return 1;
  printf("version %d\n", version);
  goclComm_t comms[2];
  if (check(goclCommInitAll(comms, 2, NULL), "goclCommInitAll")) return 1;
  static float buf[2][N];
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < N; i++) buf[r][i] = (float)(i * (r + 1));
  if (check(goclGroupStart(), "goclGroupStart")) return 1;
  for (int r = 0; r < 2; r++)
    if (check(goclAllReduce(buf[r], buf[r], N, goclFloat32, goclSum, comms[r], NULL), "goclAllReduce")) return 1;
  if (check(goclGroupEnd(), "goclGroupEnd")) return 1;
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < N; i++)
      if (buf[r][i] != (float)(3 * i)) {
        fprintf(stderr, "rank %d element %d: %g, want %g\n", r, i, buf[r][i], (double)(3 * i));
        return 1;
      }
  for (int r = 0; r < 2; r++)
    if (check(goclCommDestroy(comms[r]), "goclCommDestroy")) return 1;
  printf("allreduce ok\n");
  return 0;
}
