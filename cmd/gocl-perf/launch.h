/*
 * launch.h — start N ranks of a gocl test program as processes, without MPI.
 *
 * The program run by the user is the parent. launch_run makes a unique id
 * (which starts gocl's rendezvous service in the parent, so the parent stays
 * alive until the ranks finish), then posix_spawns N copies of itself with
 * GOCL_TEST_ID=<hex of the 128-byte id>, GOCL_TEST_RANK and GOCL_TEST_NRANKS.
 * Each copy sees launch_child() succeed and joins with goclCommInitRank.
 * posix_spawn, never fork: a forked Go runtime cannot run.
 */
#ifndef GOCL_TEST_LAUNCH_H_
#define GOCL_TEST_LAUNCH_H_

#include "gocl.h"

typedef struct {
  int rank;
  int nranks;
  goclUniqueId id;
} launch_child_t;

/* Returns 1 and fills *c in a rank started by launch_run, 0 in the parent.
 * Exits with status 2 if the GOCL_TEST_* variables are malformed. */
int launch_child(launch_child_t* c);

/* Parent: starts nranks copies of this executable with argv, each with the
 * GOCL_TEST_* variables plus extra_env (NULL-terminated "NAME=value" list that
 * overrides the inherited environment), and waits for them for at most
 * timeout_s seconds, then kills the rest. Prints one line per failed rank.
 * *reports (malloc'd, NUL-terminated, may be NULL if not wanted) receives the
 * lines the ranks sent with launch_report. Returns the number of ranks that
 * did not exit with status 0, or -1 if nothing could be started. */
int launch_run(int nranks, char* const argv[], const char* const extra_env[], double timeout_s,
               char** reports);

/* A rank started by `gocl run`, torchrun or the pytest plugin: reads RANK
 * and WORLD_SIZE and gets the unique id the way gocl.Communicator.from_env
 * does (the same exchange, on the wire too): rank 0 makes it
 * and serves it on MASTER_PORT (GOCL_MASTER_PORT if set) until every rank
 * has it; the others fetch it from MASTER_ADDR. With WORLD_SIZE=1 no id is
 * made. Waits at most timeout_s. Returns 1 with *c filled, 0 when RANK or
 * WORLD_SIZE is unset, -1 after printing why it failed. */
int launch_from_env(launch_child_t* c, double timeout_s);

/* Rank: sends one line (at most 512 bytes, '\n' added) to the parent. */
void launch_report(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* GOCL_TEST_LAUNCH_H_ */
