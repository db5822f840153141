/*
 * launch.c — see launch.h. Linux only (/proc/self/exe).
 */
#define _GNU_SOURCE
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

#define ENV_ID "GOCL_TEST_ID"
#define ENV_RANK "GOCL_TEST_RANK"
#define ENV_NRANKS "GOCL_TEST_NRANKS"
#define ENV_REPORT_FD "GOCL_TEST_REPORT_FD"

/* ------------------------------------------------------------------ child */

static int env_int(const char* name, int* out) {
  const char* s = getenv(name);
  char* end;
  if (s == NULL || *s == '\0') return 0;
  long v = strtol(s, &end, 10);
  if (*end != '\0') return 0;
  *out = (int)v;
  return 1;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

static int decode_id(const char* hex, goclUniqueId* id) {
  if (strlen(hex) != 2 * GOCL_UNIQUE_ID_BYTES) return 0;
  for (int i = 0; i < GOCL_UNIQUE_ID_BYTES; i++) {
    int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return 0;
    id->internal[i] = (char)(hi << 4 | lo);
  }
  return 1;
}

int launch_child(launch_child_t* c) {
  const char* hex = getenv(ENV_ID);
  if (hex == NULL) return 0;
  if (!decode_id(hex, &c->id) || !env_int(ENV_RANK, &c->rank) || !env_int(ENV_NRANKS, &c->nranks) ||
      c->nranks <= 0 || c->rank < 0 || c->rank >= c->nranks) {
    fprintf(stderr, "launch: malformed %s/%s/%s in the environment\n", ENV_ID, ENV_RANK, ENV_NRANKS);
    exit(2);
  }
  /* Several ranks share the terminal: keep their lines whole. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  return 1;
}

void launch_report(const char* fmt, ...) {
  char line[514];
  int fd;
  if (!env_int(ENV_REPORT_FD, &fd)) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n > (int)sizeof line - 2) n = sizeof line - 2;
  line[n++] = '\n';
  /* One write below PIPE_BUF is atomic, so lines of different ranks never mix. */
  if (write(fd, line, (size_t)n) != n) perror("launch: report");
}

/* ----------------------------------------------------------------- parent */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Same variable name: compares up to and including the '='. */
static int same_name(const char* a, const char* b) {
  size_t n = strcspn(a, "=");
  return a[n] == '=' && strncmp(a, b, n + 1) == 0;
}

static int overridden(const char* var, const char* const extra_env[]) {
  if (strncmp(var, "GOCL_TEST_", 10) == 0) return 1;
  for (int i = 0; extra_env != NULL && extra_env[i] != NULL; i++)
    if (same_name(extra_env[i], var)) return 1;
  return 0;
}

/* The inherited environment, minus what we set, plus GOCL_TEST_* and
 * extra_env. Only the four GOCL_TEST_* strings are malloc'd. */
static char** child_env(const char* hex, int rank, int nranks, int report_fd,
                        const char* const extra_env[]) {
  size_t n = 0, nextra = 0, k = 0;
  while (environ[n] != NULL) n++;
  while (extra_env != NULL && extra_env[nextra] != NULL) nextra++;
  char** env = calloc(n + nextra + 5, sizeof *env);
  if (env == NULL) return NULL;
  for (size_t i = 0; i < n; i++)
    if (!overridden(environ[i], extra_env)) env[k++] = environ[i];
  for (size_t i = 0; i < nextra; i++) env[k++] = (char*)extra_env[i];
  if (asprintf(&env[k++], "%s=%s", ENV_ID, hex) < 0 ||
      asprintf(&env[k++], "%s=%d", ENV_RANK, rank) < 0 ||
      asprintf(&env[k++], "%s=%d", ENV_NRANKS, nranks) < 0 ||
      asprintf(&env[k++], "%s=%d", ENV_REPORT_FD, report_fd) < 0) {
    free(env);
    return NULL;
  }
  return env;
}

static void free_child_env(char** env) {
  size_t n = 0;
  while (env[n] != NULL) n++;
  for (size_t i = n - 4; i < n; i++) free(env[i]);
  free(env);
}

typedef struct {
  char* data;
  size_t len, cap;
} buffer_t;

/* Reads what the ranks have reported so far (the fd is non-blocking). */
static void drain(int fd, buffer_t* b) {
  for (;;) {
    if (b->cap - b->len < 4096) {
      size_t cap = b->cap * 2 + 8192;
      char* p = realloc(b->data, cap);
      if (p == NULL) return;
      b->data = p;
      b->cap = cap;
    }
    ssize_t k = read(fd, b->data + b->len, b->cap - b->len - 1);
    if (k > 0) {
      b->len += (size_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    return;
  }
}

static int report_status(int rank, int status) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  if (WIFEXITED(status))
    fprintf(stderr, "launch: rank %d exited with status %d\n", rank, WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    fprintf(stderr, "launch: rank %d killed by signal %d (%s)\n", rank, WTERMSIG(status),
            strsignal(WTERMSIG(status)));
  return 1;
}

/* Waits for every started rank until the deadline; kills the rest. Returns
 * the number of ranks that failed. */
static int wait_ranks(pid_t* pids, int nranks, double timeout_s, int report_fd, buffer_t* out) {
  int failed = 0, left = 0;
  double deadline = now_s() + timeout_s;
  for (int i = 0; i < nranks; i++) left += pids[i] > 0;
  while (left > 0) {
    struct pollfd pfd = {.fd = report_fd, .events = POLLIN};
    poll(&pfd, 1, 10);
    drain(report_fd, out);
    for (int i = 0; i < nranks; i++) {
      int status;
      if (pids[i] <= 0 || waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      failed += report_status(i, status);
      pids[i] = 0;
      left--;
    }
    if (left > 0 && now_s() > deadline) {
      for (int i = 0; i < nranks; i++) {
        if (pids[i] <= 0) continue;
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
        fprintf(stderr, "launch: rank %d killed after the %.0f s wall-clock limit\n", i, timeout_s);
        failed++;
      }
      left = 0;
    }
  }
  drain(report_fd, out); /* every rank has exited: all they wrote is in the pipe */
  return failed;
}

int launch_run(int nranks, char* const argv[], const char* const extra_env[], double timeout_s,
               char** reports) {
  static const char digits[] = "0123456789abcdef";
  goclUniqueId id;
  char hex[2 * GOCL_UNIQUE_ID_BYTES + 1];
  int fds[2], failed = 0;

  goclResult_t r = goclGetUniqueId(&id);
  if (r != goclSuccess) {
    fprintf(stderr, "launch: goclGetUniqueId: %s: %s\n", goclGetErrorString(r), goclGetLastError(NULL));
    return -1;
  }
  for (int i = 0; i < GOCL_UNIQUE_ID_BYTES; i++) {
    hex[2 * i] = digits[(unsigned char)id.internal[i] >> 4];
    hex[2 * i + 1] = digits[(unsigned char)id.internal[i] & 15];
  }
  hex[sizeof hex - 1] = '\0';

  /* The ranks inherit the write end; the read end stays here. */
  pid_t* pids = calloc((size_t)nranks, sizeof *pids);
  if (pids == NULL || pipe(fds) != 0) {
    perror("launch");
    free(pids);
    return -1;
  }
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  fflush(NULL);
  for (int i = 0; i < nranks; i++) {
    char** env = child_env(hex, i, nranks, fds[1], extra_env);
    int err = env == NULL ? ENOMEM : posix_spawn(&pids[i], "/proc/self/exe", NULL, NULL, argv, env);
    if (env != NULL) free_child_env(env);
    if (err != 0) {
      fprintf(stderr, "launch: cannot start rank %d: %s\n", i, strerror(err));
      pids[i] = 0;
      failed++;
    }
  }
  close(fds[1]);

  buffer_t out = {0};
  failed += wait_ranks(pids, nranks, timeout_s, fds[0], &out);
  close(fds[0]);
  free(pids);
  if (out.data == NULL) out.data = calloc(1, 1);
  else out.data[out.len] = '\0';
  if (reports != NULL) *reports = out.data;
  else free(out.data);
  return failed;
}

/* ------------------------------------------------------- from the environment */

int launch_from_env(launch_child_t* c, double timeout_s) {
  const char* port_var = getenv("GOCL_MASTER_PORT") && *getenv("GOCL_MASTER_PORT") ? "GOCL_MASTER_PORT" : "MASTER_PORT";
  const char* addr = getenv("MASTER_ADDR");
  int port;
  if (!env_int("RANK", &c->rank) || !env_int("WORLD_SIZE", &c->nranks)) return 0;
  if (c->nranks < 1 || c->rank < 0 || c->rank >= c->nranks) {
    fprintf(stderr, "launch: RANK=%d is not in [0, WORLD_SIZE=%d)\n", c->rank, c->nranks);
    return -1;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (c->nranks == 1) return 1;
  if (addr == NULL || *addr == '\0' || !env_int(port_var, &port) || port <= 0 || port > 65535) {
    fprintf(stderr, "launch: rank %d: set MASTER_ADDR and MASTER_PORT (the host and a free port of rank 0), as "
            "`gocl run` and torchrun do\n", c->rank);
    return -1;
  }
  /* gocl.Communicator.from_env's exchange, in the library: the rendezvous
   * secret (GOCL_RENDEZVOUS_SECRET, which `gocl run` sets) proved both ways,
   * the id encrypted. A C program makes one exchange: round 1, as a Python
   * program's first from_env. */
  goclResult_t r = goclExchangeUniqueId(&c->id, addr, port, c->rank, c->nranks, 1, NULL, timeout_s);
  if (r != goclSuccess) {
    fprintf(stderr, "launch: rank %d: %s\n", c->rank, goclGetLastError(NULL));
    return -1;
  }
  return 1;
}
