/* The paths' work items: each computes one item of a plan (sdpa_path_fn). */
#ifndef SDPA_PATHS_PATHS_H
#define SDPA_PATHS_PATHS_H

#include "runtime/pool.h"

int sdpa_materialised_item(const sdpa_problem *problem, const sdpa_plan *plan,
                           int kernel, void *scratch, int64_t item,
                           sdpa_where *where);
int sdpa_tiled_item(const sdpa_problem *problem, const sdpa_plan *plan,
                    int kernel, void *scratch, int64_t item, sdpa_where *where);
int sdpa_decode_chunk_item(const sdpa_problem *problem, const sdpa_plan *plan,
                           int kernel, void *scratch, int64_t item,
                           sdpa_where *where);
int sdpa_decode_merge_item(const sdpa_problem *problem, const sdpa_plan *plan,
                           int kernel, void *scratch, int64_t item,
                           sdpa_where *where);

#endif /* SDPA_PATHS_PATHS_H */
