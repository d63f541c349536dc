/* What positions.c shares with the layer's validation. */
#ifndef SDPA_LAYER_POSITIONS_H
#define SDPA_LAYER_POSITIONS_H

#include <stdbool.h>

/* A sinusoidal / RoPE base the positions accept (positions.c): 0 (the
 * default 10000), or finite and at least 1. */
bool sdpa_position_base_ok(double base);

#endif /* SDPA_LAYER_POSITIONS_H */
