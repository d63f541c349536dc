/*
 * ctest abi_struct_growth / abi_struct_growth_grown: a caller compiled with
 * libsdpa 1.0's struct sizes (sdpa_forward_args 624 bytes, sdpa_allocator
 * 32) keeps working — against this library, and against a build of it whose
 * structs have grown by one appended field (SDPA_ABI_TEST_APPENDED_FIELD,
 * defined for the second binary and its library only), as every later 1.x
 * release's will. The 1.0-sized structs end where an unreadable page
 * begins, so a library that read one byte past struct_size would crash.
 *
 * The computation is the two-token example of docs/SEMANTICS.md; the
 * results must equal, bit for bit, those of a call with today's full size.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <sdpa.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

/* The frozen sizes of 1.0; never sizeof. */
enum { ARGS_SIZE_V1 = 624, ALLOCATOR_SIZE_V1 = 32 };

_Static_assert(offsetof(sdpa_forward_args, lse) + sizeof(sdpa_tensor) ==
                   ARGS_SIZE_V1,
               "1.0's sdpa_forward_args ends after lse");
_Static_assert(offsetof(sdpa_allocator, opaque) + sizeof(void *) ==
                   ALLOCATOR_SIZE_V1,
               "1.0's sdpa_allocator ends after opaque");
#ifdef SDPA_ABI_TEST_APPENDED_FIELD
_Static_assert(sizeof(sdpa_forward_args) > ARGS_SIZE_V1 &&
                   sizeof(sdpa_allocator) > ALLOCATOR_SIZE_V1,
               "the test build's structs have grown");
#endif

/* Two pages, the second unreadable: guarded(n) is n bytes that end at it. */
typedef struct guard {
    unsigned char *pages;
    size_t page;
} guard;

static guard guard_make(void)
{
    guard g;
    g.page = (size_t)sysconf(_SC_PAGESIZE);
    void *mem = mmap(NULL, 2 * g.page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(mem != MAP_FAILED);
    g.pages = mem;
    assert_int_equal(mprotect(g.pages + g.page, g.page, PROT_NONE), 0);
    return g;
}

static void *guarded(const guard *g, size_t bytes)
{
    return g->pages + g->page - bytes;
}

static void guard_free(guard *g)
{
    munmap(g->pages, 2 * g->page);
}

/* Q = [[1,0],[0,1]], K = [[1,1],[2,0]], V = [[1,0,0],[0,1,0]]. */
static float q[4] = {1, 0, 0, 1}, k[4] = {1, 1, 2, 0};
static float v[6] = {1, 0, 0, 0, 1, 0};

static sdpa_forward_args example(float *out, float *lse)
{
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT32;
    a.q = sdpa_tensor_bhtd(q, 1, 1, 2, 2);
    a.k = sdpa_tensor_bhtd(k, 1, 1, 2, 2);
    a.v = sdpa_tensor_bhtd(v, 1, 1, 2, 3);
    a.out = sdpa_tensor_bhtd(out, 1, 1, 2, 3);
    a.lse = sdpa_tensor_bhtd(lse, 1, 1, 2, 1);
    return a;
}

static void check_example(const float out[6])
{
    static const double expect[6] = {0.3302, 0.6698, 0, 0.6698, 0.3302, 0};
    for (int e = 0; e < 6; e++)
        assert_float_equal(out[e], expect[e], 1e-4);
}

static void test_v1_sized_args(void **state)
{
    (void)state;
    sdpa_ctx *ctx;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    float full_out[6], full_lse[2], out[6], lse[2];
    sdpa_forward_args full = example(full_out, full_lse);
    assert_int_equal(sdpa_forward(ctx, &full), SDPA_OK);
    check_example(full_out);

    guard g = guard_make();
    sdpa_forward_args a = example(out, lse);
    a.struct_size = ARGS_SIZE_V1;
    void *v1 = guarded(&g, ARGS_SIZE_V1);
    memcpy(v1, &a, ARGS_SIZE_V1);
    memset(out, 0xff, sizeof out);
    assert_int_equal(sdpa_forward(ctx, v1), SDPA_OK);
    assert_string_equal(sdpa_ctx_last_error(ctx), "");
    assert_memory_equal(out, full_out, sizeof out);
    assert_memory_equal(lse, full_lse, sizeof lse);
    size_t bytes = 0;
    assert_int_equal(sdpa_forward_workspace(ctx, v1, &bytes), SDPA_OK);

    /* One byte short of 1.0 is refused, and says so. */
    ((sdpa_forward_args *)guarded(&g, ARGS_SIZE_V1))->struct_size =
        ARGS_SIZE_V1 - 1;
    assert_int_equal(sdpa_forward(ctx, guarded(&g, ARGS_SIZE_V1)),
                     SDPA_ERR_STRUCT_SIZE);
    assert_non_null(strstr(sdpa_ctx_last_error(ctx), "624"));
    guard_free(&g);
    sdpa_ctx_destroy(ctx);
}

/* A caller newer than the library: a zero tail is accepted, a nonzero one
 * refused; with the appended field, the field itself is known. */
static void test_larger_args(void **state)
{
    (void)state;
    sdpa_ctx *ctx;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    float out[6], lse[2];
    struct {
        sdpa_forward_args a;
        unsigned char tail[16];
    } big;
    memset(&big, 0, sizeof big);
    big.a = example(out, lse);
    big.a.struct_size = sizeof big;
    assert_int_equal(sdpa_forward(ctx, &big.a), SDPA_OK);
    check_example(out);
    big.tail[15] = 1;
    assert_int_equal(sdpa_forward(ctx, &big.a), SDPA_ERR_STRUCT_TAIL);
#ifdef SDPA_ABI_TEST_APPENDED_FIELD
    big.tail[15] = 0;
    big.a.abi_test_appended = 7; /* a field this build knows */
    assert_int_equal(sdpa_forward(ctx, &big.a), SDPA_OK);
#endif
    sdpa_ctx_destroy(ctx);
}

typedef struct counter {
    int allocs, frees;
} counter;

static void *count_alloc(void *opaque, size_t size, size_t alignment)
{
    ((counter *)opaque)->allocs++;
    void *p = NULL;
    return posix_memalign(
               &p, alignment < sizeof(void *) ? sizeof(void *) : alignment,
               size ? size : 1) == 0
               ? p
               : NULL;
}

static void count_free(void *opaque, void *ptr, size_t size)
{
    (void)size;
    ((counter *)opaque)->frees++;
    free(ptr);
}

static void test_v1_sized_allocator(void **state)
{
    (void)state;
    counter c = {0, 0};
    guard g = guard_make();
    sdpa_allocator al;
    memset(&al, 0, sizeof al);
    al.struct_size = ALLOCATOR_SIZE_V1;
    al.alloc = count_alloc;
    al.free = count_free;
    al.opaque = &c;
    void *v1 = guarded(&g, ALLOCATOR_SIZE_V1);
    memcpy(v1, &al, ALLOCATOR_SIZE_V1);
    sdpa_ctx *ctx = NULL;
    assert_int_equal(sdpa_ctx_create_with_allocator(&ctx, v1), SDPA_OK);
    float out[6], lse[2];
    sdpa_forward_args a = example(out, lse);
    assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
    check_example(out);
    sdpa_ctx_destroy(ctx);
    assert_true(c.allocs > 0);
    assert_int_equal(c.allocs, c.frees);

    ((sdpa_allocator *)v1)->struct_size = ALLOCATOR_SIZE_V1 - 1;
    ctx = NULL;
    assert_int_equal(sdpa_ctx_create_with_allocator(&ctx, v1),
                     SDPA_ERR_STRUCT_SIZE);
    assert_null(ctx);
    guard_free(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v1_sized_args),
        cmocka_unit_test(test_larger_args),
        cmocka_unit_test(test_v1_sized_allocator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
