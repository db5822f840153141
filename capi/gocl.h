/*
 * gocl.h — public C API of gocl, a collective communication library.
 *
 * The API mirrors NCCL's (prefix gocl instead of nccl, same enum values), so a
 * port is mechanical. Buffers are host memory. A "stream" is a CPU queue: with
 * a NULL stream every call completes before it returns; with a stream created
 * by goclStreamCreate the call is queued and runs in order on that stream.
 *
 * Every call returns a goclResult_t. On failure goclGetLastError(comm) returns
 * a sentence that says what failed, on which rank, and what to do about it.
 * No call aborts the host process, with one exception no library can check:
 * buffers smaller than the count says (a C pointer carries no size). Like
 * memcpy with too large a size, that is undefined behaviour: the call reads
 * and writes past the buffers, and may corrupt memory silently; when it
 * touches memory the process does not have, the process exits (status 2)
 * with one line on stderr that names the call. After fork() every call in
 * the child returns goclInvalidUsage: start worker processes with
 * spawn/forkserver, or exec, instead.
 *
 * One call at a time per communicator: a second thread's call on a comm
 * while another thread is in a call on it (outside a group, on the NULL
 * stream) fails at once with goclInvalidUsage, since it would be paired with
 * the peers' calls in arrival order. Use one communicator per thread, or
 * drive several calls from one thread between goclGroupStart/goclGroupEnd.
 * Calls queued on a stream, and calls made from different threads one after
 * the other, are fine.
 */
#ifndef GOCL_H_
#define GOCL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GOCL_MAJOR 0
#define GOCL_MINOR 1
#define GOCL_PATCH 0
/* goclGetVersion reports MAJOR*10000 + MINOR*100 + PATCH (NCCL's scheme). */
#define GOCL_VERSION_CODE (GOCL_MAJOR * 10000 + GOCL_MINOR * 100 + GOCL_PATCH)

#define GOCL_UNIQUE_ID_BYTES 128
/* Opaque bootstrap handle: the root's address and a random secret. Make it on
 * one rank with goclGetUniqueId and hand the 128 bytes to every rank out of
 * band (a file, a pipe, torch's store, MPI_Bcast...). Treat it as a password:
 * anyone holding it can join the communicator. */
typedef struct { char internal[GOCL_UNIQUE_ID_BYTES]; } goclUniqueId;

typedef enum {
  goclSuccess = 0,
  goclUnhandledCudaError = 1,
  goclSystemError = 2,     /* the OS refused something: socket, memory, ... */
  goclInternalError = 3,   /* a gocl bug; the message says where */
  goclInvalidArgument = 4, /* a bad pointer, count, type, op, root or peer */
  goclInvalidUsage = 5,    /* a call in the wrong state: after destroy, after fork, ... */
  goclRemoteError = 6,     /* a peer failed, closed its connection, or disagreed on the call */
  goclInProgress = 7,      /* an operation queued on a stream has not finished yet */
  goclTimeout = 8,         /* gocl extension: no progress within GOCL_TIMEOUT seconds */
  goclNumResults = 9
} goclResult_t;

typedef enum {
  goclInt8 = 0, goclChar = 0,
  goclUint8 = 1,
  goclInt32 = 2, goclInt = 2,
  goclUint32 = 3,
  goclInt64 = 4,
  goclUint64 = 5,
  goclFloat16 = 6, goclHalf = 6,
  goclFloat32 = 7, goclFloat = 7,
  goclFloat64 = 8, goclDouble = 8,
  goclBfloat16 = 9,
  goclNumTypes = 10
} goclDataType_t;

typedef enum {
  goclSum = 0,
  goclProd = 1,
  goclMax = 2,
  goclMin = 3,
  goclAvg = 4, /* sum divided by the number of ranks (integers: truncated) */
  goclNumOps = 5,
  goclMaxRedOp = 0x7fffffff
} goclRedOp_t;

/* Where goclRedOpCreatePreMulSum reads its scalar. Host memory only for now:
 * Immediate copies it at creation; Device is accepted for NCCL source
 * compatibility and treated the same way. */
typedef enum {
  goclScalarDevice = 0,
  goclScalarHostImmediate = 1
} goclScalarResidence_t;

typedef struct goclComm* goclComm_t;
typedef struct goclStream* goclStream_t;
typedef struct goclEvent* goclEvent_t;

#define GOCL_SPLIT_NOCOLOR -1

/* A communicator's own settings, for goclCommInitRankConfig and goclCommSplit
 * (in the spirit of ncclConfig_t). Start from GOCL_CONFIG_INITIALIZER, then
 * set the fields you need; a field left at its initial value takes the
 * environment's setting (GOCL_X, then NCCL_X, then the default). */
typedef struct goclConfig_v1 {
  size_t size;          /* sizeof(goclConfig_t), set by the initializer */
  unsigned int magic;   /* GOCL_CONFIG_MAGIC, set by the initializer */
  unsigned int version; /* GOCL_VERSION_CODE the caller was built with */
  double timeout;       /* seconds an init or an operation may wait on a peer before
                           failing with goclTimeout; 0: no limit;
                           GOCL_CONFIG_UNDEF_DOUBLE: GOCL_TIMEOUT */
} goclConfig_t;

#define GOCL_CONFIG_MAGIC 0x676f636cu /* "gocl" */
#define GOCL_CONFIG_UNDEF_DOUBLE (-1.0)
#define GOCL_CONFIG_INITIALIZER \
  { sizeof(goclConfig_t), GOCL_CONFIG_MAGIC, GOCL_VERSION_CODE, GOCL_CONFIG_UNDEF_DOUBLE }

/* ---------------------------------------------------------------- versions */

/* Writes GOCL_VERSION_CODE of the loaded library into *version. */
goclResult_t goclGetVersion(int* version);

/* A static description of a result code ("invalid argument", ...). */
const char* goclGetErrorString(goclResult_t result);

/* The last error seen by comm, as a full sentence; with comm == NULL (or an
 * init that produced no comm) the last error of the calling thread. Returns ""
 * when there was none. Safe from any thread: the string is the calling
 * thread's own copy, which no other thread's call frees. It stays valid until
 * this thread's next goclGetLastError of the same comm returns a different
 * message, or comm is destroyed (comm == NULL: until this thread's next
 * failing call). */
const char* goclGetLastError(goclComm_t comm);

/* ---------------------------------------------------------- communicators */

/* Every GOCL_ setting is read from the process's environment as it is at the
 * call that applies it (libc's getenv: a setenv() before the call counts):
 * goclGetUniqueId, goclCommInitRank(Config), goclCommInitAll and goclCommSplit
 * read them, and a communicator keeps what its init read. */

/* Makes a new unique id and starts, in this process, the rendezvous service
 * that nranks goclCommInitRank calls will meet at. The service listens on the
 * interface chosen by GOCL_SOCKET_IFNAME (default: the first non-loopback
 * interface that is up, else loopback) and stops once the rendezvous is done
 * or GOCL_TIMEOUT passes. */
goclResult_t goclGetUniqueId(goclUniqueId* uniqueId);

/* goclGetUniqueId with the rendezvous service on the interface that holds
 * host's address (a name or an IP; NULL: as goclGetUniqueId), when host is
 * an address of this machine and GOCL_SOCKET_IFNAME is unset. A loopback
 * host (127.0.0.1, localhost) makes a single-host job: its ranks then
 * listen on loopback only, out of other hosts' reach. */
goclResult_t goclGetUniqueIdAt(goclUniqueId* uniqueId, const char* host);

/* The unique id of a launcher's world, exchanged through rank 0 at
 * host:port (MASTER_ADDR:MASTER_PORT), as gocl.Communicator.from_env does:
 * rank 0 makes it (as goclGetUniqueIdAt(host)) and serves it until each of
 * ranks 1..nRanks-1 has acknowledged it; the others fetch it. Every
 * connection proves the rendezvous secret both ways and the id travels
 * encrypted, so a process without the secret neither gets the id nor
 * passes for rank 0. secret: the launcher's rendezvous secret, at least 24
 * characters (`gocl run` sets GOCL_RENDEZVOUS_SECRET); NULL: that variable;
 * "": none, so any process that reaches host:port can fetch the id. round:
 * the same positive number on every rank for one exchange (1, 2, ... for a
 * program's successive exchanges). timeoutSeconds: how long to wait for the
 * other ranks; 0: no limit; negative: GOCL_TIMEOUT. */
goclResult_t goclExchangeUniqueId(goclUniqueId* uniqueId, const char* host, int port, int rank, int nRanks,
                                  int round, const char* secret, double timeoutSeconds);

/* Joins rank `rank` of `nranks` to the communicator named by commId. Blocks
 * until every rank has joined (or GOCL_TIMEOUT passes), so each rank needs its
 * own thread or process. */
goclResult_t goclCommInitRank(goclComm_t* comm, int nranks, goclUniqueId commId, int rank);

/* goclCommInitRank with the communicator's own settings; config may be NULL
 * (every setting from the environment). */
goclResult_t goclCommInitRankConfig(goclComm_t* comm, int nranks, goclUniqueId commId, int rank,
                                    goclConfig_t* config);

/* Creates ndev communicators of one clique inside this process (ranks
 * 0..ndev-1). devlist may be NULL; on a CPU build device numbers are only
 * recorded. Drive each returned comm from its own thread, or put calls on
 * several of them between goclGroupStart/goclGroupEnd. */
goclResult_t goclCommInitAll(goclComm_t* comms, int ndev, const int* devlist);

/* Collective over comm: ranks with the same color form a new communicator,
 * ordered by key, then by their rank in comm. color == GOCL_SPLIT_NOCOLOR
 * gives *newcomm == NULL. config may be NULL: the new communicator then keeps
 * comm's settings (its timeout), as NCCL's split does. */
goclResult_t goclCommSplit(goclComm_t comm, int color, int key, goclComm_t* newcomm, goclConfig_t* config);

/* Fault tolerance (NCCL 2.27/2.29's names, signatures and flags). */
#define GOCL_SHRINK_DEFAULT 0x00 /* the parent's queued work finishes first */
#define GOCL_SHRINK_ABORT 0x01   /* the parent's operations in progress are failed first */

/* A communicator of comm's ranks less the excludeRanksCount ranks listed in
 * excludeRanksList, in the same order; excluded ranks do not call it. comm
 * may have failed (a rank died): shrinking does not use its connections.
 * With excludeRanksList == NULL (and excludeRanksCount 0) the survivors
 * agree among themselves on which ranks are gone and exclude exactly those:
 * every survivor gets the same communicator, even when they noticed the
 * failure at different times or another rank dies during the shrink; a rank
 * that is alive but does not call shrink within comm's timeout is left out.
 * config may be NULL (comm's timeout). comm stays to be destroyed. */
goclResult_t goclCommShrink(goclComm_t comm, int* excludeRanksList, int excludeRanksCount, goclComm_t* newcomm,
                            goclConfig_t* config, int shrinkFlags);

/* Fails every operation in progress or queued on comm, on this rank and on
 * every peer (ranks not in a call learn it too), and returns once none runs
 * here; comm can then be shrunk or destroyed. flags: 0. */
goclResult_t goclCommRevoke(goclComm_t comm, int flags);

/* Makes the id of a grow of comm: call it on comm's rank 0 and hand the id
 * to the processes that will join. */
goclResult_t goclCommGetUniqueId(goclComm_t comm, goclUniqueId* uniqueId);

/* A communicator of nRanks: comm's ranks keep their ranks (they pass rank
 * -1; comm is collective over them; only rank 0 needs uniqueId, the others
 * may pass NULL) and new ranks join with comm == NULL, the id from rank 0's
 * goclCommGetUniqueId and their rank in [comm's size, nRanks). config may
 * be NULL (comm's timeout; the environment's for new ranks). */
goclResult_t goclCommGrow(goclComm_t comm, int nRanks, const goclUniqueId* uniqueId, int rank, goclComm_t* newcomm,
                          goclConfig_t* config);

/* Waits for work queued by this comm on streams, then frees it. Collective in
 * spirit (as in NCCL every rank should call it) but never blocks on peers. */
goclResult_t goclCommDestroy(goclComm_t comm);

/* Fails every operation in progress on comm (from any thread), closes its
 * connections so peers see the failure too, and frees it. */
goclResult_t goclCommAbort(goclComm_t comm);

/* goclSuccess while comm is healthy; goclInProgress never (init is blocking);
 * otherwise the error that broke it (an async op failed, a peer died). */
goclResult_t goclCommGetAsyncError(goclComm_t comm, goclResult_t* asyncError);

/* Appends comm's flight recorder (its last calls: op, seq, count, dtype,
 * algorithm, transport, state, timings) to path as JSON lines, or to the file
 * GOCL_TRACE_FILE names when path is NULL; `gocl trace FILES...` lines the
 * ranks' files up. goclInvalidUsage when neither GOCL_TRACE_BUFFER nor
 * GOCL_TRACE_FILE was set at init (the recorder is off). */
goclResult_t goclCommDumpTrace(goclComm_t comm, const char* path);

goclResult_t goclCommCount(const goclComm_t comm, int* count);
goclResult_t goclCommUserRank(const goclComm_t comm, int* rank);
/* CPU build: the device given to goclCommInitAll, else the local rank. */
goclResult_t goclCommCuDevice(const goclComm_t comm, int* device);

/* ------------------------------------------------------------- reductions */

/* A reduction op that multiplies every input by *scalar (of type datatype)
 * before summing. Valid on comm only; free it with goclRedOpDestroy. */
goclResult_t goclRedOpCreatePreMulSum(goclRedOp_t* op, void* scalar, goclDataType_t datatype,
                                      goclScalarResidence_t residence, goclComm_t comm);
goclResult_t goclRedOpDestroy(goclRedOp_t op, goclComm_t comm);

/* ------------------------------------------------------------ collectives
 * In-place rules are NCCL's:
 *   AllReduce/Broadcast/Reduce: sendbuff == recvbuff
 *   AllGather:      sendbuff == recvbuff + rank*sendcount elements
 *   ReduceScatter:  recvbuff == sendbuff + rank*recvcount elements
 *   Gather:         sendbuff == recvbuff + root's rank*sendcount (at root)
 *   Scatter:        recvbuff == sendbuff + rank*recvcount (at root)
 *   AlltoAll cannot run in place (sendbuff == recvbuff is refused).
 * Rooted calls also accept the root's sendbuff == recvbuff for Gather and
 * Scatter (the root's own block then lands where the rule says); ReduceScatter
 * and AllGather accept sendbuff == recvbuff too.
 * Every rank must call the same collectives in the same order with matching
 * count, datatype, op and root; a mismatch fails on every rank with a message
 * that names both calls. */

goclResult_t goclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           goclDataType_t datatype, goclRedOp_t op, goclComm_t comm, goclStream_t stream);

/* root's sendbuff (count elements) lands in every rank's recvbuff. sendbuff is
 * read only at root. */
goclResult_t goclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           goclDataType_t datatype, int root, goclComm_t comm, goclStream_t stream);

/* Reduction whose result lands only in root's recvbuff (ignored elsewhere). */
goclResult_t goclReduce(const void* sendbuff, void* recvbuff, size_t count, goclDataType_t datatype,
                        goclRedOp_t op, int root, goclComm_t comm, goclStream_t stream);

/* recvbuff holds nranks*sendcount elements; rank i's block at i*sendcount. */
goclResult_t goclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           goclDataType_t datatype, goclComm_t comm, goclStream_t stream);

/* sendbuff holds nranks*recvcount elements; rank i receives reduced block i. */
goclResult_t goclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               goclDataType_t datatype, goclRedOp_t op, goclComm_t comm,
                               goclStream_t stream);

/* Block j (count elements) of sendbuff goes to rank j; block i of recvbuff
 * comes from rank i. Both hold nranks*count elements. */
goclResult_t goclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          goclDataType_t datatype, goclComm_t comm, goclStream_t stream);

/* Every rank's sendcount elements land at root's recvbuff + i*sendcount. */
goclResult_t goclGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                        goclDataType_t datatype, int root, goclComm_t comm, goclStream_t stream);

/* Block i (recvcount elements) of root's sendbuff lands in rank i's recvbuff. */
goclResult_t goclScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                         goclDataType_t datatype, int root, goclComm_t comm, goclStream_t stream);

/* --------------------------------------------------------- point to point
 * Sends to one peer are received in the order they were sent; count and
 * datatype must match the peer's goclRecv. Put concurrent sends and receives
 * (a ring exchange, all-to-all patterns) between goclGroupStart/End. */
goclResult_t goclSend(const void* sendbuff, size_t count, goclDataType_t datatype, int peer,
                      goclComm_t comm, goclStream_t stream);
goclResult_t goclRecv(void* recvbuff, size_t count, goclDataType_t datatype, int peer,
                      goclComm_t comm, goclStream_t stream);
/* gocl extension (MPI_ANY_SOURCE): receive count elements from whichever rank's
 * send arrives first and store that rank in *peer. It takes that pair's next
 * message, so each pair's order is kept. Blocking: stream must be NULL, and
 * it may not be called inside a group. Fails with goclTimeout ("timed out")
 * when no rank sends within the operation timeout. */
goclResult_t goclRecvAny(void* recvbuff, size_t count, goclDataType_t datatype, int* peer,
                         goclComm_t comm, goclStream_t stream);

/* ------------------------------------------------------------------ groups
 * Calls between goclGroupStart and goclGroupEnd (per thread, nestable) are
 * only recorded; goclGroupEnd runs them: the p2p operations of one comm all
 * progress together, and different comms progress in parallel. With NULL
 * streams goclGroupEnd returns when everything is done. */
goclResult_t goclGroupStart(void);
goclResult_t goclGroupEnd(void);

/* ------------------------------------------------------- streams, events */

/* An ordered CPU queue with its own worker. Operations on one stream run one
 * after the other; different streams run concurrently. */
goclResult_t goclStreamCreate(goclStream_t* stream);
/* Waits until everything queued so far has run. Returns the first error of
 * those operations (and clears it). */
goclResult_t goclStreamSynchronize(goclStream_t stream);
/* goclSuccess if the stream is idle, goclInProgress if work is pending, or
 * the pending error. */
goclResult_t goclStreamQuery(goclStream_t stream);
/* Waits for queued work, then frees the stream. */
goclResult_t goclStreamDestroy(goclStream_t stream);

goclResult_t goclEventCreate(goclEvent_t* event);
/* Marks the current end of stream's queue. */
goclResult_t goclEventRecord(goclEvent_t event, goclStream_t stream);
/* goclSuccess once the work before the mark is done, else goclInProgress. An
 * event never recorded counts as done. Once done, the result is the first
 * error of any operation queued on the stream before the mark (errors stick
 * to a stream, as CUDA's do: work after a failed collective ran on a broken
 * communicator); goclGetLastError(NULL) on the calling thread has its text. */
goclResult_t goclEventQuery(goclEvent_t event);
/* Waits for the work before the mark; returns what goclEventQuery would. */
goclResult_t goclEventSynchronize(goclEvent_t event);
goclResult_t goclEventDestroy(goclEvent_t event);

/* cudaLaunchHostFunc's counterpart: fn(userData) runs once everything queued
 * on stream before this call has finished (successfully or not). Host
 * functions run in order on a thread of the stream's own, not on its worker:
 * a slow fn does not delay the stream's later operations, and fn may call
 * gocl (even wait for later work on the stream). */
typedef void (*goclHostFn_t)(void* userData);
goclResult_t goclLaunchHostFunc(goclStream_t stream, goclHostFn_t fn, void* userData);

#ifdef __cplusplus
}
#endif

#endif /* GOCL_H_ */
