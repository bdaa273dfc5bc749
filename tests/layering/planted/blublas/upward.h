// A planted violation: blublas including blutensor. check_layering.cmake must reject this file.
#include "blutensor/tensor.h"
