// The subset of the XLA FFI C ABI (xla/ffi/api/c_api.h, FFI API 0.1) that
// gocl's handlers use, declared here under our own names. Field order and
// LP64 offsets are checked below; only these structs are ever touched, and
// the handlers report API 0.1, which every jaxlib from 0.5 up accepts.
#ifndef GOCL_JAX_XLA_FFI_H
#define GOCL_JAX_XLA_FFI_H

#include <stddef.h>
#include <stdint.h>

// The size XLA expects in struct_size: up to and including the last field.
#define GX_SIZE(T, last) (offsetof(T, last) + sizeof(((T *)0)->last))

typedef struct gx_ext {
    size_t struct_size;
    int32_t type; // 1: metadata
    struct gx_ext *next;
} gx_ext;
enum { GX_EXT_METADATA = 1 };

typedef struct {
    size_t struct_size;
    gx_ext *extension_start;
    int32_t major_version, minor_version;
} gx_api_version;

typedef struct {
    size_t struct_size;
    gx_api_version api_version;
    uint32_t traits;
    // API 0.2+ appends state_type_id: never written (older runtimes end here).
} gx_metadata;

typedef struct {
    gx_ext base;
    gx_metadata *metadata;
} gx_metadata_ext;

typedef struct gx_error gx_error;  // opaque XLA_FFI_Error
typedef struct gx_future gx_future; // opaque XLA_FFI_Future
typedef struct gx_ctx gx_ctx;       // opaque XLA_FFI_ExecutionContext

typedef struct {
    size_t struct_size;
    gx_ext *extension_start;
    const char *message;
    int32_t errc; // absl status code
} gx_error_create_args;

typedef struct {
    size_t struct_size;
    gx_ext *extension_start;
    gx_future *future;
} gx_future_args; // Create (future is out), SetAvailable

typedef struct {
    size_t struct_size;
    gx_ext *extension_start;
    gx_future *future;
    gx_error *error;
} gx_future_error_args;

typedef struct {
    size_t struct_size;
    gx_ext *extension_start;
    gx_error *error;
} gx_error_destroy_args;

typedef struct {
    size_t struct_size;
    gx_ext *extension_start;
    gx_ctx *ctx;
    void *stream; // out
} gx_stream_args;

typedef struct {
    size_t struct_size;
    gx_ext *extension_start;
    gx_ctx *ctx;
    int32_t device_ordinal; // out
} gx_ordinal_args;

typedef gx_error *gx_fn(void *args);
typedef struct {
    size_t struct_size;
    gx_ext *extension_start;
    gx_api_version api_version;
    const void *internal_api;
    gx_error *(*error_create)(gx_error_create_args *);
    gx_fn *error_get_message;
    void (*error_destroy)(gx_error_destroy_args *);
    gx_fn *handler_register;
    gx_error *(*stream_get)(gx_stream_args *);
    gx_fn *type_register, *execution_context_get, *state_set, *state_get;
    gx_fn *device_memory_allocate, *device_memory_free, *thread_pool_schedule, *thread_pool_num_threads;
    gx_error *(*future_create)(gx_future_args *);
    gx_error *(*future_set_available)(gx_future_args *);
    gx_error *(*future_set_error)(gx_future_error_args *);
    gx_fn *run_id_get;
    gx_error *(*device_ordinal_get)(gx_ordinal_args *);
} gx_api;

typedef struct {
    size_t struct_size;
    gx_ext *extension_start;
    int32_t dtype;
    void *data;
    int64_t rank;
    int64_t *dims;
} gx_buffer;

typedef struct {
    size_t struct_size;
    gx_ext *extension_start;
    int64_t size;
    int32_t *types; // 1: buffer (2: token, for rets)
    void **items;
} gx_list; // XLA_FFI_Args and XLA_FFI_Rets

typedef struct {
    const char *ptr;
    size_t len;
} gx_span;

typedef struct {
    int32_t dtype;
    void *value;
} gx_scalar;

typedef struct {
    int32_t dtype;
    size_t size;
    void *data;
} gx_array;

typedef struct {
    size_t struct_size;
    gx_ext *extension_start;
    int64_t size;
    int32_t *types; // 1 array, 2 dictionary, 3 scalar, 4 string
    gx_span **names;
    void **attrs;
} gx_attrs;

typedef struct {
    size_t struct_size;
    gx_ext *extension_start;
    const gx_api *api;
    gx_ctx *ctx;
    int32_t stage; // 3: execute
    gx_list args;
    gx_list rets;
    gx_attrs attrs;
    gx_future *future; // out; past struct_size
} gx_frame;

enum { GX_STAGE_EXECUTE = 3 };
enum { GX_ARG_BUFFER = 1 };
enum { GX_ATTR_ARRAY = 1, GX_ATTR_SCALAR = 3 };
enum { // XLA_FFI_DataType (xla PrimitiveType values)
    GX_PRED = 1, GX_S8 = 2, GX_S16 = 3, GX_S32 = 4, GX_S64 = 5, GX_U8 = 6, GX_U16 = 7, GX_U32 = 8,
    GX_U64 = 9, GX_F16 = 10, GX_F32 = 11, GX_F64 = 12, GX_C64 = 15, GX_BF16 = 16, GX_TOKEN = 17, GX_C128 = 18
};
enum { // absl status codes
    GX_INVALID_ARGUMENT = 3, GX_DEADLINE_EXCEEDED = 4, GX_FAILED_PRECONDITION = 9,
    GX_UNIMPLEMENTED = 12, GX_INTERNAL = 13, GX_UNAVAILABLE = 14
};

// LP64 layout of FFI API 0.1 (the values c_api.h's STRUCT_SIZE macros give).
#define GX_CHECK(cond) _Static_assert(cond, #cond)
GX_CHECK(sizeof(gx_ext) == 24);
GX_CHECK(GX_SIZE(gx_api_version, minor_version) == 24);
GX_CHECK(offsetof(gx_metadata, api_version) == 8 && GX_SIZE(gx_metadata, traits) == 36);
GX_CHECK(GX_SIZE(gx_metadata_ext, metadata) == 32);
GX_CHECK(GX_SIZE(gx_error_create_args, errc) == 28);
GX_CHECK(GX_SIZE(gx_future_args, extension_start) == 16 && GX_SIZE(gx_future_args, future) == 24);
GX_CHECK(GX_SIZE(gx_future_error_args, error) == 32);
GX_CHECK(GX_SIZE(gx_error_destroy_args, error) == 24);
GX_CHECK(GX_SIZE(gx_stream_args, stream) == 32);
GX_CHECK(GX_SIZE(gx_ordinal_args, device_ordinal) == 28);
GX_CHECK(offsetof(gx_api, api_version) == 16 && offsetof(gx_api, internal_api) == 40);
GX_CHECK(offsetof(gx_api, error_create) == 48 && offsetof(gx_api, stream_get) == 80);
GX_CHECK(offsetof(gx_api, future_create) == 152 && offsetof(gx_api, future_set_available) == 160);
GX_CHECK(offsetof(gx_api, future_set_error) == 168 && offsetof(gx_api, device_ordinal_get) == 184);
GX_CHECK(GX_SIZE(gx_buffer, dims) == 48 && offsetof(gx_buffer, data) == 24);
GX_CHECK(GX_SIZE(gx_list, items) == 40);
GX_CHECK(sizeof(gx_scalar) == 16 && sizeof(gx_array) == 24 && sizeof(gx_span) == 16);
GX_CHECK(GX_SIZE(gx_attrs, attrs) == 48);
GX_CHECK(offsetof(gx_frame, api) == 16 && offsetof(gx_frame, ctx) == 24 && offsetof(gx_frame, stage) == 32);
GX_CHECK(offsetof(gx_frame, args) == 40 && offsetof(gx_frame, rets) == 80 && offsetof(gx_frame, attrs) == 120);
GX_CHECK(GX_SIZE(gx_frame, attrs) == 168 && offsetof(gx_frame, future) == 168);

// gocl's handlers (one per collective), for jax.ffi.register_ffi_target.
gx_error *goclJaxAllReduce(gx_frame *f);
gx_error *goclJaxAllGather(gx_frame *f);
gx_error *goclJaxReduceScatter(gx_frame *f);
gx_error *goclJaxBroadcast(gx_frame *f);
gx_error *goclJaxAllToAll(gx_frame *f);
gx_error *goclJaxPermute(gx_frame *f);
// The same for platform "CUDA": buffers are device memory, staged through
// host memory on the call's stream (libcudart is opened on the first call).
gx_error *goclJaxAllReduceCuda(gx_frame *f);
gx_error *goclJaxAllGatherCuda(gx_frame *f);
gx_error *goclJaxReduceScatterCuda(gx_frame *f);
gx_error *goclJaxBroadcastCuda(gx_frame *f);
gx_error *goclJaxAllToAllCuda(gx_frame *f);
gx_error *goclJaxPermuteCuda(gx_frame *f);

// Called by Go when a queued call is done: msg NULL means success.
void gocl_jax_finish(const gx_api *api, gx_future *fut, const char *msg, int code);
gx_future *gocl_jax_future(const gx_api *api);

#endif
