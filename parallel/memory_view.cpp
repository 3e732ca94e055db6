#include "parallel/memory_view.h"

#include <algorithm>
#include <cstdio>

#include "core/memory.h"
#include "core/ops.h"

namespace ember::parallel {

namespace {

struct Row {
  const char* title;
  const char* key;
  bool bytes;
};
constexpr Row kRows[] = {
    {"Allocated memory (current)", "allocated_bytes.all.current", true},
    {"Allocated memory (peak)", "allocated_bytes.all.peak", true},
    {"Reserved memory (current)", "reserved_bytes.all.current", true},
    {"Reserved memory (peak)", "reserved_bytes.all.peak", true},
    {"Active memory (current)", "active_bytes.all.current", true},
    {"Allocation retries", "num_alloc_retries", false},
    {"Out-of-memory errors", "num_ooms", false},
};
constexpr size_t kNumRows = sizeof(kRows) / sizeof(kRows[0]);

std::string cell_text(int64_t v, bool bytes) {
  return bytes ? memory::format_bytes(static_cast<uint64_t>(std::max<int64_t>(v, 0)))
               : std::to_string(v);
}

// values[column][row]
std::string table(const std::vector<std::string>& headers,
                  const std::vector<std::vector<int64_t>>& values) {
  constexpr int kTitle = 28, kCell = 12;
  auto pad = [](std::string s, int w) {
    if (static_cast<int>(s.size()) < w) s.insert(0, w - s.size(), ' ');
    return s;
  };
  std::string out = std::string(kTitle, ' ') + " |";
  for (const std::string& h : headers) out += " " + pad(h, kCell) + " |";
  out += "\n" + std::string(kTitle + 2 + headers.size() * (kCell + 3), '-') + "\n";
  for (size_t r = 0; r < kNumRows; ++r) {
    std::string title = kRows[r].title;
    out += title + std::string(kTitle - title.size(), ' ') + " |";
    for (const auto& col : values)
      out += " " + pad(cell_text(col[r], kRows[r].bytes), kCell) + " |";
    out += "\n";
  }
  // The peak allocation spread says how lopsided the work is.
  int64_t lo = INT64_MAX, hi = 0;
  for (const auto& col : values) {
    lo = std::min(lo, col[1]);
    hi = std::max(hi, col[1]);
  }
  char line[128];
  std::snprintf(line, sizeof(line), "Peak allocated, largest / smallest: %.2fx\n",
                lo > 0 ? static_cast<double>(hi) / static_cast<double>(lo) : (hi > 0 ? 0.0 : 1.0));
  if (!values.empty()) out += line;
  return out;
}

std::vector<int64_t> key_values(Device d) {
  auto stats = memory_stats(d);
  std::vector<int64_t> v;
  for (const Row& row : kRows) {
    auto it = stats.find(row.key);
    v.push_back(it == stats.end() ? 0 : it->second);
  }
  return v;
}

}  // namespace

std::string memory_summary_all(const std::vector<Device>& devices) {
  std::vector<std::string> headers;
  std::vector<std::vector<int64_t>> values;
  for (const Device& d : devices) {
    headers.push_back(d.str());
    values.push_back(key_values(d));
  }
  return table(headers, values);
}

std::string memory_summary_all_ranks(Communicator& comm, Device device) {
  std::vector<int64_t> mine = key_values(device);
  std::vector<double> as_double(mine.begin(), mine.end());
  Tensor t = from_vector(as_double, {1, static_cast<int64_t>(kNumRows)},
                         TensorOptions().dtype(kInt64).device(comm.device()));
  Tensor all = comm.all_gather(t).cpu();
  std::vector<std::string> headers;
  std::vector<std::vector<int64_t>> values;
  for (int r = 0; r < comm.size(); ++r) {
    headers.push_back("rank " + std::to_string(r));
    values.push_back(all[r].to_vector<int64_t>());
  }
  return table(headers, values);
}

}  // namespace ember::parallel
