// The CUDA handle types that the layers below cuda/ (core/memory's allocator,
// backends, snapshots and replay) store and pass along without calling CUDA:
// opaque pointers, declared exactly as the CUDA runtime declares them
// (driver_types.h), so that those layers include no CUDA header
// (tools/check_layers.cmake refuses one there). A file that also includes the CUDA
// runtime's headers sees the same types: a typedef may be repeated.
#pragma once

struct CUstream_st;
struct CUevent_st;

/// A CUDA stream (the CUDA runtime's own typedef, repeated).
typedef struct CUstream_st* cudaStream_t;
/// A CUDA event (the CUDA runtime's own typedef, repeated).
typedef struct CUevent_st* cudaEvent_t;
