// Everything in ember::optim:
//   optimizer.h  Optimizer, ParamGroup, OptimizerOptions, ParamState
//   sgd.h        SGD, SGDOptions
//   adam.h       Adam, AdamW, AdamOptions, AdamWOptions
//   lr_scheduler.h  LRScheduler, StepLR, CosineAnnealingLR, LinearLR, SequentialLR,
//                   ChainedScheduler
#pragma once

#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
