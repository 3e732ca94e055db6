// Everything in ember::nn, for programs that want it all:
//   module.h      Module: parameters, buffers, children, train/eval, to(), state_dict
//   linear.h      Linear, LinearOptions
//   activation.h  ReLU, GELU, Tanh, Sigmoid
//   dropout.h     Dropout, DropoutOptions
//   sequential.h  Sequential
//   container.h   ModuleList, ModuleDict
//   flatten.h     Flatten, FlattenOptions
//   clip_grad.h   utils::clip_grad_norm_
//   loss.h        MSELoss, MSELossOptions
//   functional.h  functional::linear, mse_loss, relu, gelu, tanh, sigmoid, dropout
//   init.h        init::kaiming_uniform_, xavier_uniform_, normal_, zeros_, ...
//   data.h        Dataset, TensorDataset, DataLoader
//   checkpoint.h  Checkpoint (model, optimizer, scheduler, loader, your entries),
//                 save / load
#pragma once

#include "nn/activation.h"
#include "nn/checkpoint.h"
#include "nn/clip_grad.h"
#include "nn/container.h"
#include "nn/data.h"
#include "nn/dropout.h"
#include "nn/flatten.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/sequential.h"
