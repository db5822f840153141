// XLA FFI entry points: the metadata handshake, then decoding of buffers and
// attributes. All of this is plain C, so the handshake (ctx NULL) never needs
// the Go runtime; a decoded call goes to Go (goclJaxSubmit) to be run.
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#include "memory.h"
#include "xla_ffi.h"
#include "_cgo_export.h"

// Collective kinds: gocl's wire codes (runtime/wire), which Go checks again.
enum { K_ALLREDUCE = 1, K_BROADCAST = 2, K_ALLGATHER = 4, K_REDUCESCATTER = 5, K_ALLTOALL = 6, K_PERMUTE = 9 };

static const char *kind_name(int kind) {
    switch (kind) {
    case K_ALLREDUCE: return "all_reduce";
    case K_BROADCAST: return "broadcast";
    case K_ALLGATHER: return "all_gather";
    case K_REDUCESCATTER: return "reduce_scatter";
    case K_ALLTOALL: return "all_to_all";
    case K_PERMUTE: return "ppermute";
    }
    return "?";
}

static gx_error *make_error(const gx_api *api, int code, const char *msg) {
    gx_error_create_args a = {GX_SIZE(gx_error_create_args, errc), NULL, msg, code};
    return api->error_create(&a);
}

static gx_error *fail(const gx_api *api, int code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return make_error(api, code, msg);
}

void gocl_jax_finish(const gx_api *api, gx_future *fut, const char *msg, int code) {
    if (msg == NULL) {
        gx_future_args a = {GX_SIZE(gx_future_args, future), NULL, fut};
        gx_error *e = api->future_set_available(&a);
        if (e != NULL) {
            gx_error_destroy_args d = {GX_SIZE(gx_error_destroy_args, error), NULL, e};
            api->error_destroy(&d);
        }
        return;
    }
    gx_future_error_args a = {GX_SIZE(gx_future_error_args, error), NULL, fut, make_error(api, code, msg)};
    gx_error *e = api->future_set_error(&a);
    if (e != NULL) {
        gx_error_destroy_args d = {GX_SIZE(gx_error_destroy_args, error), NULL, e};
        api->error_destroy(&d);
    }
}

// gocl datatype (kernels.DataType) of an XLA element type for reductions;
// -1 when gocl does not reduce it.
static int reduce_type(int32_t t) {
    switch (t) {
    case GX_S8: return 0;
    case GX_U8: return 1;
    case GX_PRED: return 1; // max/min only: logical or/and on 0/1 bytes
    case GX_S32: return 2;
    case GX_U32: return 3;
    case GX_S64: return 4;
    case GX_U64: return 5;
    case GX_F16: return 6;
    case GX_F32: return 7;
    case GX_F64: return 8;
    case GX_BF16: return 9;
    }
    return -1;
}

static int elem_size(int32_t t) {
    switch (t) {
    case GX_PRED: case GX_S8: case GX_U8: return 1;
    case GX_S16: case GX_U16: case GX_F16: case GX_BF16: return 2;
    case GX_S32: case GX_U32: case GX_F32: return 4;
    case GX_S64: case GX_U64: case GX_F64: case GX_C64: return 8;
    case GX_C128: return 16;
    }
    return 0;
}

static const char *type_name(int32_t t) {
    static const char *names[] = {"invalid", "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                  "uint64", "float16", "float32", "float64", "?", "?", "complex64", "bfloat16",
                                  "token", "complex128"};
    return t >= 0 && t < (int32_t)(sizeof names / sizeof *names) ? names[t] : "unknown";
}

typedef struct {
    int64_t comm, op, root, site;
    const int64_t *perm;
    int64_t nperm;
} attrs;

static int span_is(const gx_span *s, const char *name) {
    return s != NULL && s->len == strlen(name) && memcmp(s->ptr, name, s->len) == 0;
}

// decode_attrs reads gocl's int64 attributes: comm, op, root, site (scalars)
// and perm (array). Unknown names are errors, so a typo is not ignored.
static gx_error *decode_attrs(const gx_frame *f, const char *what, attrs *out) {
    memset(out, 0, sizeof *out);
    out->comm = -1;
    const gx_attrs *a = &f->attrs;
    for (int64_t i = 0; i < a->size; i++) {
        const gx_span *name = a->names[i];
        int nlen = name ? (int)name->len : 0;
        const char *nptr = name ? name->ptr : "";
        if (span_is(name, "perm")) {
            const gx_array *arr = a->attrs[i];
            if (a->types[i] != GX_ATTR_ARRAY || arr->dtype != GX_S64)
                return fail(f->api, GX_INVALID_ARGUMENT, "gocl.jax %s: attribute perm must be an int64 array", what);
            out->perm = arr->data;
            out->nperm = (int64_t)arr->size;
            continue;
        }
        int64_t *slot = span_is(name, "comm") ? &out->comm
                      : span_is(name, "op")   ? &out->op
                      : span_is(name, "root") ? &out->root
                      : span_is(name, "site") ? &out->site
                                              : NULL;
        if (slot == NULL)
            return fail(f->api, GX_INVALID_ARGUMENT,
                        "gocl.jax %s: unknown attribute %.*s (gocl takes comm, op, root, site, perm)", what, nlen, nptr);
        const gx_scalar *s = a->attrs[i];
        if (a->types[i] != GX_ATTR_SCALAR || s->dtype != GX_S64)
            return fail(f->api, GX_INVALID_ARGUMENT,
                        "gocl.jax %s: attribute %.*s must be an int64 scalar (pass np.int64(...))", what, nlen, nptr);
        *slot = *(const int64_t *)s->value;
    }
    if (out->comm < 0)
        return fail(f->api, GX_INVALID_ARGUMENT,
                    "gocl.jax %s: attribute comm is missing (call through gocl.jax, which passes it)", what);
    return NULL;
}

static gx_error *buffer(const gx_frame *f, const gx_list *l, const char *side, const char *what, gx_buffer **out,
                        int64_t *elems) {
    if (l->size != 1 || l->types[0] != GX_ARG_BUFFER)
        return fail(f->api, GX_INVALID_ARGUMENT, "gocl.jax %s: expected one %s buffer, got %lld %s", what, side,
                    (long long)l->size, side);
    gx_buffer *b = l->items[0];
    int64_t n = 1;
    for (int64_t d = 0; d < b->rank; d++) n *= b->dims[d];
    *out = b;
    *elems = n;
    return NULL;
}

// ordinal is the device of this call (0 where the runtime cannot tell).
static int32_t ordinal(const gx_frame *f) {
    const gx_api *api = f->api;
    if (api->struct_size < GX_SIZE(gx_api, device_ordinal_get) || api->device_ordinal_get == NULL || f->ctx == NULL)
        return 0;
    gx_ordinal_args a = {GX_SIZE(gx_ordinal_args, device_ordinal), NULL, f->ctx, 0};
    gx_error *e = api->device_ordinal_get(&a);
    if (e != NULL) {
        gx_error_destroy_args d = {GX_SIZE(gx_error_destroy_args, error), NULL, e};
        api->error_destroy(&d);
        return 0;
    }
    return a.device_ordinal;
}

// A decoded call, ready for goclJaxSubmit.
typedef struct {
    void *in, *out;
    int64_t nin, nout;   // elements of dtype
    size_t bin, bout;    // bytes
    int dtype;
    attrs at;
} decoded;

static gx_error *run_cpu(gx_frame *f, int kind, decoded *d);
static gx_error *run_cuda(gx_frame *f, int kind, decoded *d);

static gx_error *handle(gx_frame *f, int kind, int cuda) {
    if (f == NULL || f->api == NULL) return NULL; // nothing to answer to
    const char *what = kind_name(kind);
    // Registration calls the handler once with a metadata extension and ctx
    // NULL: answer API 0.1 and no traits, touching nothing else.
    for (gx_ext *e = f->extension_start; e != NULL; e = e->next) {
        if (e->type != GX_EXT_METADATA) continue;
        gx_metadata_ext *m = (gx_metadata_ext *)e;
        if (e->struct_size < GX_SIZE(gx_metadata_ext, metadata) || m->metadata == NULL ||
            m->metadata->struct_size < GX_SIZE(gx_metadata, traits))
            return fail(f->api, GX_INVALID_ARGUMENT, "gocl.jax %s: the runtime's metadata struct is too small", what);
        m->metadata->api_version.struct_size = GX_SIZE(gx_api_version, minor_version);
        m->metadata->api_version.extension_start = NULL;
        m->metadata->api_version.major_version = 0;
        m->metadata->api_version.minor_version = 1;
        m->metadata->traits = 0;
        return NULL;
    }
    if (f->stage != GX_STAGE_EXECUTE) return NULL;

    gx_buffer *in, *out;
    int64_t nin, nout;
    gx_error *err;
    attrs at;
    if ((err = buffer(f, &f->args, "argument", what, &in, &nin)) != NULL) return err;
    if ((err = buffer(f, &f->rets, "result", what, &out, &nout)) != NULL) return err;
    if ((err = decode_attrs(f, what, &at)) != NULL) return err;
    if (in->dtype != out->dtype)
        return fail(f->api, GX_INVALID_ARGUMENT, "gocl.jax %s: argument is %s but result is %s", what,
                    type_name(in->dtype), type_name(out->dtype));
    int size = elem_size(in->dtype);
    if (size == 0)
        return fail(f->api, GX_INVALID_ARGUMENT, "gocl.jax %s: element type %s is not an array type gocl moves", what,
                    type_name(in->dtype));
    int dtype = 1; // data movement: bytes
    int64_t unit = size;
    if (kind == K_ALLREDUCE || kind == K_REDUCESCATTER) {
        dtype = reduce_type(in->dtype);
        if (dtype < 0)
            return fail(f->api, GX_INVALID_ARGUMENT,
                        "gocl.jax %s: gocl does not reduce %s (bool, int8/32/64, uint8/32/64, float16/32/64 and "
                        "bfloat16 are reduced; cast first)", what, type_name(in->dtype));
        if (in->dtype == GX_PRED && at.op != 2 && at.op != 3)
            return fail(f->api, GX_INVALID_ARGUMENT,
                        "gocl.jax %s: op %lld on bool arrays is not defined: use 'max' (logical or) or 'min' "
                        "(logical and)", what, (long long)at.op);
        unit = 1;
    }
    decoded d = {in->data, out->data, nin * unit, nout * unit, (size_t)(nin * size), (size_t)(nout * size), dtype, at};
    return cuda ? run_cuda(f, kind, &d) : run_cpu(f, kind, &d);
}

// gocl_jax_future makes an XLA future for a call that finishes later; NULL
// where the runtime predates futures (the caller then waits).
gx_future *gocl_jax_future(const gx_api *api) {
    if (api->struct_size < GX_SIZE(gx_api, future_set_error) || api->future_create == NULL) return NULL;
    gx_future_args a = {GX_SIZE(gx_future_args, extension_start), NULL, NULL};
    gx_error *e = api->future_create(&a);
    if (e != NULL) {
        gx_error_destroy_args d = {GX_SIZE(gx_error_destroy_args, error), NULL, e};
        api->error_destroy(&d);
        return NULL;
    }
    return a.future;
}

// run_cpu runs the call; Go makes a future (gocl_jax_future) only when the
// call has to wait for others and cannot finish on this thread.
static gx_error *run_cpu(gx_frame *f, int kind, decoded *d) {
    char msg[1024] = "";
    gx_future *fut = NULL;
    const gx_api *api = f->api;
    gocl_jax_prepare_result(d->out, d->bout);
    int code = goclJaxSubmit(d->at.comm, ordinal(f), kind, d->in, d->out, d->nin, d->nout, d->dtype, d->at.op,
                             d->at.root, d->at.site, (int64_t *)d->at.perm, d->at.nperm, (gx_api *)api, &fut, msg,
                             sizeof msg);
    if (code != 0) {
        if (fut != NULL) gocl_jax_finish(api, fut, msg, code); // XLA still owns it: settle it
        return make_error(api, code, msg);
    }
    if (fut != NULL) f->future = fut;
    return NULL;
}

// ---- CUDA: stage through host memory on the call's stream ----
// libcudart is opened on the first CUDA call (never at load or registration,
// so machines without CUDA build, load and register alike). XLA's CUDA
// runtime has loaded it already; any CUDA 12 or 13 runtime will do.
typedef int (*memcpy_async_fn)(void *, const void *, size_t, int, void *);
typedef int (*sync_fn)(void *);
typedef const char *(*errstr_fn)(int);
static struct {
    pthread_once_t once;
    memcpy_async_fn memcpy_async;
    sync_fn sync;
    errstr_fn errstr;
    char why[512];
} cudart = {PTHREAD_ONCE_INIT};

static void load_cudart(void) {
    const char *names[] = {"libcudart.so.12", "libcudart.so.13", "libcudart.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof *names && h == NULL; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(cudart.why, sizeof cudart.why, "cannot load the CUDA runtime (libcudart.so.12/.13): %s", dlerror());
        return;
    }
    cudart.memcpy_async = (memcpy_async_fn)dlsym(h, "cudaMemcpyAsync");
    cudart.sync = (sync_fn)dlsym(h, "cudaStreamSynchronize");
    cudart.errstr = (errstr_fn)dlsym(h, "cudaGetErrorString");
    if (!cudart.memcpy_async || !cudart.sync || !cudart.errstr)
        snprintf(cudart.why, sizeof cudart.why, "the CUDA runtime lacks cudaMemcpyAsync/cudaStreamSynchronize");
}

enum { CUDA_D2H = 2, CUDA_H2D = 1 };

static int copy_sync(void *dst, const void *src, size_t n, int dir, void *stream, char *why, size_t whylen) {
    int rc = n ? cudart.memcpy_async(dst, src, n, dir, stream) : 0;
    if (rc == 0) rc = cudart.sync(stream);
    if (rc != 0) snprintf(why, whylen, "%s", cudart.errstr(rc));
    return rc;
}

// run_cuda copies the input to host memory, runs the collective there
// (blocking: XLA:GPU thunks finish on return), and copies the result back,
// all ordered on XLA's stream for this call.
static gx_error *run_cuda(gx_frame *f, int kind, decoded *d) {
    const char *what = kind_name(kind);
    pthread_once(&cudart.once, load_cudart);
    if (cudart.why[0]) return fail(f->api, GX_FAILED_PRECONDITION, "gocl.jax %s on CUDA: %s", what, cudart.why);
    gx_stream_args sa = {GX_SIZE(gx_stream_args, stream), NULL, f->ctx, NULL};
    gx_error *e = f->api->stream_get(&sa);
    if (e != NULL) return e;
    void *hin = malloc(d->bin ? d->bin : 1), *hout = malloc(d->bout ? d->bout : 1);
    char why[512], msg[1024] = "";
    gx_error *res = NULL;
    if (hout != NULL) gocl_jax_prepare_result(hout, d->bout); // fresh malloc'd memory too
    if (hin == NULL || hout == NULL) {
        res = fail(f->api, GX_INTERNAL, "gocl.jax %s on CUDA: out of host memory staging %zu bytes", what,
                   d->bin + d->bout);
    } else if (copy_sync(hin, d->in, d->bin, CUDA_D2H, sa.stream, why, sizeof why) != 0) {
        res = fail(f->api, GX_INTERNAL, "gocl.jax %s on CUDA: copying the input to the host failed: %s", what, why);
    } else {
        int code = goclJaxSubmit(d->at.comm, ordinal(f), kind, hin, hout, d->nin, d->nout, d->dtype, d->at.op,
                                 d->at.root, d->at.site, (int64_t *)d->at.perm, d->at.nperm, (gx_api *)f->api, NULL,
                                 msg, sizeof msg);
        if (code != 0)
            res = make_error(f->api, code, msg);
        else if (copy_sync(d->out, hout, d->bout, CUDA_H2D, sa.stream, why, sizeof why) != 0)
            res = fail(f->api, GX_INTERNAL, "gocl.jax %s on CUDA: copying the result to the device failed: %s", what,
                       why);
    }
    free(hin);
    free(hout);
    return res;
}

gx_error *goclJaxAllReduce(gx_frame *f) { return handle(f, K_ALLREDUCE, 0); }
gx_error *goclJaxAllGather(gx_frame *f) { return handle(f, K_ALLGATHER, 0); }
gx_error *goclJaxReduceScatter(gx_frame *f) { return handle(f, K_REDUCESCATTER, 0); }
gx_error *goclJaxBroadcast(gx_frame *f) { return handle(f, K_BROADCAST, 0); }
gx_error *goclJaxAllToAll(gx_frame *f) { return handle(f, K_ALLTOALL, 0); }
gx_error *goclJaxPermute(gx_frame *f) { return handle(f, K_PERMUTE, 0); }
gx_error *goclJaxAllReduceCuda(gx_frame *f) { return handle(f, K_ALLREDUCE, 1); }
gx_error *goclJaxAllGatherCuda(gx_frame *f) { return handle(f, K_ALLGATHER, 1); }
gx_error *goclJaxReduceScatterCuda(gx_frame *f) { return handle(f, K_REDUCESCATTER, 1); }
gx_error *goclJaxBroadcastCuda(gx_frame *f) { return handle(f, K_BROADCAST, 1); }
gx_error *goclJaxAllToAllCuda(gx_frame *f) { return handle(f, K_ALLTOALL, 1); }
gx_error *goclJaxPermuteCuda(gx_frame *f) { return handle(f, K_PERMUTE, 1); }
