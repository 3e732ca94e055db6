// Everything in ember::nn, for programs that want it all:
//   module.h      Module: parameters, buffers, children, train/eval, to(), state_dict
//   linear.h      Linear, LinearOptions
//   conv.h        Conv1d, Conv2d, ConvTranspose2d and their options, ExpandingInt2, kSame
//   pooling.h     MaxPool2d, AvgPool2d, AdaptiveAvgPool2d and their options
//   batchnorm.h   BatchNorm1d, BatchNorm2d, GroupNorm and their options
//   embedding.h   Embedding, EmbeddingOptions
//   normalization.h LayerNorm, LayerNormOptions
//   activation.h  ReLU, GELU, Tanh, Sigmoid, Softmax, LogSoftmax
//   dropout.h     Dropout, Dropout2d, DropoutOptions
//   sequential.h  Sequential
//   container.h   ModuleList, ModuleDict
//   flatten.h     Flatten, FlattenOptions
//   clip_grad.h   utils::clip_grad_norm_
//   loss.h        MSELoss, CrossEntropyLoss, NLLLoss, BCELoss, BCEWithLogitsLoss, L1Loss
//                 and their options
//   functional.h  functional::linear, mse_loss, cross_entropy, nll_loss, binary_cross_entropy
//                 (_with_logits), l1_loss, embedding, one_hot, layer_norm, softmax,
//                 log_softmax, relu, gelu, tanh, sigmoid, softplus, dropout
//   functional_conv.h functional::conv2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d,
//                 batch_norm, group_norm, pad, unfold, fold, dropout2d and their FuncOptions
//   init.h        init::kaiming_uniform_, xavier_uniform_, normal_, zeros_, ...
//   data.h        Dataset, TensorDataset, DataLoader
//   checkpoint.h  Checkpoint (model, optimizer, scheduler, loader, your entries),
//                 save / load
#pragma once

#include "nn/activation.h"
#include "nn/batchnorm.h"
#include "nn/checkpoint.h"
#include "nn/clip_grad.h"
#include "nn/container.h"
#include "nn/conv.h"
#include "nn/data.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/flatten.h"
#include "nn/functional.h"
#include "nn/functional_conv.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/normalization.h"
#include "nn/pooling.h"
#include "nn/sequential.h"
