/*
 * launcher_world.c — where a rank of gocl's MPI ABI library learns its
 * world: the launcher's environment, read as python/gocl/world.py reads it
 * (the same launchers, the same precedence, the same rank 0 address and
 * port), in C because the library runs inside programs (JAX through
 * MPItrampoline) that never import gocl's Python.
 *
 * THE SPEC IS THE TABLE tests/testdata/launcher_worlds.json (environment in,
 * world or error out): tests/python/test_world.py runs every case through
 * world.read and through this reader (gocl_mpiabi_launcher_world, via
 * tests/c/mpiabi_test.c --world), so the two cannot drift. A rule changed
 * here or in world.py is changed in both and gets its case in the table.
 *
 * Nearest launcher first:
 *  1. RANK/WORLD_SIZE (gocl run, torchrun; LOCAL_RANK, LOCAL_WORLD_SIZE);
 *  2. MPI: Open MPI/PMIx (OMPI_COMM_WORLD_RANK or PMIX_RANK,
 *     OMPI_COMM_WORLD_SIZE; rank 0's host from OMPI_MCA_orte_hnp_uri or
 *     PMIX_SERVER_URI41/4, the port derived from the job) and MPICH/Hydra
 *     (PMI_RANK, PMI_SIZE; the host from PMI_PORT);
 *  3. Slurm srun tasks (SLURM_PROCID with a SLURM_STEP_ID; rank 0's host the
 *     first of SLURM_STEP_NODELIST, host lists such as node[01-03,07]
 *     expanded as Slurm does; the port derived from the job and step);
 *  4. Kubernetes Indexed Jobs (JOB_COMPLETION_INDEX, WORLD_SIZE or
 *     GOCL_WORLD_SIZE; rank 0's host this pod's name with index 0).
 * MASTER_ADDR, GOCL_MASTER_PORT and MASTER_PORT win over what a scheduler
 * implies; a RANK that clashes with a scheduler's rank (no GROUP_RANK: no
 * per-node launcher in between) is an error naming both.
 */
#define _GNU_SOURCE
#include "launcher_world.h"

#include <ctype.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DEFAULT_PORT 29500

typedef struct {
  char* err;
  size_t errlen;
} ctx;

static int say(ctx* c, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static int say(ctx* c, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, c->errlen, fmt, ap);
  va_end(ap);
  return -1;
}

/* A value that is set and not empty (Python's `env.get(x) or ...`). */
static const char* nonempty(const char* name) {
  const char* v = getenv(name);
  return v != NULL && *v != '\0' ? v : NULL;
}

/* world.py's _int: 0 (unset or blank), 1 (*out set), -1 (not an integer). */
static int env_ll(ctx* c, const char* name, long long* out) {
  const char* raw = getenv(name);
  if (raw == NULL) return 0;
  const char* s = raw;
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) n--;
  if (n == 0) return 0;
  char buf[32];
  int ok = n < sizeof buf;
  if (ok) {
    memcpy(buf, s, n);
    buf[n] = '\0';
    const char* d = buf + (buf[0] == '+' || buf[0] == '-');
    ok = *d != '\0';
    for (const char* p = d; *p; p++) ok = ok && isdigit((unsigned char)*p);
    ok = ok && strlen(d) <= 18;
    if (ok) *out = strtoll(buf, NULL, 10);
  }
  if (!ok) return say(c, "$%s='%s' is not an integer", name, raw);
  return 1;
}

/* ---------------------------------------------------------------- hosts */

typedef struct {
  ctx* c;
  const char* spec;
  char first[256];
  int have;
} hostlist;

static int emit(hostlist* h, const char* host) {
  if (!h->have) {
    snprintf(h->first, sizeof h->first, "%s", host);
    h->have = 1;
  }
  return 0;
}

static int all_digits(const char* s, size_t n) {
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++)
    if (!isdigit((unsigned char)s[i])) return 0;
  return 1;
}

/* world.py's _expand_one: the first [...] group of item, each of its parts
 * (n or a-b, zero padding kept) substituted, the rest expanded the same way;
 * every host is visited, so malformed groups fail as in Python. */
static int expand_one(hostlist* h, const char* item) {
  const char* lb = strchr(item, '[');
  const char* rb = lb ? strchr(lb, ']') : NULL;
  if (rb == NULL) return emit(h, item);
  size_t headn = (size_t)(lb - item);
  const char* tail = rb + 1;
  size_t clen = (size_t)(rb - lb - 1);
  char* content = strndup(lb + 1, clen);
  int rc = 0;
  for (char *rest = content, *part; rc == 0 && (part = strsep(&rest, ",")) != NULL;) {
    while (isspace((unsigned char)*part)) part++;
    size_t pn = strlen(part);
    while (pn > 0 && isspace((unsigned char)part[pn - 1])) part[--pn] = '\0';
    char* dash = strchr(part, '-');
    size_t lon = dash ? (size_t)(dash - part) : pn;
    const char* hi = dash ? dash + 1 : NULL;
    if (!all_digits(part, lon) || (hi && !all_digits(hi, strlen(hi))) || lon > 18 || (hi && strlen(hi) > 18)) {
      rc = say(h->c, "host list '%s': '%s' is not a number or a range a-b", h->spec, part);
      break;
    }
    int width = part[0] == '0' ? (int)lon : 0;
    long long lo = strtoll(part, NULL, 10), top = hi ? strtoll(hi, NULL, 10) : lo;
    for (long long n = lo; rc == 0 && n <= top; n++) {
      char* next = NULL;
      if (asprintf(&next, "%.*s%0*lld%s", (int)headn, item, width, n, tail) < 0) {
        rc = say(h->c, "host list '%s': out of memory", h->spec);
        break;
      }
      rc = expand_one(h, next);
      free(next);
    }
  }
  free(content);
  return rc;
}

/* world.py's expand_hostlist, keeping only the first host ("" if none). */
static int first_host(ctx* c, const char* spec, char* out, size_t outlen) {
  hostlist h = {c, spec, "", 0};
  const char* s = spec;
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) n--;
  char* items = strndup(s, n);
  int depth = 0, rc = 0;
  for (size_t i = 0; i < n; i++) {
    if (items[i] == '[') depth++;
    else if (items[i] == ']' && --depth < 0) {
      free(items);
      return say(c, "host list '%s': a ']' without its '['", spec);
    }
    if (items[i] == ',' && depth == 0) items[i] = '\x01'; /* a top-level separator */
  }
  if (depth) {
    free(items);
    return say(c, "host list '%s': a '[' without its ']'", spec);
  }
  for (char *rest = items, *item; rc == 0 && (item = strsep(&rest, "\x01")) != NULL;) {
    while (isspace((unsigned char)*item)) item++;
    size_t in = strlen(item);
    while (in > 0 && isspace((unsigned char)item[in - 1])) item[--in] = '\0';
    if (in) rc = expand_one(&h, item);
  }
  free(items);
  if (rc == 0) snprintf(out, outlen, "%s", h.have ? h.first : "");
  return rc;
}

/* world.py's _uri_host: the first address of an Open MPI HNP URI
 * (jobid.0;tcp://10.0.0.1,192.168.1.2:45678) or a PMI_PORT (host:port). */
static int uri_class(char ch) {
  return ch != '\0' && ch != ',' && ch != ':' && ch != ']' && ch != ';' && !isspace((unsigned char)ch);
}

static void uri_host(const char* uri, char* out, size_t outlen) {
  out[0] = '\0';
  for (const char* p = strstr(uri, "tcp"); p != NULL; p = strstr(p + 1, "tcp")) {
    const char* k = p + 3;
    if ((*k == '4' || *k == '6') && strncmp(k + 1, "://", 3) == 0) k += 4;
    else if (strncmp(k, "://", 3) == 0) k += 3;
    else continue;
    if (*k == '[' && uri_class(k[1])) k++;
    size_t n = 0;
    while (uri_class(k[n])) n++;
    if (n) {
      snprintf(out, outlen, "%.*s", (int)n, k);
      return;
    }
  }
  const char* colon = strrchr(uri, ':');
  if (colon == NULL || colon == uri) return;
  if (!all_digits(colon + 1, strlen(colon + 1))) return;
  snprintf(out, outlen, "%.*s", (int)(colon - uri), uri);
}

/* world.py's _derived_port: even, in 15000-24998, from the job's digits. */
static long long derived_port(const char* token) {
  char digits[64];
  size_t n = 0, len = strlen(token);
  for (size_t i = 0; i < len; i++) {
    if (!isdigit((unsigned char)token[i])) continue;
    if (n == sizeof digits - 1) { /* keep the last ones */
      memmove(digits, digits + 1, n - 1);
      n--;
    }
    digits[n++] = token[i];
  }
  digits[n] = '\0';
  const char* last = n > 12 ? digits + n - 12 : digits;
  unsigned long long v = n ? strtoull(last, NULL, 10) : 0;
  return 15000 + 2 * (long long)(v % 5000);
}

/* ------------------------------------------------------------- launchers */

static void set_world(gocl_launcher_world* w, long long rank, long long size, long long local_rank,
                      long long local_size, const char* addr, long long port, const char* source) {
  w->rank = rank;
  w->size = size;
  w->local_rank = local_rank;
  w->local_size = local_size;
  snprintf(w->addr, sizeof w->addr, "%s", addr ? addr : "");
  w->port = port;
  snprintf(w->source, sizeof w->source, "%s", source);
}

/* A scheduler's rank variable that is set (present) but blank. */
static int blank_rank(ctx* c, const char* name) {
  return say(c, "$%s is set but empty: it should be this process's rank", name);
}

static int per_rank(ctx* c, gocl_launcher_world* w) {
  long long rank, size, local = 0, lsize = -1;
  int r = env_ll(c, "RANK", &rank);
  if (r <= 0) return r;
  if ((r = env_ll(c, "WORLD_SIZE", &size)) < 0) return -1;
  if (r == 0) return say(c, "$RANK is set but $WORLD_SIZE is not: set both, as torchrun and `gocl run` do");
  if (size < 1 || rank < 0 || rank >= size) return say(c, "RANK=%lld is not in [0, WORLD_SIZE=%lld)", rank, size);
  if ((r = env_ll(c, "LOCAL_RANK", &local)) < 0) return -1;
  if (r == 0) local = rank;
  if (env_ll(c, "LOCAL_WORLD_SIZE", &lsize) < 0) return -1;
  set_world(w, rank, size, local, lsize, NULL, DEFAULT_PORT, "RANK/WORLD_SIZE");
  return 1;
}

static int mpi(ctx* c, gocl_launcher_world* w) {
  long long rank, size, local, lsize = -1;
  int r;
  char addr[256] = "";
  if (getenv("OMPI_COMM_WORLD_RANK") != NULL || getenv("PMIX_RANK") != NULL) {
    if ((r = env_ll(c, "OMPI_COMM_WORLD_RANK", &rank)) < 0) return -1;
    if (r == 0 && (r = env_ll(c, "PMIX_RANK", &rank)) < 0) return -1;
    if (r == 0) return blank_rank(c, getenv("PMIX_RANK") ? "PMIX_RANK" : "OMPI_COMM_WORLD_RANK");
    if ((r = env_ll(c, "OMPI_COMM_WORLD_SIZE", &size)) < 0) return -1;
    if (r == 0)
      return say(c, "PMIx gives this process rank %lld but no world size ($OMPI_COMM_WORLD_SIZE): set WORLD_SIZE", rank);
    if ((r = env_ll(c, "OMPI_COMM_WORLD_LOCAL_RANK", &local)) < 0) return -1;
    if (r == 0) local = rank;
    const char* uri = nonempty("OMPI_MCA_orte_hnp_uri");
    if (uri == NULL) uri = nonempty("PMIX_SERVER_URI41");
    if (uri == NULL) uri = nonempty("PMIX_SERVER_URI4");
    if (uri == NULL) uri = "";
    char job[256];
    const char* jobid = nonempty("OMPI_MCA_ess_base_jobid");
    if (jobid != NULL) snprintf(job, sizeof job, "%s", jobid);
    else snprintf(job, sizeof job, "%.*s", (int)strcspn(uri, ";"), uri);
    if (job[0] == '\0') snprintf(job, sizeof job, "%s", getenv("PMIX_NAMESPACE") ? getenv("PMIX_NAMESPACE") : "");
    if (env_ll(c, "OMPI_COMM_WORLD_LOCAL_SIZE", &lsize) < 0) return -1;
    if (*uri) uri_host(uri, addr, sizeof addr);
    set_world(w, rank, size, local, lsize, addr, derived_port(job), "OpenMPI");
    return 1;
  }
  if (getenv("PMI_RANK") != NULL) {
    if ((r = env_ll(c, "PMI_RANK", &rank)) < 0) return -1;
    if (r == 0) return blank_rank(c, "PMI_RANK");
    if ((r = env_ll(c, "PMI_SIZE", &size)) < 0) return -1;
    if (r == 0) return say(c, "PMI gives this process rank %lld but no $PMI_SIZE: set WORLD_SIZE", rank);
    if ((r = env_ll(c, "MPI_LOCALRANKID", &local)) < 0) return -1;
    if (r == 0) local = rank;
    const char* pmi = getenv("PMI_PORT") ? getenv("PMI_PORT") : "";
    if (env_ll(c, "MPI_LOCALNRANKS", &lsize) < 0) return -1;
    if (*pmi) uri_host(pmi, addr, sizeof addr);
    set_world(w, rank, size, local, lsize, addr, derived_port(pmi), "MPICH (PMI)");
    return 1;
  }
  return 0;
}

/* SLURM_STEP_TASKS_PER_NODE as "4" or "4(x3)": every node the same. */
static long long tasks_per_node(const char* s) {
  if (s == NULL) return -1;
  size_t n = strspn(s, "0123456789");
  if (n == 0 || n > 18) return -1;
  const char* rest = s + n;
  if (*rest != '\0') {
    if (strncmp(rest, "(x", 2) != 0) return -1;
    size_t m = strspn(rest + 2, "0123456789");
    if (m == 0 || strcmp(rest + 2 + m, ")") != 0) return -1;
  }
  return strtoll(s, NULL, 10);
}

static int slurm(ctx* c, gocl_launcher_world* w) {
  long long rank, size, local, job = 0, step = 0;
  int r;
  /* srun's tasks: a batch script has SLURM_PROCID=0 too, but no step of its own */
  if (getenv("SLURM_PROCID") == NULL || (nonempty("SLURM_STEP_ID") == NULL && nonempty("SLURM_STEPID") == NULL))
    return 0;
  if ((r = env_ll(c, "SLURM_PROCID", &rank)) < 0) return -1;
  if (r == 0) return blank_rank(c, "SLURM_PROCID");
  if ((r = env_ll(c, "SLURM_NTASKS", &size)) < 0) return -1;
  if (r == 0 && (r = env_ll(c, "SLURM_NPROCS", &size)) < 0) return -1;
  if (r == 0) return say(c, "Slurm gives this task SLURM_PROCID=%lld but no $SLURM_NTASKS: run it with srun -n N", rank);
  if ((r = env_ll(c, "SLURM_LOCALID", &local)) < 0) return -1;
  if (r == 0) local = rank;
  const char* nodes = nonempty("SLURM_STEP_NODELIST");
  if (nodes == NULL) nodes = nonempty("SLURM_JOB_NODELIST");
  if (nodes == NULL) nodes = nonempty("SLURM_NODELIST");
  char host[256] = "";
  if (nodes != NULL && first_host(c, nodes, host, sizeof host) < 0) return -1;
  long long per_node = tasks_per_node(getenv("SLURM_STEP_TASKS_PER_NODE"));
  const char* dist = getenv("SLURM_DISTRIBUTION");
  const char* hostfile = nonempty("SLURM_HOSTFILE");
  if (dist != NULL && strncmp(dist, "arbitrary", 9) == 0 && hostfile != NULL) {
    /* srun --distribution=arbitrary: task k runs on the hostfile's line k,
     * while the node list is sorted */
    FILE* f = fopen(hostfile, "r");
    char line[512];
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
      char* s = line;
      while (isspace((unsigned char)*s)) s++;
      size_t n = strlen(s);
      while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
      if (n) {
        snprintf(host, sizeof host, "%s", s);
        break;
      }
    }
    if (f != NULL) fclose(f);
  }
  /* steps of one job running at once get ports of their own, and jobs in a row too */
  if (env_ll(c, "SLURM_JOB_ID", &job) < 0 || env_ll(c, "SLURM_STEP_ID", &step) < 0) return -1;
  char token[64];
  snprintf(token, sizeof token, "%lld", job + 997 * step);
  set_world(w, rank, size, local, per_node, host, derived_port(token), "Slurm");
  return 1;
}

/* Python's socket.getfqdn(): the canonical name when it has a domain. */
static void fqdn(char* out, size_t outlen) {
  char name[256] = "";
  gethostname(name, sizeof name - 1);
  snprintf(out, outlen, "%s", name);
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_flags = AI_CANONNAME;
  hints.ai_family = AF_UNSPEC;
  if (getaddrinfo(name, NULL, &hints, &ai) == 0 && ai != NULL) {
    if (ai->ai_canonname != NULL && strchr(ai->ai_canonname, '.') != NULL) snprintf(out, outlen, "%s", ai->ai_canonname);
    freeaddrinfo(ai);
  }
}

static int kubernetes(ctx* c, const char* hostname, gocl_launcher_world* w) {
  long long rank, size = 0;
  int r;
  if (getenv("JOB_COMPLETION_INDEX") == NULL) return 0;
  if ((r = env_ll(c, "JOB_COMPLETION_INDEX", &rank)) < 0) return -1;
  if (r == 0) return blank_rank(c, "JOB_COMPLETION_INDEX");
  if ((r = env_ll(c, "GOCL_WORLD_SIZE", &size)) < 0) return -1;
  if ((r == 0 || size == 0) && (r = env_ll(c, "WORLD_SIZE", &size)) < 0) return -1;
  if (r == 0)
    return say(c, "a Kubernetes Indexed Job gives this pod index %lld (JOB_COMPLETION_INDEX) but not the number of "
               "pods: set WORLD_SIZE (or GOCL_WORLD_SIZE) in the pod spec to the Job's completions", rank);
  char name[512];
  if (hostname != NULL) snprintf(name, sizeof name, "%s", hostname);
  else fqdn(name, sizeof name);
  /* train-3.svc -> train-0.svc: the headless service's name of index 0 */
  char addr[512] = "";
  char* dot = strchr(name, '.');
  size_t firstn = dot ? (size_t)(dot - name) : strlen(name);
  const char* dash = memrchr(name, '-', firstn);
  if (dash != NULL && all_digits(dash + 1, firstn - (size_t)(dash + 1 - name)))
    snprintf(addr, sizeof addr, "%.*s0%s", (int)(dash + 1 - name), name, dot && dot[1] ? dot : "");
  set_world(w, rank, size, 0, 1, addr, DEFAULT_PORT, "Kubernetes (JOB_COMPLETION_INDEX)");
  return 1;
}

int gocl_launcher_world_read(const char* hostname, gocl_launcher_world* out, char* err, size_t errlen) {
  ctx c = {err, errlen};
  gocl_launcher_world explicit, sched;
  err[0] = '\0';
  int have_explicit = per_rank(&c, &explicit);
  if (have_explicit < 0) return -1;
  int have_sched = mpi(&c, &sched);
  if (have_sched == 0) have_sched = slurm(&c, &sched);
  if (have_sched == 0) have_sched = kubernetes(&c, hostname, &sched);
  if (have_sched < 0) return -1;
  if (!have_explicit && !have_sched) {
    long long size;
    int r = env_ll(&c, "WORLD_SIZE", &size);
    if (r < 0) return -1;
    if (r > 0) return say(&c, "$RANK is not set but $WORLD_SIZE is (set both, as torchrun and `gocl run` do)");
    return 0;
  }
  int group = getenv("GROUP_RANK") != NULL;
  if (have_explicit && have_sched && !group && (explicit.rank != sched.rank || explicit.size != sched.size))
    return say(&c, "RANK=%lld, WORLD_SIZE=%lld are set, but %s starts this process as rank %lld of %lld: unset RANK "
               "and WORLD_SIZE (left from another run?) to take %s's world, or start the ranks with torchrun or "
               "`gocl run`, whose RANK wins", explicit.rank, explicit.size, sched.source, sched.rank, sched.size,
               sched.source);
  gocl_launcher_world w = have_explicit ? explicit : sched;
  if (have_explicit && have_sched && !group) { /* the same world twice: the scheduler knows rank 0's host */
    if (w.local_size <= 0) w.local_size = sched.local_size;
    snprintf(w.addr, sizeof w.addr, "%s", sched.addr);
    w.port = sched.port;
  }
  if (w.size < 1 || w.rank < 0 || w.rank >= w.size)
    return say(&c, "rank %lld is not in [0, %lld) (%s)", w.rank, w.size, w.source);
  const char* addr = nonempty("MASTER_ADDR");
  if (addr != NULL) snprintf(w.addr, sizeof w.addr, "%s", addr);
  long long port = 0;
  int r = env_ll(&c, "GOCL_MASTER_PORT", &port);
  if (r < 0) return -1;
  if (r == 0 || port == 0) {
    if ((r = env_ll(&c, "MASTER_PORT", &port)) < 0) return -1;
  }
  if (r > 0 && port != 0) w.port = port;
  *out = w;
  return 1;
}
