/* The online softmax engine, instantiated for float and double. */
#include "online_softmax.h"
#include "rows.h"
#include "vexp.h"

#include <cblas.h>
#include <math.h>

#define SDPA_TEMPLATE "online_softmax_impl.h"
#include "instantiate.h"
