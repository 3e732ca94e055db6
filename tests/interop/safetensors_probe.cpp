// The ember side of the safetensors cross-check (tests/interop/
// check_safetensors.py runs it against the Python package):
//   safetensors_probe dump FILE       prints the metadata and every tensor's
//                                     dtype, shape and bytes in hex
//   safetensors_probe copy IN OUT     reads IN (mapped) and writes it to OUT
//   safetensors_probe write OUT       writes a fixed set of tensors (see below)
// Errors print "error: <message>" and exit 1.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "core/ops.h"
#include "nn/safetensors.h"

using namespace ember;

namespace {

void dump(const std::string& path) {
  const nn::SafetensorsFile f = nn::read_safetensors(path);
  for (const auto& [k, v] : f.metadata) std::cout << "meta " << k << "=" << v << "\n";
  for (const auto& [name, t] : f.tensors) {
    std::cout << "tensor " << name << " " << t.dtype() << " ";
    for (int64_t d = 0; d < t.dim(); ++d) std::cout << (d ? "," : "") << t.size(d);
    std::cout << " ";
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    static const char* hex = "0123456789abcdef";
    for (size_t i = 0; i < t.nbytes(); ++i) std::cout << hex[p[i] >> 4] << hex[p[i] & 15];
    std::cout << (t.nbytes() ? "" : "-") << "\n";
  }
}

// Values the Python side recomputes: float32 w[i] = (i - 5) / 4, float64
// d[i] = i / 3 - 1, bfloat16 b[i] = (i - 3) / 8 (exact in bfloat16), int64
// i[i] = i * 1000003 - 7, bool m[i] = i % 3 == 0, a float32 scalar 2.5 and an
// empty float32 (0, 3).
void write_fixed(const std::string& path) {
  StateDict sd;
  sd.insert("w", ((arange(12) - 5.0) / 4.0).view({3, 4}));
  sd.insert("d", arange(5, kFloat64) / 3.0 - 1.0);
  sd.insert("b", ((arange(6) - 3.0) / 8.0).to(kBFloat16).view({2, 3}));
  Tensor i = empty({4}, kInt64);
  for (int64_t k = 0; k < 4; ++k) i.data_ptr<int64_t>()[k] = k * 1000003 - 7;
  sd.insert("layers.0.i", i);
  Tensor m = empty({5}, kBool);
  for (int64_t k = 0; k < 5; ++k) m.data_ptr<bool>()[k] = k % 3 == 0;
  sd.insert("m", m);
  sd.insert("scalar", full({}, 2.5));
  sd.insert("empty", empty({0, 3}));
  nn::save_safetensors(sd, path, {{"format", "pt"}, {"written_by", "ember \"probe\"\n"}});
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  try {
    if (cmd == "dump" && argc == 3) {
      dump(argv[2]);
    } else if (cmd == "copy" && argc == 4) {
      const nn::SafetensorsFile f = nn::read_safetensors(argv[2]);
      nn::save_safetensors(f.tensors, argv[3], f.metadata);
    } else if (cmd == "write" && argc == 3) {
      write_fixed(argv[2]);
    } else {
      std::cerr << "usage: safetensors_probe dump FILE | copy IN OUT | write OUT\n";
      return 2;
    }
  } catch (const Error& e) {
    std::cout << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
