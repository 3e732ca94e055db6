#include "core/memory/memory_stats.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string_view>
#include <vector>

namespace ember::memory {

namespace {

constexpr size_t kTableWidth = 75;

// The StatArray members in the order PyTorch's summary prints them.
struct ArrayMetric {
  const char* key;
  StatArray MemoryStats::*member;
  const char* device_label;  // row label for a device
  const char* host_label;    // the same row for host memory
  bool bytes;                // formatted as a size, else as a count
};

constexpr ArrayMetric kArrayMetrics[] = {
    {"allocated_bytes", &MemoryStats::allocated_bytes, "Allocated memory", "Allocated memory",
     true},
    {"active_bytes", &MemoryStats::active_bytes, "Active memory", "Active memory", true},
    {"requested_bytes", &MemoryStats::requested_bytes, "Requested memory", "Requested memory",
     true},
    {"reserved_bytes", &MemoryStats::reserved_bytes, "GPU reserved memory", "CPU reserved memory",
     true},
    {"inactive_split_bytes", &MemoryStats::inactive_split_bytes, "Non-releasable memory",
     "Non-releasable memory", true},
    {"allocation", &MemoryStats::allocation, "Allocations", "Allocations", false},
    {"active", &MemoryStats::active, "Active allocs", "Active allocs", false},
    {"segment", &MemoryStats::segment, "GPU reserved segments", "CPU reserved segments", false},
    {"inactive_split", &MemoryStats::inactive_split, "Non-releasable allocs",
     "Non-releasable allocs", false},
};

constexpr const char* kPoolKeys[kNumStatTypes] = {"all", "small_pool", "large_pool"};

// Python's floor division, which the reference table uses to scale values.
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// A size in a 10-character cell. The unit is chosen from `reference` (the
// column's "all" value), so the pool rows below it share its unit.
std::string format_size_cell(int64_t value, int64_t reference) {
  static constexpr const char* kUnits[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double ref = static_cast<double>(reference);
  size_t unit = 0;
  while (unit + 1 < std::size(kUnits) && !(ref < 768.0 * 1024.0)) {
    ++unit;
    value = floor_div(value, 1024);
    ref /= 1024.0;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%6" PRId64 " %s", value, kUnits[unit]);
  return buf;
}

// A count in a 10-character cell, scaled by thousands the same way.
std::string format_count_cell(int64_t value, int64_t reference) {
  static constexpr const char* kUnits[] = {" ", "K", "M"};
  double ref = static_cast<double>(reference);
  size_t unit = 0;
  while (unit + 1 < std::size(kUnits) && !(ref < 750.0 * 1000.0)) {
    ++unit;
    value = floor_div(value, 1000);
    ref /= 1000.0;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%7" PRId64 " %s ", value, kUnits[unit]);
  return buf;
}

std::string pad_right(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

// `label: value`, with the colon at a fixed column and the value left-aligned in a
// field of `value_width` (PyTorch's "{num_ooms:<12d}").
std::string counter_cell(size_t colon_end, std::string_view label, int64_t value,
                         size_t value_width) {
  std::string s;
  size_t text = label.size() + 2;
  if (colon_end > text) s.append(colon_end - text, ' ');
  s.append(label).append(": ");
  return s + pad_right(std::to_string(value), value_width);
}

std::string stat_row(std::string_view label, const Stat& s, const Stat& ref, bool bytes) {
  auto cell = bytes ? format_size_cell : format_count_cell;
  std::string row = " " + pad_right(std::string(label), 21);
  row += " | " + cell(s.current, ref.current);
  row += " | " + cell(s.peak, ref.peak);
  row += " | " + cell(s.allocated, ref.allocated);
  row += " | " + cell(s.freed, ref.freed) + " ";
  return row;
}

}  // namespace

void MemoryStats::reset_accumulated() {
  for (const ArrayMetric& m : kArrayMetrics)
    for (Stat& s : this->*m.member) s.reset_accumulated();
  oversize_allocations.reset_accumulated();
  oversize_segments.reset_accumulated();
  num_alloc_retries = 0;
  num_ooms = 0;
  num_sync_all_streams = 0;
  num_device_alloc = 0;
  num_device_free = 0;
}

void MemoryStats::reset_peak() {
  for (const ArrayMetric& m : kArrayMetrics)
    for (Stat& s : this->*m.member) s.reset_peak();
  oversize_allocations.reset_peak();
  oversize_segments.reset_peak();
}

std::map<std::string, int64_t> MemoryStats::to_map() const {
  std::map<std::string, int64_t> out;
  auto put = [&out](const std::string& prefix, const Stat& s) {
    out[prefix + ".current"] = s.current;
    out[prefix + ".peak"] = s.peak;
    out[prefix + ".allocated"] = s.allocated;
    out[prefix + ".freed"] = s.freed;
  };
  for (const ArrayMetric& m : kArrayMetrics)
    for (size_t t = 0; t < kNumStatTypes; ++t)
      put(std::string(m.key) + "." + kPoolKeys[t], (this->*m.member)[t]);
  put("oversize_allocations", oversize_allocations);
  put("oversize_segments", oversize_segments);
  out["num_alloc_retries"] = num_alloc_retries;
  out["num_ooms"] = num_ooms;
  out["num_sync_all_streams"] = num_sync_all_streams;
  out["num_device_alloc"] = num_device_alloc;
  out["num_device_free"] = num_device_free;
  out["max_split_size"] = max_split_size;
  for (size_t t = 0; t < kNumStatTypes; ++t) {
    const std::string pool = kPoolKeys[t];
    out["largest_free_block_bytes." + pool] = largest_free_block[t];
    out["reserved_unallocated_bytes." + pool] =
        reserved_bytes[t].current - allocated_bytes[t].current;
    out["address_space_bytes." + pool] = address_space[t];
  }
  return out;
}

std::string format_fragmentation_line(const MemoryStats& s) {
  auto bytes = [](int64_t v) {
    return format_bytes(static_cast<uint64_t>(std::max<int64_t>(v, 0)));
  };
  std::string line =
      "Fragmentation: largest free block " + bytes(s.largest_free_block[kAggregate]) +
      " (large pool " + bytes(s.largest_free_block[kLargePool]) + ", small pool " +
      bytes(s.largest_free_block[kSmallPool]) + "); reserved but unallocated " +
      bytes(s.reserved_bytes[kAggregate].current - s.allocated_bytes[kAggregate].current) + ".";
  if (s.address_space[kAggregate] > s.reserved_bytes[kAggregate].current)
    line += " Expandable segments: " + bytes(s.reserved_bytes[kAggregate].current) + " mapped of " +
            bytes(s.address_space[kAggregate]) + " of address space.";
  return line;
}

std::string format_memory_summary(const MemoryStats& stats, const std::string& title, bool host,
                                  bool abbreviated) {
  const std::string rule_double(kTableWidth, '=');
  const std::string rule_single(kTableWidth, '-');
  std::vector<std::string> lines;

  lines.push_back(rule_double);
  size_t left = title.size() < kTableWidth ? (kTableWidth - title.size() + 1) / 2 : 0;
  lines.push_back(pad_right(std::string(left, ' ') + title, kTableWidth));
  lines.push_back(rule_single);
  lines.push_back(
      counter_cell(23, host ? "CPU OOMs" : "CUDA OOMs", stats.num_ooms, 12) + " | " +
      counter_cell(27, host ? "malloc retries" : "cudaMalloc retries", stats.num_alloc_retries, 8) +
      "  ");
  lines.push_back(rule_double);
  lines.push_back("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ");

  for (const ArrayMetric& m : kArrayMetrics) {
    lines.push_back(rule_single);
    const StatArray& a = stats.*m.member;
    lines.push_back(
        stat_row(host ? m.host_label : m.device_label, a[kAggregate], a[kAggregate], m.bytes));
    if (abbreviated) continue;
    lines.push_back(stat_row("      from large pool", a[kLargePool], a[kAggregate], m.bytes));
    lines.push_back(stat_row("      from small pool", a[kSmallPool], a[kAggregate], m.bytes));
  }
  lines.push_back(rule_single);
  lines.push_back(stat_row("Oversize allocations", stats.oversize_allocations,
                           stats.oversize_allocations, false));
  lines.push_back(rule_single);
  lines.push_back(stat_row(host ? "Oversize CPU segments" : "Oversize GPU segments",
                           stats.oversize_segments, stats.oversize_segments, false));
  lines.push_back(rule_double);

  std::string out;
  for (const std::string& line : lines) out += "|" + line + "|\n";
  return out;
}

std::string format_bytes(uint64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes <= 1024) {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " bytes", bytes);
  } else if (bytes <= (uint64_t{1} << 20)) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024.0);
  } else if (bytes <= (uint64_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / 1048576.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1073741824.0);
  }
  return buf;
}

}  // namespace ember::memory
