#include "cuda/tensor_map.h"

#include <mutex>

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime_api.h>

#include "core/base/error.h"

namespace ember::cuda {

namespace {

// The driver's encoder, looked up once. cudaGetDriverEntryPointByVersion asks
// for the CUDA 12.0 signature, the one this file is written against.
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  static cudaError_t err = cudaSuccess;
  static cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSuccess;
  std::call_once(once, [] {
    void* p = nullptr;
    err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                           &query);
    if (err == cudaSuccess && query == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  });
  EMBER_CHECK(fn != nullptr, "tensor map: cuTensorMapEncodeTiled is not available (",
              cudaGetErrorString(err), ", query result ", static_cast<int>(query), ")");
  return fn;
}

// cuTensorMapEncodeTiled with ember's settings: bf16 or fp32, 128-byte swizzle, 256-byte
// L2 promotion, zeros out of range.
CUresult encode_tiled(CUtensorMap& map, DType dtype, cuuint32_t rank, const void* base,
                      const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                      const cuuint32_t* elem_strides) {
  const CUtensorMapDataType type =
      dtype == DType::BFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  return encoder()(&map, type, rank, const_cast<void*>(base), dims, strides, box, elem_strides,
                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

}  // namespace

const char* tensor_map_unsupported(DType dtype, const void* base, int64_t inner, int64_t outer,
                                   int64_t ld) {
  const auto esize = static_cast<int64_t>(element_size(dtype));
  if (dtype != DType::BFloat16 && dtype != DType::Float32) return "dtype is not bf16 or fp32";
  if (base == nullptr) return "null base";
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return "base not 16-byte aligned";
  if (inner < 1 || outer < 1 || inner > (int64_t{1} << 32) || outer > (int64_t{1} << 32))
    return "a size outside [1, 2^32]";
  if (ld < inner) return "row stride below the row length";
  if ((ld * esize) % 16 != 0) return "row stride not a multiple of 16 bytes";
  if (ld * esize >= (int64_t{1} << 40)) return "row stride of 2^40 bytes or more";
  return "";
}

CUtensorMap make_tensor_map_2d(DType dtype, const void* base, int64_t inner, int64_t outer,
                               int64_t ld, int box_inner, int box_outer) {
  const char* why = tensor_map_unsupported(dtype, base, inner, outer, ld);
  EMBER_CHECK(why[0] == '\0', "tensor map: ", why, " (", dtype, ", ", outer, " x ", inner,
              ", row stride ", ld, ")");
  const auto esize = static_cast<int>(element_size(dtype));
  EMBER_CHECK(box_inner >= 1 && box_inner * esize <= 128 && box_outer >= 1 && box_outer <= 256,
              "tensor map: box ", box_outer, " x ", box_inner,
              " does not fit the 128-byte swizzle");
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(outer)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * static_cast<cuuint64_t>(esize)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_inner),
                             static_cast<cuuint32_t>(box_outer)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode_tiled(map, dtype, 2, base, dims, strides, box, elem_strides);
  EMBER_CHECK(r == CUDA_SUCCESS, "tensor map: cuTensorMapEncodeTiled failed with CUresult ",
              static_cast<int>(r), " (", dtype, ", ", outer, " x ", inner, ", row stride ", ld,
              ", box ", box_outer, " x ", box_inner, ")");
  return map;
}

CUtensorMap make_tensor_map_4d(DType dtype, const void* base, const int64_t (&dims)[4],
                               const int64_t (&strides)[3], const unsigned (&box)[4],
                               const unsigned (&elem_strides)[4]) {
  EMBER_CHECK(dtype == DType::BFloat16 || dtype == DType::Float32,
              "tensor map: dtype is not bf16 or fp32 (", dtype, ")");
  EMBER_CHECK(base != nullptr && reinterpret_cast<uintptr_t>(base) % 16 == 0,
              "tensor map: the base is null or not 16-byte aligned");
  const auto esize = static_cast<int64_t>(element_size(dtype));
  CUtensorMap map{};
  cuuint64_t gdims[4];
  cuuint64_t gstrides[3];
  cuuint32_t gbox[4], gelem[4];
  for (int i = 0; i < 4; ++i) {
    EMBER_CHECK(dims[i] >= 1 && dims[i] <= (int64_t{1} << 32), "tensor map: dim ", i, " size ",
                dims[i], " outside [1, 2^32]");
    EMBER_CHECK(box[i] >= 1 && box[i] <= 256 && elem_strides[i] >= 1 && elem_strides[i] <= 8,
                "tensor map: box ", box[i], " or element stride ", elem_strides[i], " of dim ", i,
                " outside TMA's limits (1-256, 1-8)");
    gdims[i] = static_cast<cuuint64_t>(dims[i]);
    gbox[i] = box[i];
    gelem[i] = elem_strides[i];
  }
  EMBER_CHECK(box[0] * esize <= 128, "tensor map: an inner box of ", box[0],
              " elements does not fit the 128-byte swizzle");
  for (int i = 0; i < 3; ++i) {
    const int64_t bytes = strides[i] * esize;
    EMBER_CHECK(bytes > 0 && bytes % 16 == 0 && bytes < (int64_t{1} << 40), "tensor map: stride ",
                strides[i], " of dim ", i + 1,
                " is not a positive multiple of 16 bytes below 2^40 bytes");
    gstrides[i] = static_cast<cuuint64_t>(bytes);
  }
  const CUresult r = encode_tiled(map, dtype, 4, base, gdims, gstrides, gbox, gelem);
  EMBER_CHECK(r == CUDA_SUCCESS, "tensor map: cuTensorMapEncodeTiled failed with CUresult ",
              static_cast<int>(r), " (4-D ", dtype, ", dims ", dims[0], " x ", dims[1], " x ",
              dims[2], " x ", dims[3], ", box ", box[0], " x ", box[1], " x ", box[2], " x ",
              box[3], ")");
  return map;
}

}  // namespace ember::cuda
