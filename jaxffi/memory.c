// Result memory. XLA:CPU hands every call a result buffer from glibc's
// malloc; when it is fresh memory (new heap, or mmap'd and unmapped on
// every call) the collective pays a page fault per 4 KiB written, which on
// this VM class costs more than the collective (16 MiB, one process: 7.6 ms
// to fault and write fresh 4 KiB pages, 1.7 ms with huge pages, 0.73 ms to
// write resident ones; the numpy API's all_reduce of 16 MiB over 2
// processes takes about 4 ms), and each fault inside the collective stalls
// the peer too.
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "memory.h"

// gocl_jax_keep_freed_memory makes glibc's malloc keep freed memory for
// reuse, so the next call's result lands on resident pages: no mmap per
// large block (by default every block over the dynamic threshold, and
// always over 32 MiB, is mapped and unmapped per call; 64 MiB: 16384 faults
// a call), and no return of the heap's free top to the kernel below
// keep_bytes (by default it is trimmed at twice the threshold, which two
// 16 MiB results freed together exceed). Returns 1 when applied, 0 where the
// user tunes malloc through the environment (MALLOC_*_, GLIBC_TUNABLES'
// glibc.malloc) or this is not glibc.
int gocl_jax_keep_freed_memory(size_t keep_bytes) {
#ifdef __GLIBC__
    const char *t = getenv("GLIBC_TUNABLES");
    if (getenv("MALLOC_MMAP_THRESHOLD_") || getenv("MALLOC_TRIM_THRESHOLD_") || getenv("MALLOC_MMAP_MAX_") ||
        getenv("MALLOC_TOP_PAD_") || (t != NULL && strstr(t, "glibc.malloc.") != NULL))
        return 0;
    return mallopt(M_TRIM_THRESHOLD, (int)keep_bytes) && mallopt(M_MMAP_MAX, 0);
#else
    (void)keep_bytes;
    return 0;
#endif
}

// A result that still lands on fresh memory (malloc tuned by the user, a
// thread's arena) is prepared before the collective starts. Asking for
// transparent huge pages on its whole 2 MiB blocks first (as numpy does for
// its large arrays) turns 4096 faults per 16 MiB into ~8. Then the result is
// populated writable (MADV_POPULATE_WRITE, Linux 5.14+; contents untouched,
// so an aliased argument survives), so no fault happens inside the
// collective, where it would stall the peer, and on a loaded host cost a
// sleep and a wake-up (64 MiB, 2 processes: a fresh numpy result took 101
// ms, median, and up to 809 ms, against 52 ms for a reused one). A buffer
// resident at its first, middle and last page is left alone: populating it
// anyway walks its page tables (~160 us at 64 MiB). Where THP or populate is
// not available this changes nothing.
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
enum { HUGE = 2 << 20, PREPARE_MIN = 1 << 20, PAGE = 4096 };

static int resident(uintptr_t page) {
    unsigned char v = 0;
    return mincore((void *)page, PAGE, &v) == 0 && (v & 1);
}

void gocl_jax_prepare_result(void *p, size_t n) {
    if (n < PREPARE_MIN) return;
    uintptr_t lo = ((uintptr_t)p + PAGE - 1) & ~(uintptr_t)(PAGE - 1), hi = ((uintptr_t)p + n) & ~(uintptr_t)(PAGE - 1);
    if (hi <= lo || (resident(lo) && resident(lo + ((hi - lo) / 2 & ~(uintptr_t)(PAGE - 1))) && resident(hi - PAGE)))
        return;
    uintptr_t hlo = ((uintptr_t)p + HUGE - 1) & ~(uintptr_t)(HUGE - 1), hhi = ((uintptr_t)p + n) & ~(uintptr_t)(HUGE - 1);
    if (hhi > hlo) madvise((void *)hlo, hhi - hlo, MADV_HUGEPAGE);
    madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
}
