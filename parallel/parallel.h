// parallel/'s umbrella header (link ember_parallel). What each include brings:
//   communicator.h      Communicator, ReduceOp, CommOptions, Work, CollectiveTimeoutError
//   mpi_communicator.h  MpiCommunicator (CPU tensors over MPI)
//   nccl_communicator.h NcclCommunicator, NcclUniqueId (when built with NCCL)
//   data_parallel.h     DataParallel: one process, a replica and a thread per GPU
//   distributed.h       DistributedDataParallel, DdpOptions: one process per GPU
//   zero.h              ZeroRedundancyOptimizer: ZeRO-1 under DDP, sharded checkpoints
//   process_group.h     init_process_group(), launch_env() (ember-run, mpirun, srun)
//   memory_view.h       memory_summary_all(): devices or ranks side by side
#pragma once

#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/distributed.h"
#include "parallel/memory_view.h"
#include "parallel/mpi_communicator.h"
#include "parallel/process_group.h"
#include "parallel/zero.h"
#ifdef EMBER_HAVE_NCCL
#include "parallel/nccl_communicator.h"
#endif
