/* Name pasting for the type-generic template files (*_impl.h): each is
 * included once with T = float, SUF = f32 and once with T = double,
 * SUF = f64. */
#ifndef SDPA_TEMPLATE_H
#define SDPA_TEMPLATE_H
#define SDPA_CAT_(a, b) a##_##b
#define SDPA_CAT(a, b) SDPA_CAT_(a, b)
/* NAME(foo) → foo_f32 / foo_f64 */
#define NAME(base) SDPA_CAT(base, SUF)
#define SDPA_PASTE_(a, b) a##b
#define SDPA_PASTE(a, b) SDPA_PASTE_(a, b)
/* EXPC(LOWEST) → SDPA_EXP_LOWEST_f32 / _f64, the constants of vexp.h */
#define EXPC(name) SDPA_PASTE(SDPA_EXP_##name##_, SUF)
/* The SDPA_FLOAT* of T: a tensor stored in it is read where it is. */
#define SDPA_DTYPE_OF_T                                                        \
    (sizeof(T) == sizeof(float) ? SDPA_FLOAT32 : SDPA_FLOAT64)
/* AT(&view, n, h, t) → T* to element [n, h, t, 0] of a validated view. */
#define AT(view, n, h, t) ((T *)(void *)sdpa_at(view, sizeof(T), n, h, t))
/* Calls fn_f32(...) or fn_f64(...) by the problem's dtype. */
#define SDPA_BY_DTYPE(problem, fn, ...)                                        \
    ((problem)->dtype == SDPA_FLOAT32 ? fn##_f32(__VA_ARGS__)                  \
                                      : fn##_f64(__VA_ARGS__))
/* Defines sdpa_<fn>, a path function (sdpa_path_fn of runtime/pool.h) that runs
 * the template's fn_f32 or fn_f64 by the problem's dtype. */
#define SDPA_DEFINE_PATH_FN(fn)                                                \
    int sdpa_##fn(const sdpa_problem *p, const sdpa_plan *plan, int kernel,    \
                  void *scratch, int64_t item, sdpa_where *where)              \
    {                                                                          \
        return SDPA_BY_DTYPE(p, fn, p, plan, kernel, scratch, item, where);    \
    }
#endif
