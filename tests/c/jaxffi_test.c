/*
 * jaxffi_test.c — gocl's XLA FFI handlers driven by hand-built call frames,
 * without JAX: a fake XLA_FFI_Api (errors, futures, device ordinals) stands
 * in for the runtime. Checks the registration handshake (API 0.1, nothing
 * written past the 0.1 metadata struct), attribute and buffer decoding
 * errors, and every collective on an in-process world of 3 ranks (one thread
 * per device ordinal), through the asynchronous (future) and blocking paths.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../jaxffi/xla_ffi.h"

int goclJaxSessionInit(char *uid, int nprocs, int proc, int ndev, const int64_t *devices, int64_t *out, char *msg,
                     size_t msglen);
void goclJaxSessionDestroy(int64_t h, int abort);

static int failures;
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            failures++;                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
        }                                                                  \
    } while (0)

/* ---- fake runtime ---- */
struct gx_error {
    int code;
    char msg[1024];
};
struct gx_future {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    gx_error *err;
};

static gx_error *fake_error_create(gx_error_create_args *a) {
    gx_error *e = calloc(1, sizeof *e);
    e->code = a->errc;
    snprintf(e->msg, sizeof e->msg, "%s", a->message);
    return e;
}
static void fake_error_destroy(gx_error_destroy_args *a) { free(a->error); }
static gx_error *fake_future_create(gx_future_args *a) {
    gx_future *f = calloc(1, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    a->future = f;
    return NULL;
}
static void settle(gx_future *f, gx_error *e) {
    pthread_mutex_lock(&f->mu);
    f->done++;
    f->err = e;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}
static gx_error *fake_set_available(gx_future_args *a) { settle(a->future, NULL); return NULL; }
static gx_error *fake_set_error(gx_future_error_args *a) { settle(a->future, a->error); return NULL; }
/* The fake ctx is a pointer to the device ordinal. */
static gx_error *fake_ordinal(gx_ordinal_args *a) {
    a->device_ordinal = *(int *)a->ctx;
    return NULL;
}

/* The default stream (NULL). */
static gx_error *fake_stream(gx_stream_args *a) {
    a->stream = NULL;
    return NULL;
}

static gx_api api_full, api_small;

static void init_apis(void) {
    memset(&api_full, 0, sizeof api_full);
    api_full.struct_size = GX_SIZE(gx_api, device_ordinal_get);
    api_full.error_create = fake_error_create;
    api_full.error_destroy = fake_error_destroy;
    api_full.future_create = fake_future_create;
    api_full.future_set_available = fake_set_available;
    api_full.future_set_error = fake_set_error;
    api_full.device_ordinal_get = fake_ordinal;
    api_full.stream_get = fake_stream;
    /* jaxlib 0.5's size (ends at Stream_Get): no futures, no ordinals. */
    api_small = api_full;
    api_small.struct_size = GX_SIZE(gx_api, stream_get);
}

/* ---- frames ---- */
typedef struct {
    gx_frame f;
    gx_buffer in, out;
    int64_t in_dims[2], out_dims[2];
    int32_t arg_type, ret_type;
    void *arg_items[1], *ret_items[1];
    int32_t attr_types[8];
    gx_span spans[8];
    gx_span *names[8];
    void *attr_ptrs[8];
    gx_scalar scalars[8];
    int64_t values[8];
    gx_array arr;
    int ordinal;
} frame;

static void buf(gx_buffer *b, int64_t *dims, int32_t dtype, void *data, int64_t n) {
    memset(b, 0, sizeof *b);
    b->struct_size = GX_SIZE(gx_buffer, dims);
    b->dtype = dtype;
    b->data = data;
    b->rank = 1;
    dims[0] = n;
    b->dims = dims;
}

/* attrs: names sorted as XLA sorts them; value < -1000 leaves one out. */
static void make(frame *fr, const gx_api *api, int ordinal, int32_t dtype, void *in, int64_t nin, void *out,
                 int64_t nout, int64_t comm, int64_t op, int64_t root, int64_t site, const int64_t *perm,
                 int64_t nperm) {
    memset(fr, 0, sizeof *fr);
    fr->ordinal = ordinal;
    gx_frame *f = &fr->f;
    f->struct_size = GX_SIZE(gx_frame, attrs);
    f->api = api;
    f->ctx = (gx_ctx *)&fr->ordinal;
    f->stage = GX_STAGE_EXECUTE;
    buf(&fr->in, fr->in_dims, dtype, in, nin);
    buf(&fr->out, fr->out_dims, dtype, out, nout);
    fr->arg_type = fr->ret_type = GX_ARG_BUFFER;
    fr->arg_items[0] = &fr->in;
    fr->ret_items[0] = &fr->out;
    f->args = (gx_list){GX_SIZE(gx_list, items), NULL, 1, &fr->arg_type, fr->arg_items};
    f->rets = (gx_list){GX_SIZE(gx_list, items), NULL, 1, &fr->ret_type, fr->ret_items};
    const char *names[] = {"comm", "op", "perm", "root", "site"};
    int64_t vals[] = {comm, op, 0, root, site};
    int k = 0;
    for (int i = 0; i < 5; i++) {
        if (i == 2) {
            if (perm == NULL) continue;
            fr->arr = (gx_array){GX_S64, (size_t)nperm, (void *)perm};
            fr->attr_types[k] = GX_ATTR_ARRAY;
            fr->attr_ptrs[k] = &fr->arr;
        } else {
            if (vals[i] < -1000) continue;
            fr->values[k] = vals[i];
            fr->scalars[k] = (gx_scalar){GX_S64, &fr->values[k]};
            fr->attr_types[k] = GX_ATTR_SCALAR;
            fr->attr_ptrs[k] = &fr->scalars[k];
        }
        fr->spans[k] = (gx_span){names[i], strlen(names[i])};
        fr->names[k] = &fr->spans[k];
        k++;
    }
    f->attrs = (gx_attrs){GX_SIZE(gx_attrs, attrs), NULL, k, fr->attr_types, fr->names, fr->attr_ptrs};
}

/* Runs a handler and waits for its future; returns the error (NULL: ok). */
static gx_error *call(gx_error *(*h)(gx_frame *), frame *fr) {
    gx_error *e = h(&fr->f);
    if (e != NULL || fr->f.future == NULL) return e;
    gx_future *fut = fr->f.future;
    pthread_mutex_lock(&fut->mu);
    while (!fut->done) pthread_cond_wait(&fut->cv, &fut->mu);
    pthread_mutex_unlock(&fut->mu);
    CHECK(fut->done == 1, "future settled %d times", fut->done);
    return fut->err;
}

static void expect_error(gx_error *e, int code, const char *needle, const char *what) {
    CHECK(e != NULL, "%s: expected an error containing '%s'", what, needle);
    if (e == NULL) return;
    CHECK(e->code == code, "%s: code %d, want %d (%s)", what, e->code, code, e->msg);
    CHECK(strstr(e->msg, needle) != NULL, "%s: message '%s' lacks '%s'", what, e->msg, needle);
    free(e);
}

/* ---- handshake ---- */
static void test_handshake(void) {
    unsigned char raw[48];
    memset(raw, 0xAB, sizeof raw);
    gx_metadata *md = (gx_metadata *)raw;
    md->struct_size = GX_SIZE(gx_metadata, traits);
    gx_metadata_ext ext = {{GX_SIZE(gx_metadata_ext, metadata), GX_EXT_METADATA, NULL}, md};
    gx_frame f;
    memset(&f, 0, sizeof f);
    f.struct_size = GX_SIZE(gx_frame, attrs);
    f.extension_start = &ext.base;
    f.api = &api_full;
    f.ctx = NULL; /* as at registration */
    f.stage = GX_STAGE_EXECUTE;
    gx_error *(*hs[])(gx_frame *) = {goclJaxAllReduce,         goclJaxAllGather,     goclJaxReduceScatter,
                                     goclJaxBroadcast,         goclJaxAllToAll,      goclJaxPermute,
                                     goclJaxAllReduceCuda,     goclJaxAllGatherCuda, goclJaxReduceScatterCuda,
                                     goclJaxBroadcastCuda,     goclJaxAllToAllCuda,  goclJaxPermuteCuda};
    for (size_t i = 0; i < sizeof hs / sizeof *hs; i++) {
        md->api_version.major_version = md->api_version.minor_version = -1;
        md->traits = 77;
        gx_error *e = hs[i](&f);
        CHECK(e == NULL, "handshake %zu failed: %s", i, e ? e->msg : "");
        CHECK(md->api_version.major_version == 0 && md->api_version.minor_version == 1, "version %d.%d",
              md->api_version.major_version, md->api_version.minor_version);
        CHECK(md->api_version.struct_size == 24, "api_version.struct_size %zu", md->api_version.struct_size);
        CHECK(md->traits == 0, "traits %u", md->traits);
        for (size_t b = 40; b < sizeof raw; b++) CHECK(raw[b] == 0xAB, "byte %zu past the 0.1 struct written", b);
    }
    md->struct_size = 16;
    expect_error(goclJaxAllReduce(&f), GX_INVALID_ARGUMENT, "metadata struct is too small", "small metadata");
    /* Other stages do nothing. */
    f.extension_start = NULL;
    f.stage = 1;
    CHECK(goclJaxAllReduce(&f) == NULL, "prepare stage returned an error");
}

/* ---- decoding errors (no world needed: they fail before Go) ---- */
static void test_decoding(int64_t world) {
    frame fr;
    float a[4], b[4];
    uint8_t p[4], q[4];
    make(&fr, &api_full, 0, GX_PRED, p, 4, q, 4, world, 0, 0, 1, NULL, 0);
    expect_error(call(goclJaxAllReduce, &fr), GX_INVALID_ARGUMENT, "op 0 on bool arrays is not defined", "bool sum");
    make(&fr, &api_full, 0, GX_S16, a, 4, b, 4, world, 0, 0, 1, NULL, 0);
    expect_error(call(goclJaxAllReduce, &fr), GX_INVALID_ARGUMENT, "gocl does not reduce int16", "int16 sum");
    make(&fr, &api_full, 0, GX_F32, a, 4, b, 4, -2000, 0, 0, 1, NULL, 0);
    expect_error(call(goclJaxAllReduce, &fr), GX_INVALID_ARGUMENT, "attribute comm is missing", "no comm");
    make(&fr, &api_full, 0, GX_F32, a, 4, b, 4, world, 0, 0, 1, NULL, 0);
    fr.spans[1] = (gx_span){"opp", 3};
    expect_error(call(goclJaxAllReduce, &fr), GX_INVALID_ARGUMENT, "unknown attribute opp", "typo");
    make(&fr, &api_full, 0, GX_F32, a, 4, b, 4, world, 0, 0, 1, NULL, 0);
    fr.scalars[1].dtype = GX_S32;
    expect_error(call(goclJaxAllReduce, &fr), GX_INVALID_ARGUMENT, "attribute op must be an int64 scalar", "int32 op");
    make(&fr, &api_full, 0, GX_F32, a, 4, b, 4, world, 0, 0, 1, NULL, 0);
    fr.out.dtype = GX_F64;
    expect_error(call(goclJaxAllReduce, &fr), GX_INVALID_ARGUMENT, "argument is float32 but result is float64",
                 "dtype mismatch");
    make(&fr, &api_full, 0, GX_F32, a, 4, b, 4, world, 0, 0, 1, NULL, 0);
    fr.f.args.size = 2;
    expect_error(call(goclJaxAllReduce, &fr), GX_INVALID_ARGUMENT, "expected one argument buffer, got 2", "arity");
    make(&fr, &api_full, 0, GX_F32, a, 4, b, 4, 987654, 0, 0, 1, NULL, 0);
    expect_error(call(goclJaxAllReduce, &fr), GX_FAILED_PRECONDITION, "session 987654 does not exist", "no session");
    make(&fr, &api_full, 7, GX_F32, a, 4, b, 4, world, 0, 0, 1, NULL, 0);
    expect_error(call(goclJaxAllReduce, &fr), GX_FAILED_PRECONDITION, "runs on device 7, which is not one of the 3", "bad ordinal");
    make(&fr, &api_full, 0, GX_F32, a, 4, b, 5, world, 0, 0, 1, NULL, 0);
    expect_error(call(goclJaxAllGather, &fr), GX_INVALID_ARGUMENT, "needs world size 3", "gather size");
    make(&fr, &api_full, 0, GX_F32, a, 4, b, 4, world, 9, 0, 1, NULL, 0);
    expect_error(call(goclJaxAllReduce, &fr), GX_INVALID_ARGUMENT, "op 9 is not a gocl reduction", "bad op");
    int64_t perm[] = {0, 1, 1, 1};
    make(&fr, &api_full, 0, GX_F32, a, 4, b, 4, world, 0, 0, 1, perm, 4);
    expect_error(call(goclJaxPermute, &fr), GX_INVALID_ARGUMENT, "twice", "perm duplicate");
}

/* ---- collectives on a world of N in-process ranks ---- */
#define N 3
#define M 5 /* elements per block */
typedef struct {
    int64_t world;
    int rank;
} job;

static void *rank_main(void *p) {
    job *j = p;
    int r = j->rank;
    frame fr;
    gx_error *e;
    /* all_reduce: every op on float32, int32, bf16 bytes as uint16 patterns */
    float x[M], y[M];
    for (int op = 0; op < 5; op++) {
        for (int i = 0; i < M; i++) x[i] = (float)(r + 1) * (i + 1);
        make(&fr, &api_full, r, GX_F32, x, M, y, M, j->world, op, 0, 100 + op, NULL, 0);
        e = call(goclJaxAllReduce, &fr);
        CHECK(e == NULL, "all_reduce op %d: %s", op, e ? e->msg : "");
        for (int i = 0; i < M; i++) {
            float v = (float)(i + 1), want = op == 0 ? 6 * v : op == 1 ? 6 * v * v * v : op == 2 ? 3 * v
                                                                : op == 3 ? v : 2 * v;
            CHECK(y[i] == want, "rank %d all_reduce op %d [%d] = %g, want %g", r, op, i, y[i], want);
        }
    }
    int64_t li[M], lo[M];
    for (int i = 0; i < M; i++) li[i] = (int64_t)r * 1000 + i;
    make(&fr, &api_full, r, GX_S64, li, M, lo, M, j->world, 2, 0, 110, NULL, 0);
    e = call(goclJaxAllReduce, &fr);
    CHECK(e == NULL && lo[2] == 2002, "int64 max: %s %lld", e ? e->msg : "", (long long)lo[2]);
    uint8_t bi[M] = {0}, bo[M];
    bi[r] = 1;
    make(&fr, &api_full, r, GX_PRED, bi, M, bo, M, j->world, 2, 0, 111, NULL, 0);
    e = call(goclJaxAllReduce, &fr);
    CHECK(e == NULL && bo[0] && bo[1] && bo[2] && !bo[3], "bool max (or): %s", e ? e->msg : "");
    /* all_gather of int16 (moved as bytes) */
    int16_t gi[M], go[N * M];
    for (int i = 0; i < M; i++) gi[i] = (int16_t)(r * 100 + i);
    make(&fr, &api_full, r, GX_S16, gi, M, go, N * M, j->world, 0, 0, 120, NULL, 0);
    e = call(goclJaxAllGather, &fr);
    CHECK(e == NULL, "all_gather: %s", e ? e->msg : "");
    for (int s = 0; s < N; s++)
        for (int i = 0; i < M; i++) CHECK(go[s * M + i] == s * 100 + i, "all_gather [%d][%d] = %d", s, i, go[s * M + i]);
    /* reduce_scatter sum on float64 */
    double ri[N * M], ro[M];
    for (int i = 0; i < N * M; i++) ri[i] = i + r;
    make(&fr, &api_full, r, GX_F64, ri, N * M, ro, M, j->world, 0, 0, 130, NULL, 0);
    e = call(goclJaxReduceScatter, &fr);
    CHECK(e == NULL, "reduce_scatter: %s", e ? e->msg : "");
    for (int i = 0; i < M; i++) CHECK(ro[i] == 3 * (r * M + i) + 3, "reduce_scatter [%d] = %g", i, ro[i]);
    /* broadcast from root 2 */
    for (int i = 0; i < M; i++) x[i] = (float)(r * 10 + i);
    make(&fr, &api_full, r, GX_F32, x, M, y, M, j->world, 0, 2, 140, NULL, 0);
    e = call(goclJaxBroadcast, &fr);
    CHECK(e == NULL && y[1] == 21, "broadcast: %s %g", e ? e->msg : "", y[1]);
    /* all_to_all: block b of rank r is r*10+b */
    int32_t ai[N * 2], ao[N * 2];
    for (int b = 0; b < N; b++) ai[2 * b] = ai[2 * b + 1] = r * 10 + b;
    make(&fr, &api_full, r, GX_S32, ai, N * 2, ao, N * 2, j->world, 0, 0, 150, NULL, 0);
    e = call(goclJaxAllToAll, &fr);
    CHECK(e == NULL, "all_to_all: %s", e ? e->msg : "");
    for (int b = 0; b < N; b++) CHECK(ao[2 * b] == b * 10 + r, "all_to_all block %d = %d", b, ao[2 * b]);
    /* ppermute: 0->1, 1->2 (rank 0 receives nothing: zeros) */
    int64_t perm[] = {0, 1, 1, 2};
    for (int i = 0; i < M; i++) x[i] = (float)(r + 1);
    make(&fr, &api_full, r, GX_F32, x, M, y, M, j->world, 0, 0, 160, perm, 4);
    e = call(goclJaxPermute, &fr);
    CHECK(e == NULL, "ppermute: %s", e ? e->msg : "");
    CHECK(y[0] == (r == 0 ? 0.0f : (float)r), "ppermute on rank %d got %g", r, y[0]);
    return NULL;
}

/* Two call sites started in opposite orders on different ranks still match. */
typedef struct {
    job *j;
    int site;
    float in[64], out[64];
    gx_error *err;
} conc;

static void *conc_main(void *p) {
    conc *c = p;
    frame fr;
    for (int i = 0; i < 64; i++) c->in[i] = (float)(c->site * 1000 + c->j->rank);
    make(&fr, &api_full, c->j->rank, GX_F32, c->in, 64, c->out, 64, c->j->world, 0, 0, c->site, NULL, 0);
    c->err = call(goclJaxAllReduce, &fr);
    return NULL;
}

static void *conc_rank(void *p) {
    job *j = p;
    for (int round = 0; round < 20; round++) {
        conc cs[4];
        pthread_t t[4];
        for (int s = 0; s < 4; s++) {
            /* rank-dependent start order */
            int site = (s + j->rank + round) % 4 + 1;
            cs[s].j = j;
            cs[s].site = site;
            pthread_create(&t[s], NULL, conc_main, &cs[s]);
        }
        for (int s = 0; s < 4; s++) {
            pthread_join(t[s], NULL);
            CHECK(cs[s].err == NULL, "concurrent site %d: %s", cs[s].site, cs[s].err ? cs[s].err->msg : "");
            float want = (float)(3 * cs[s].site * 1000 + 3);
            CHECK(cs[s].out[63] == want, "concurrent site %d got %g want %g", cs[s].site, cs[s].out[63], want);
        }
    }
    return NULL;
}

static void run_ranks(int64_t world, void *(*fn)(void *)) {
    pthread_t t[N];
    job j[N];
    for (int r = 0; r < N; r++) {
        j[r] = (job){world, r};
        pthread_create(&t[r], NULL, fn, &j[r]);
    }
    for (int r = 0; r < N; r++) pthread_join(t[r], NULL);
}

int main(void) {
    init_apis();
    test_handshake();
    char msg[1024] = "";
    int64_t world = 0;
    int rc = goclJaxSessionInit(NULL, 1, 0, N, NULL, &world, msg, sizeof msg);
    CHECK(rc == 0, "session init: %d %s", rc, msg);
    if (rc != 0) return 1;
    test_decoding(world);
    run_ranks(world, rank_main);
    run_ranks(world, conc_rank);
    goclJaxSessionDestroy(world, 0);

    /* The blocking path (jaxlib 0.5's API struct: no futures, no ordinal) on a
     * world of one whose device XLA numbers 0, then ordinal 2048 (as XLA:CPU
     * numbers process 1's device under jax.distributed). */
    const int64_t devs[] = {0};
    rc = goclJaxSessionInit(NULL, 1, 0, 1, devs, &world, msg, sizeof msg);
    CHECK(rc == 0, "session init: %d %s", rc, msg);
    float x[3] = {1, 2, 3}, y[3] = {0};
    frame fr;
    make(&fr, &api_small, 0, GX_F32, x, 3, y, 3, world, 0, 0, 1, NULL, 0);
    gx_error *e = call(goclJaxAllReduce, &fr);
    CHECK(e == NULL && fr.f.future == NULL && y[2] == 3, "blocking all_reduce: %s", e ? e->msg : "");
    goclJaxSessionDestroy(world, 0);
    const int64_t devs2[] = {2048};
    rc = goclJaxSessionInit(NULL, 1, 0, 1, devs2, &world, msg, sizeof msg);
    make(&fr, &api_full, 2048, GX_F32, x, 3, y, 3, world, 0, 0, 1, NULL, 0);
    e = call(goclJaxAllReduce, &fr);
    CHECK(rc == 0 && e == NULL && y[2] == 3, "ordinal 2048: %s", e ? e->msg : msg);
    make(&fr, &api_full, 0, GX_F32, x, 3, y, 3, world, 0, 0, 1, NULL, 0);
    expect_error(call(goclJaxAllReduce, &fr), GX_FAILED_PRECONDITION, "runs on device 0, which is not one of the 1 local devices", "unknown ordinal");
    goclJaxSessionDestroy(world, 0);
    make(&fr, &api_small, 0, GX_F32, x, 3, y, 3, world, 0, 0, 1, NULL, 0);
    expect_error(call(goclJaxAllReduce, &fr), GX_FAILED_PRECONDITION, "does not exist", "destroyed session");

    /* CUDA handlers: decoding is shared; on a machine without the CUDA
     * runtime the call fails with a sentence instead of crashing. */
    make(&fr, &api_full, 0, GX_F32, x, 3, y, 3, 1, 0, 0, 1, NULL, 0);
    e = call(goclJaxAllReduceCuda, &fr);
    if (e != NULL && strstr(e->msg, "cannot load the CUDA runtime") != NULL) {
        expect_error(e, GX_FAILED_PRECONDITION, "gocl.jax all_reduce on CUDA: cannot load the CUDA runtime",
                     "no cudart");
    } else { /* a CUDA machine: the fake stream is not one; any CUDA error is reported, never a crash */
        printf("jaxffi_test: CUDA runtime present; the fake-frame CUDA call returned: %s\n", e ? e->msg : "ok");
        free(e);
    }
    make(&fr, &api_full, 0, GX_PRED, x, 3, y, 3, 1, 0, 0, 1, NULL, 0);
    expect_error(call(goclJaxAllReduceCuda, &fr), GX_INVALID_ARGUMENT, "op 0 on bool arrays", "CUDA decoding");

    rc = goclJaxSessionInit(NULL, 2, 5, 1, NULL, &world, msg, sizeof msg);
    CHECK(rc == 4 && strstr(msg, "world_size=2") != NULL, "bad init: %d %s", rc, msg);
    if (failures) {
        fprintf(stderr, "jaxffi_test: %d failures\n", failures);
        return 1;
    }
    printf("jaxffi_test: ok\n");
    return 0;
}
