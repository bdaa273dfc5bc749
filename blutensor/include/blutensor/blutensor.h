// blutensor/blutensor.h: the umbrella header (everything a model or trainer needs).
#pragma once

#include "blutensor/autograd.h"
#include "blutensor/capture.h"
#include "blutensor/device.h"
#include "blutensor/dtype.h"
#include "blutensor/error.h"
#include "blutensor/json.h"
#include "blutensor/llama.h"
#include "blutensor/nn.h"
#include "blutensor/ops.h"
#include "blutensor/optim.h"
#include "blutensor/random.h"
#include "blutensor/safetensors.h"
#include "blutensor/tensor.h"
