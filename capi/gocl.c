// The public C functions. Each checks that the process has not forked since
// the library was loaded, then enters Go: a forked child has lost the Go
// runtime's threads, so even entering Go there can hang. This check is the
// only thing between C and Go that must not itself need the runtime.
#include <pthread.h>
#include <stdint.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "gocl.h"
#include "_cgo_export.h"

static volatile int forked = 0;
static void on_fork_child(void) { forked = 1; }

// Timer slack for the Go runtime's threads (ns). Go's sysmon thread wakes
// every 20 us (for 1 ms, then backing off) each time the runtime turns busy
// after being idle: every call into libgocl between DDP's buckets, every host
// callback. Each wake-up is a context switch: on a DDP step (2 ranks on 2
// cores) 220-240 switches and 1.5-2 ms of CPU per rank. With 1 ms of slack the
// kernel lets those ticks run late (75-80 switches). The runtime's timed
// sleeps are naps and backstops (peers wake a waiter through its futex), so
// the data path does not wait on them.
//
// A thread inherits its creator's slack, and the runtime starts its first
// thread (which starts every other one) from its own constructor while the
// library loads. So the loading thread's slack is raised just before that
// (prioritised constructors run before the runtime's) and put back just after
// (unprioritised ones run in link order, after the runtime's _rt0 entry;
// tests/c/slack_test.c and tests/python/test_timer_slack.py check both ends).
// A thread Go starts while it runs a call on the caller's thread gets the
// caller's slack; sysmon, started by the runtime's first thread, has 1 ms.
#define GOCL_GO_TIMER_SLACK_NS 1000000UL
static long loader_slack = -1;

__attribute__((constructor(101))) static void gocl_slack_before_go(void) {
#ifdef __linux__
  long was = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  if (was >= 0 && (unsigned long)was < GOCL_GO_TIMER_SLACK_NS &&
      prctl(PR_SET_TIMERSLACK, GOCL_GO_TIMER_SLACK_NS, 0, 0, 0) == 0)
    loader_slack = was;
#endif
}

__attribute__((constructor)) static void gocl_after_go(void) {
#ifdef __linux__
  if (loader_slack > 0) prctl(PR_SET_TIMERSLACK, (unsigned long)loader_slack, 0, 0, 0);
#endif
  pthread_atfork(NULL, NULL, on_fork_child);
}

static const char fork_message[] =
    "gocl was called in a child created by fork() without exec: the Go runtime inside gocl does not "
    "survive fork, so every call fails. Start worker processes with the spawn or forkserver method "
    "(multiprocessing.set_start_method(\"spawn\"), torch.multiprocessing.spawn, or "
    "DataLoader(multiprocessing_context=\"spawn\")), or exec a new program.";

#define GUARD() \
  do { if (forked) return goclInvalidUsage; } while (0)
#define H(x) ((uintptr_t)(x))

goclResult_t goclGetVersion(int* version) { GUARD(); return (goclResult_t)goclgoGetVersion(version); }

const char* goclGetErrorString(goclResult_t r) {
  switch (r) {
    case goclSuccess: return "no error";
    case goclUnhandledCudaError: return "unhandled cuda error";
    case goclSystemError: return "unhandled system error (network, memory or OS call failed)";
    case goclInternalError: return "internal error - please report this issue to the gocl developers";
    case goclInvalidArgument: return "invalid argument";
    case goclInvalidUsage: return "invalid usage";
    case goclRemoteError: return "remote process exited or there was a network error";
    case goclInProgress: return "operation in progress";
    case goclTimeout: return "operation timed out (GOCL_TIMEOUT)";
    default: return "unknown result code";
  }
}

const char* goclGetLastError(goclComm_t comm) {
  if (forked) return fork_message;
  return goclgoGetLastError(H(comm));
}

goclResult_t goclGetUniqueId(goclUniqueId* id) { GUARD(); return (goclResult_t)goclgoGetUniqueId((char*)id); }
goclResult_t goclGetUniqueIdAt(goclUniqueId* id, const char* host) {
  GUARD();
  return (goclResult_t)goclgoGetUniqueIdAt((char*)id, (char*)host);
}
goclResult_t goclExchangeUniqueId(goclUniqueId* id, const char* host, int port, int rank, int nRanks, int round,
                                  const char* secret, double timeoutSeconds) {
  GUARD();
  return (goclResult_t)goclgoExchangeUniqueId((char*)id, (char*)host, port, rank, nRanks, round, (char*)secret,
                                              timeoutSeconds);
}

goclResult_t goclCommInitRank(goclComm_t* comm, int nranks, goclUniqueId id, int rank) {
  GUARD();
  return (goclResult_t)goclgoCommInitRank((uintptr_t*)comm, nranks, id.internal, rank, NULL);
}

goclResult_t goclCommInitRankConfig(goclComm_t* comm, int nranks, goclUniqueId id, int rank, goclConfig_t* config) {
  GUARD();
  return (goclResult_t)goclgoCommInitRank((uintptr_t*)comm, nranks, id.internal, rank, config);
}

goclResult_t goclCommInitAll(goclComm_t* comms, int ndev, const int* devlist) {
  GUARD();
  return (goclResult_t)goclgoCommInitAll((uintptr_t*)comms, ndev, (int*)devlist);
}

goclResult_t goclCommSplit(goclComm_t comm, int color, int key, goclComm_t* newcomm, goclConfig_t* config) {
  GUARD();
  return (goclResult_t)goclgoCommSplit(H(comm), color, key, (uintptr_t*)newcomm, config);
}

goclResult_t goclCommShrink(goclComm_t comm, int* excludeRanksList, int excludeRanksCount, goclComm_t* newcomm,
                            goclConfig_t* config, int shrinkFlags) {
  GUARD();
  return (goclResult_t)goclgoCommShrink(H(comm), excludeRanksList, excludeRanksCount, (uintptr_t*)newcomm, config,
                                        shrinkFlags);
}

goclResult_t goclCommRevoke(goclComm_t comm, int flags) { GUARD(); return (goclResult_t)goclgoCommRevoke(H(comm), flags); }

goclResult_t goclCommGetUniqueId(goclComm_t comm, goclUniqueId* id) {
  GUARD();
  return (goclResult_t)goclgoCommGetUniqueId(H(comm), (char*)id);
}

goclResult_t goclCommGrow(goclComm_t comm, int nRanks, const goclUniqueId* id, int rank, goclComm_t* newcomm,
                          goclConfig_t* config) {
  GUARD();
  return (goclResult_t)goclgoCommGrow(H(comm), nRanks, (char*)id, rank, (uintptr_t*)newcomm, config);
}

goclResult_t goclCommDestroy(goclComm_t comm) { GUARD(); return (goclResult_t)goclgoCommDestroy(H(comm), 0); }
goclResult_t goclCommAbort(goclComm_t comm) { GUARD(); return (goclResult_t)goclgoCommDestroy(H(comm), 1); }

goclResult_t goclCommGetAsyncError(goclComm_t comm, goclResult_t* asyncError) {
  GUARD();
  return (goclResult_t)goclgoCommGetAsyncError(H(comm), (int*)asyncError);
}

goclResult_t goclCommDumpTrace(goclComm_t comm, const char* path) {
  GUARD();
  return (goclResult_t)goclgoCommDumpTrace(H(comm), (char*)path);
}

goclResult_t goclCommCount(const goclComm_t comm, int* count) { GUARD(); return (goclResult_t)goclgoCommQuery(H(comm), 0, count); }
goclResult_t goclCommUserRank(const goclComm_t comm, int* rank) { GUARD(); return (goclResult_t)goclgoCommQuery(H(comm), 1, rank); }
goclResult_t goclCommCuDevice(const goclComm_t comm, int* device) { GUARD(); return (goclResult_t)goclgoCommQuery(H(comm), 2, device); }

goclResult_t goclRedOpCreatePreMulSum(goclRedOp_t* op, void* scalar, goclDataType_t datatype,
                                      goclScalarResidence_t residence, goclComm_t comm) {
  GUARD();
  (void)residence; /* host memory either way on the CPU path */
  return (goclResult_t)goclgoRedOpCreatePreMulSum((int*)op, scalar, datatype, H(comm));
}

goclResult_t goclRedOpDestroy(goclRedOp_t op, goclComm_t comm) { GUARD(); return (goclResult_t)goclgoRedOpDestroy(op, H(comm)); }

/* Collectives: one Go entry point, the collective named by its wire code. */
enum { ALLREDUCE = 1, BROADCAST, REDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL, GATHER, SCATTER, SENDRECV };

goclResult_t goclAllReduce(const void* s, void* r, size_t n, goclDataType_t t, goclRedOp_t op, goclComm_t c, goclStream_t st) {
  GUARD(); return (goclResult_t)goclgoCall(ALLREDUCE, (void*)s, r, n, t, op, 0, 0, H(c), H(st));
}
goclResult_t goclBroadcast(const void* s, void* r, size_t n, goclDataType_t t, int root, goclComm_t c, goclStream_t st) {
  GUARD(); return (goclResult_t)goclgoCall(BROADCAST, (void*)s, r, n, t, 0, root, 0, H(c), H(st));
}
goclResult_t goclReduce(const void* s, void* r, size_t n, goclDataType_t t, goclRedOp_t op, int root, goclComm_t c, goclStream_t st) {
  GUARD(); return (goclResult_t)goclgoCall(REDUCE, (void*)s, r, n, t, op, root, 0, H(c), H(st));
}
goclResult_t goclAllGather(const void* s, void* r, size_t n, goclDataType_t t, goclComm_t c, goclStream_t st) {
  GUARD(); return (goclResult_t)goclgoCall(ALLGATHER, (void*)s, r, n, t, 0, 0, 0, H(c), H(st));
}
goclResult_t goclReduceScatter(const void* s, void* r, size_t n, goclDataType_t t, goclRedOp_t op, goclComm_t c, goclStream_t st) {
  GUARD(); return (goclResult_t)goclgoCall(REDUCESCATTER, (void*)s, r, n, t, op, 0, 0, H(c), H(st));
}
goclResult_t goclAlltoAll(const void* s, void* r, size_t n, goclDataType_t t, goclComm_t c, goclStream_t st) {
  GUARD(); return (goclResult_t)goclgoCall(ALLTOALL, (void*)s, r, n, t, 0, 0, 0, H(c), H(st));
}
goclResult_t goclGather(const void* s, void* r, size_t n, goclDataType_t t, int root, goclComm_t c, goclStream_t st) {
  GUARD(); return (goclResult_t)goclgoCall(GATHER, (void*)s, r, n, t, 0, root, 0, H(c), H(st));
}
goclResult_t goclScatter(const void* s, void* r, size_t n, goclDataType_t t, int root, goclComm_t c, goclStream_t st) {
  GUARD(); return (goclResult_t)goclgoCall(SCATTER, (void*)s, r, n, t, 0, root, 0, H(c), H(st));
}
goclResult_t goclSend(const void* s, size_t n, goclDataType_t t, int peer, goclComm_t c, goclStream_t st) {
  GUARD(); return (goclResult_t)goclgoCall(SENDRECV, (void*)s, NULL, n, t, 0, peer, 1, H(c), H(st));
}
goclResult_t goclRecv(void* r, size_t n, goclDataType_t t, int peer, goclComm_t c, goclStream_t st) {
  GUARD(); return (goclResult_t)goclgoCall(SENDRECV, NULL, r, n, t, 0, peer, 0, H(c), H(st));
}
goclResult_t goclRecvAny(void* r, size_t n, goclDataType_t t, int* peer, goclComm_t c, goclStream_t st) {
  GUARD(); return (goclResult_t)goclgoRecvAny(r, n, t, peer, H(c), H(st));
}

goclResult_t goclGroupStart(void) { GUARD(); return (goclResult_t)goclgoGroup(1); }
goclResult_t goclGroupEnd(void) { GUARD(); return (goclResult_t)goclgoGroup(0); }

goclResult_t goclStreamCreate(goclStream_t* s) { GUARD(); return (goclResult_t)goclgoStreamCreate((uintptr_t*)s); }
goclResult_t goclStreamSynchronize(goclStream_t s) { GUARD(); return (goclResult_t)goclgoStreamOp(H(s), 0); }
goclResult_t goclStreamQuery(goclStream_t s) { GUARD(); return (goclResult_t)goclgoStreamOp(H(s), 1); }
goclResult_t goclStreamDestroy(goclStream_t s) { GUARD(); return (goclResult_t)goclgoStreamOp(H(s), 2); }

goclResult_t goclEventCreate(goclEvent_t* e) { GUARD(); return (goclResult_t)goclgoEventCreate((uintptr_t*)e); }
goclResult_t goclEventRecord(goclEvent_t e, goclStream_t s) { GUARD(); return (goclResult_t)goclgoEventRecord(H(e), H(s)); }
goclResult_t goclEventQuery(goclEvent_t e) { GUARD(); return (goclResult_t)goclgoEventOp(H(e), 0); }
goclResult_t goclEventSynchronize(goclEvent_t e) { GUARD(); return (goclResult_t)goclgoEventOp(H(e), 1); }
goclResult_t goclEventDestroy(goclEvent_t e) { GUARD(); return (goclResult_t)goclgoEventOp(H(e), 2); }

goclResult_t goclLaunchHostFunc(goclStream_t s, goclHostFn_t fn, void* userData) {
  GUARD(); return (goclResult_t)goclgoLaunchHostFunc(H(s), fn, (uintptr_t)userData);
}
void goclCallHostFn(goclHostFn_t fn, uintptr_t userData) { fn((void*)userData); }
