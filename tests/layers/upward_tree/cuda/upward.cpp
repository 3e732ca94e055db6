// Not compiled: a file of the cuda/ layer that includes Tensor, for the CTest test
// that checks tools/check_layers.cmake refuses an include pointing up.
#include "core/tensor.h"
