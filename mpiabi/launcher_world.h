/*
 * launcher_world.h — the launcher's world, read in C for gocl's MPI ABI
 * library (launcher_world.c). The rules are python/gocl/world.py's; the
 * spec both readers are tested against is tests/testdata/launcher_worlds.json.
 */
#ifndef GOCL_LAUNCHER_WORLD_H
#define GOCL_LAUNCHER_WORLD_H

#include <stddef.h>

typedef struct {
  long long rank, size;
  long long local_rank;
  long long local_size; /* -1: unknown (world.py's None) */
  char addr[256];       /* rank 0's host; "": unknown (world.py's None) */
  long long port;       /* rank 0's rendezvous port */
  char source[64];      /* whose variables gave it, as world.py's World.source */
} gocl_launcher_world;

/* This process's world from its launcher's environment, as gocl.world.read:
 * 1 and *w filled; 0 when no launcher's variables are there; -1 with the
 * sentence in err (without a "who:" prefix) when they are wrong or clash.
 * hostname: this host's fully qualified name for a Kubernetes pod (NULL:
 * looked up, as Python's socket.getfqdn()); the tests pass the table's. */
int gocl_launcher_world_read(const char* hostname, gocl_launcher_world* w, char* err, size_t errlen);

#endif
