// cudaMalloc/cudaFree, CUDA events and the driver's virtual memory under the
// caching allocator: the backend of every CUDA device's allocator
// (cuda/device_allocator.h).
#include "cuda/cuda_backend.h"

#include <cstdio>
#include <optional>
#include <type_traits>

#include <cuda.h>  // types only: the driver is reached through entry points
#include <cudaTypedefs.h>

#include "core/base/error.h"
#include "cuda/check.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

// The driver functions expandable segments need, looked up once through the
// runtime. `missing` says why they cannot be used (empty when all were found).
struct DriverVmm {
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetAttribute_v2000 device_attribute = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 address_reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuGetErrorString_v6000 error_string = nullptr;
  std::string missing;
};

const DriverVmm& driver_vmm() {
  static const DriverVmm vmm = [] {
    DriverVmm d;
    auto find = [&d](const char* name, auto& fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
      // 12000: the ABI these PFN types describe, which every CUDA 12+ driver has.
      const cudaError_t err =
          cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found);
      if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr) {
        (void)cudaGetLastError();
        if (d.missing.empty())
          d.missing = ember::detail::str_cat(
              "the driver does not provide ", name, err != cudaSuccess ? " (" : "",
              err != cudaSuccess ? cudaGetErrorString(err) : "", err != cudaSuccess ? ")" : "");
        return;
      }
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    find("cuDeviceGet", d.device_get);
    find("cuDeviceGetAttribute", d.device_attribute);
    find("cuMemGetAllocationGranularity", d.granularity);
    find("cuMemAddressReserve", d.address_reserve);
    find("cuMemAddressFree", d.address_free);
    find("cuMemCreate", d.create);
    find("cuMemRelease", d.release);
    find("cuMemMap", d.map);
    find("cuMemUnmap", d.unmap);
    find("cuMemSetAccess", d.set_access);
    find("cuGetErrorString", d.error_string);
    return d;
  }();
  return vmm;
}

std::string driver_error(CUresult r) {
  const char* text = nullptr;
  if (driver_vmm().error_string != nullptr) driver_vmm().error_string(r, &text);
  return text != nullptr ? text : "CUresult " + std::to_string(static_cast<int>(r));
}

void driver_check(CUresult r, const char* call) {
  if (r != CUDA_SUCCESS) EMBER_FAIL("CudaBackend: ", call, " failed: ", driver_error(r));
}

void driver_log(CUresult r, const char* call) noexcept {
  if (r != CUDA_SUCCESS)
    std::fprintf(stderr, "ember: CudaBackend: %s failed: %s\n", call, driver_error(r).c_str());
}

CUmemAllocationProp device_memory(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// Makes `device` current for a noexcept call, and restores the previous one.
class QuietDeviceGuard {
 public:
  explicit QuietDeviceGuard(int device) noexcept {
    EMBER_CUDA_CHECK_NOTHROW(cudaGetDevice(&previous_));
    EMBER_CUDA_CHECK_NOTHROW(cudaSetDevice(device));
  }
  ~QuietDeviceGuard() { EMBER_CUDA_CHECK_NOTHROW(cudaSetDevice(previous_)); }
  QuietDeviceGuard(const QuietDeviceGuard&) = delete;
  QuietDeviceGuard& operator=(const QuietDeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace

CudaBackend::CudaBackend(int device, size_t limit_bytes) : device_(device), limit_(limit_bytes) {}

void* CudaBackend::raw_alloc(size_t bytes) {
  if (limit_ != 0 && held_ + bytes > limit_) return nullptr;
  DeviceGuard guard(device_);
  // A capture on this thread forbids cudaMalloc unless relaxed; the new segment
  // is then the private pool's, never freed while the graph may replay it.
  std::optional<CaptureModeGuard> relaxed;
  if (is_capturing(device_)) relaxed.emplace(cudaStreamCaptureModeRelaxed);
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // out of memory is not sticky; clear it for the retry
    return nullptr;
  }
  EMBER_CUDA_CHECK(err);
  held_ += bytes;
  sizes_.emplace(ptr, bytes);
  return ptr;
}

void CudaBackend::raw_free(void* ptr) noexcept {
  auto it = sizes_.find(ptr);
  if (it != sizes_.end()) {
    held_ -= it->second;
    sizes_.erase(it);
  }
  int previous = 0;
  EMBER_CUDA_CHECK_NOTHROW(cudaGetDevice(&previous));
  EMBER_CUDA_CHECK_NOTHROW(cudaSetDevice(device_));
  EMBER_CUDA_CHECK_NOTHROW(cudaFree(ptr));
  EMBER_CUDA_CHECK_NOTHROW(cudaSetDevice(previous));
}

void CudaBackend::fill(void* ptr, unsigned char value, size_t bytes, cudaStream_t stream) {
  DeviceGuard guard(device_);
  EMBER_CUDA_CHECK(cudaMemsetAsync(ptr, value, bytes, stream));
}

void CudaBackend::read(void* host_dst, const void* ptr, size_t bytes, cudaStream_t stream) {
  DeviceGuard guard(device_);
  EMBER_CUDA_CHECK(cudaMemcpyAsync(host_dst, ptr, bytes, cudaMemcpyDeviceToHost, stream));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
}

memory::Backend::MemoryInfo CudaBackend::memory_info() {
  DeviceGuard guard(device_);
  MemoryInfo info;
  EMBER_CUDA_CHECK(cudaMemGetInfo(&info.free, &info.total));
  if (limit_ != 0) {
    info.total = limit_;
    info.free = std::min(info.free, limit_ - std::min(limit_, held_));
  }
  return info;
}

memory::Backend::EventHandle CudaBackend::create_event() {
  DeviceGuard guard(device_);
  cudaEvent_t event = nullptr;
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

void CudaBackend::record_event(EventHandle event, cudaStream_t stream) {
  DeviceGuard guard(device_);
  EMBER_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), stream));
}

bool CudaBackend::query_event(EventHandle event) {
  cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  EMBER_CUDA_CHECK(err);
  return true;
}

void CudaBackend::synchronize_event(EventHandle event) {
  EMBER_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

void CudaBackend::destroy_event(EventHandle event) noexcept {
  EMBER_CUDA_CHECK_NOTHROW(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
}

// ---------------------------------------------------------------------------------
// Virtual memory

bool CudaBackend::supports_virtual_memory(std::string* why) {
  if (vmm_ < 0) {
    const DriverVmm& d = driver_vmm();
    vmm_ = 0;
    if (!d.missing.empty()) {
      vmm_why_ = d.missing;
    } else {
      DeviceGuard guard(device_);
      CUdevice dev = 0;
      int supported = 0;
      CUresult r = d.device_get(&dev, device_);
      if (r == CUDA_SUCCESS)
        r = d.device_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                               dev);
      const CUmemAllocationProp prop = device_memory(device_);
      if (r == CUDA_SUCCESS && supported != 0)
        r = d.granularity(&granularity_, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
      if (r != CUDA_SUCCESS)
        vmm_why_ = "asking the driver about virtual memory failed: " + driver_error(r);
      else if (supported == 0)
        vmm_why_ =
            "device " + std::to_string(device_) + " does not support virtual memory management";
      else if (granularity_ == 0 || (granularity_ & (granularity_ - 1)) != 0)
        vmm_why_ = "the driver reports an unusable granularity of " + std::to_string(granularity_) +
                   " bytes";
      else
        vmm_ = 1;
    }
  }
  if (vmm_ == 0 && why != nullptr) *why = vmm_why_;
  return vmm_ == 1;
}

size_t CudaBackend::granularity() {
  return supports_virtual_memory() ? granularity_ : 0;
}

void* CudaBackend::reserve_address_space(size_t bytes) {
  EMBER_CHECK(supports_virtual_memory(), "CudaBackend::reserve_address_space: ", vmm_why_);
  DeviceGuard guard(device_);
  CUdeviceptr ptr = 0;
  const CUresult r = driver_vmm().address_reserve(&ptr, bytes, 0, 0, 0);
  if (r != CUDA_SUCCESS) {
    driver_log(r, "cuMemAddressReserve");
    return nullptr;
  }
  return reinterpret_cast<void*>(ptr);
}

bool CudaBackend::map_pages(void* ptr, size_t bytes) {
  EMBER_CHECK(supports_virtual_memory(), "CudaBackend::map_pages: ", vmm_why_);
  EMBER_CHECK(bytes > 0 && bytes % granularity_ == 0 &&
                  reinterpret_cast<uintptr_t>(ptr) % granularity_ == 0,
              "CudaBackend::map_pages: ", ptr, " + ", bytes, " bytes is not whole pages of ",
              granularity_);
  if (limit_ != 0 && held_ + bytes > limit_) return false;
  const DriverVmm& d = driver_vmm();
  DeviceGuard guard(device_);
  // Mapping during a capture on this thread is no stream work; relaxed mode allows
  // it as it allows cudaMalloc (raw_alloc).
  std::optional<CaptureModeGuard> relaxed;
  if (is_capturing(device_)) relaxed.emplace(cudaStreamCaptureModeRelaxed);
  const auto base = reinterpret_cast<uintptr_t>(ptr);
  const size_t pages = bytes / granularity_;
  const CUmemAllocationProp prop = device_memory(device_);
  size_t done = 0;
  try {
    for (; done < pages; ++done) {
      CUmemGenericAllocationHandle handle = 0;
      CUresult r = d.create(&handle, granularity_, &prop, 0);
      if (r == CUDA_ERROR_OUT_OF_MEMORY) break;
      driver_check(r, "cuMemCreate");
      r = d.map(base + done * granularity_, granularity_, 0, handle, 0);
      // The mapping keeps the memory alive; it is freed when the page is unmapped.
      driver_log(d.release(handle), "cuMemRelease");
      driver_check(r, "cuMemMap");
    }
    if (done < pages) {
      unmap_some(base, done);
      return false;
    }
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    driver_check(d.set_access(base, bytes, &access, 1), "cuMemSetAccess");
  } catch (...) {
    unmap_some(base, done);
    throw;
  }
  held_ += bytes;
  return true;
}

void CudaBackend::unmap_some(uintptr_t base, size_t pages) noexcept {
  for (size_t i = 0; i < pages; ++i)
    driver_log(driver_vmm().unmap(base + i * granularity_, granularity_), "cuMemUnmap");
}

void CudaBackend::unmap_pages(void* ptr, size_t bytes) noexcept {
  if (vmm_ != 1 || granularity_ == 0) return;
  QuietDeviceGuard guard(device_);
  // Work queued earlier may still use these pages, and cuMemUnmap does not wait
  // for it as cudaFree does.
  EMBER_CUDA_CHECK_NOTHROW(cudaDeviceSynchronize());
  unmap_some(reinterpret_cast<uintptr_t>(ptr), bytes / granularity_);
  held_ -= std::min(held_, bytes);
}

void CudaBackend::release_address_space(void* base, size_t bytes) noexcept {
  if (vmm_ != 1) return;
  QuietDeviceGuard guard(device_);
  driver_log(driver_vmm().address_free(reinterpret_cast<CUdeviceptr>(base), bytes),
             "cuMemAddressFree");
}

}  // namespace ember::cuda
