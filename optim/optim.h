// Everything in ember::optim:
//   optimizer.h  Optimizer, ParamGroup, OptimizerOptions, ParamState
//   sgd.h        SGD, SGDOptions
//   adam.h       Adam, AdamW, AdamOptions, AdamWOptions
#pragma once

#include "optim/adam.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
