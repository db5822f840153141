/*
 * launch.c — see launch.h. Linux only (/proc/self/exe).
 */
#define _GNU_SOURCE
#include "launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
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

/* gocl.Communicator.from_env's exchange (python/gocl/comm.py): a hello of
 * "GOCLUID1", rank, world size and generation (big-endian int32s), answered
 * by one status byte: OK then the 128-byte id, RETRY (another round), or
 * FATAL then a big-endian uint16 length and a message. A C program makes
 * one exchange, generation 1, as a Python program's first from_env does. */
#define EXCHANGE_MAGIC "GOCLUID1"
#define HELLO_BYTES 20
enum { EXCHANGE_OK = 0, EXCHANGE_RETRY = 1, EXCHANGE_FATAL = 2 };

static int io_all(int fd, void* buf, size_t n, int writing) {
  char* p = buf;
  while (n > 0) {
    ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static void set_io_timeout(int fd, double s) {
  struct timeval tv = {(time_t)s, (suseconds_t)((s - (time_t)s) * 1e6)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static void put32(unsigned char* p, int v) {
  uint32_t u = htonl((uint32_t)v);
  memcpy(p, &u, 4);
}

static int get32(const unsigned char* p) {
  uint32_t u;
  memcpy(&u, p, 4);
  return (int)ntohl(u);
}

/* Listens on every address, IPv6 and IPv4 where the system allows both. */
static int listen_any(int port) {
  int one = 1, zero = 0;
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = in6addr_any};
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(fd, (struct sockaddr*)&a6, sizeof a6) == 0 && listen(fd, 128) == 0) return fd;
    int err = errno;
    close(fd);
    if (err == EADDRINUSE) {
      errno = err;
      return -1;
    }
  }
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = INADDR_ANY};
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr*)&a4, sizeof a4) == 0 && listen(fd, 128) == 0) return fd;
  int err = errno;
  close(fd);
  errno = err;
  return -1;
}

/* Rank 0: hands id to ranks 1..world-1; returns 0 when each has it. */
static int serve_id(int port, const char* where, const goclUniqueId* id, int world, double deadline) {
  int srv = listen_any(port);
  if (srv < 0) {
    fprintf(stderr, "launch: rank 0: cannot listen on MASTER_PORT %d: %s%s\n", port, strerror(errno),
            errno == EADDRINUSE ? " (set GOCL_MASTER_PORT to another free port)" : "");
    return -1;
  }
  char* have = calloc((size_t)world, 1);
  int missing = world - 1;
  while (missing > 0 && have != NULL) {
    double left = deadline - now_s();
    if (left <= 0) {
      fprintf(stderr, "launch: rank 0: timed out waiting for %d rank(s) to fetch the unique id from %s "
              "(MASTER_ADDR:MASTER_PORT); did every rank start, with WORLD_SIZE=%d?\n", missing, where, world);
      break;
    }
    struct pollfd pfd = {.fd = srv, .events = POLLIN};
    if (poll(&pfd, 1, left > 1 ? 1000 : (int)(left * 1000) + 1) <= 0) continue;
    int fd = accept4(srv, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    set_io_timeout(fd, 5);
    unsigned char hello[HELLO_BYTES];
    if (io_all(fd, hello, sizeof hello, 0) == 0 && memcmp(hello, EXCHANGE_MAGIC, 8) == 0) {
      int rank = get32(hello + 8), their_world = get32(hello + 12), gen = get32(hello + 16);
      unsigned char reply[1 + GOCL_UNIQUE_ID_BYTES];
      if (their_world != world) {
        char msg[200];
        int n = snprintf(msg, sizeof msg, "rank %d has WORLD_SIZE=%d but rank 0 has WORLD_SIZE=%d", rank,
                         their_world, world);
        unsigned char head[3] = {EXCHANGE_FATAL, (unsigned char)(n >> 8), (unsigned char)n};
        if (io_all(fd, head, 3, 1) == 0) io_all(fd, msg, (size_t)n, 1);
      } else if (gen != 1) {
        reply[0] = EXCHANGE_RETRY;
        io_all(fd, reply, 1, 1);
      } else {
        reply[0] = EXCHANGE_OK;
        memcpy(reply + 1, id->internal, GOCL_UNIQUE_ID_BYTES);
        if (io_all(fd, reply, sizeof reply, 1) == 0 && rank > 0 && rank < world && !have[rank]) {
          have[rank] = 1;
          missing--;
        }
      }
    }
    close(fd);
  }
  free(have);
  close(srv);
  return missing == 0 ? 0 : -1;
}

/* Ranks > 0: asks rank 0 for the id until it answers or the deadline. */
static int fetch_id(const char* addr, int port, int rank, int world, goclUniqueId* id, double deadline) {
  char portstr[16], last[256] = "no answer";
  double pause = 0.02;
  snprintf(portstr, sizeof portstr, "%d", port);
  for (;;) {
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int rc = getaddrinfo(addr, portstr, &hints, &ai);
    if (rc != 0) snprintf(last, sizeof last, "%s", gai_strerror(rc));
    for (struct addrinfo* p = ai; p != NULL; p = p->ai_next) {
      int fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
      if (fd < 0) continue;
      set_io_timeout(fd, 5);
      if (connect(fd, p->ai_addr, p->ai_addrlen) != 0) {
        snprintf(last, sizeof last, "%s", strerror(errno));
        close(fd);
        continue;
      }
      unsigned char hello[HELLO_BYTES], status;
      memcpy(hello, EXCHANGE_MAGIC, 8);
      put32(hello + 8, rank);
      put32(hello + 12, world);
      put32(hello + 16, 1);
      if (io_all(fd, hello, sizeof hello, 1) == 0 && io_all(fd, &status, 1, 0) == 0) {
        if (status == EXCHANGE_OK && io_all(fd, id->internal, GOCL_UNIQUE_ID_BYTES, 0) == 0) {
          close(fd);
          freeaddrinfo(ai);
          return 0;
        }
        unsigned char len[2];
        char msg[65536];
        if (status == EXCHANGE_FATAL && io_all(fd, len, 2, 0) == 0) {
          size_t n = (size_t)len[0] << 8 | len[1];
          if (io_all(fd, msg, n, 0) == 0) {
            fprintf(stderr, "launch: rank %d: %.*s\n", rank, (int)n, msg);
            close(fd);
            freeaddrinfo(ai);
            return -1;
          }
        }
        snprintf(last, sizeof last, "rank 0 is serving another round");
      }
      close(fd);
    }
    if (ai != NULL) freeaddrinfo(ai);
    if (now_s() + pause > deadline) {
      fprintf(stderr, "launch: rank %d: timed out waiting for rank 0 to serve the unique id at %s:%d "
              "(MASTER_ADDR:MASTER_PORT); last error: %s. Is rank 0 running, with the same MASTER_ADDR and "
              "MASTER_PORT?\n", rank, addr, port, last);
      return -1;
    }
    struct timespec ts = {(time_t)pause, (long)((pause - (time_t)pause) * 1e9)};
    nanosleep(&ts, NULL);
    pause = pause * 1.5 < 0.5 ? pause * 1.5 : 0.5;
  }
}

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
  double deadline = now_s() + timeout_s;
  if (c->rank > 0) return fetch_id(addr, port, c->rank, c->nranks, &c->id, deadline) == 0 ? 1 : -1;
  goclResult_t r = goclGetUniqueId(&c->id);
  if (r != goclSuccess) {
    fprintf(stderr, "launch: goclGetUniqueId: %s: %s\n", goclGetErrorString(r), goclGetLastError(NULL));
    return -1;
  }
  char where[300];
  snprintf(where, sizeof where, "%s:%d", addr, port);
  return serve_id(port, where, &c->id, c->nranks, deadline) == 0 ? 1 : -1;
}
