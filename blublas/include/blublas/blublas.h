// blublas/blublas.h: the umbrella header of the standalone kernel library.
#pragma once

#include "blublas/check.h"
#include "blublas/device_info.h"
#include "blublas/dtype.h"
#include "blublas/status.h"
#include "blublas/version.h"
