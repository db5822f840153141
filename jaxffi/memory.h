// Result memory (memory.c): how XLA's result buffers are kept resident.
#ifndef GOCL_JAX_MEMORY_H
#define GOCL_JAX_MEMORY_H
#include <stddef.h>

int gocl_jax_keep_freed_memory(size_t keep_bytes);
void gocl_jax_prepare_result(void *p, size_t n);

#endif
