/*
 * capi_floor.c — capi-floor: the C API's cheapest call, goclGetVersion,
 * timed. It goes from C into Go and back and does nothing else there (the
 * panic guard and one store), so its time is what any C API call pays for
 * crossing into the Go runtime. bench/compare.py prints it beside the
 * 8-byte allreduce's C API overhead, which cannot be smaller.
 *
 *   capi-floor [CALLS]     prints the mean ns per call of CALLS (2000000)
 *
 * Built by the Makefile (make build/capi-floor) against build/libgocl.so.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gocl.h"

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char** argv) {
  long calls = argc > 1 ? atol(argv[1]) : 2000000;
  if (calls <= 0) {
    fprintf(stderr, "capi-floor: CALLS must be a positive number, not %s\n", argv[1]);
    return 2;
  }
  int v = 0;
  for (long i = 0; i < calls / 10 + 1; i++) { /* warm-up: binds this thread to a Go M */
    if (goclGetVersion(&v) != goclSuccess) {
      fprintf(stderr, "capi-floor: goclGetVersion failed: %s\n", goclGetLastError(NULL));
      return 1;
    }
  }
  double t0 = now_ns();
  for (long i = 0; i < calls; i++) goclGetVersion(&v);
  printf("%.1f\n", (now_ns() - t0) / (double)calls);
  return 0;
}
