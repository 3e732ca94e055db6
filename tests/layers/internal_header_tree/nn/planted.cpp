// Not compiled: an nn/ file that includes a header internal to core/ops, for the
// CTest test that checks tools/check_layers.cmake refuses it.
#include "core/ops/layouts.h"
