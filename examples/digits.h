// The UCI handwritten digits (1,797 8x8 images as scikit-learn ships them;
// examples/data/digits/README.md) for the digits examples: the CSV read with its
// rows checked, the fixed 80/20 split, the flags both examples take, and the test
// accuracy. Header-only: each example is one program.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ember.h"

namespace digits {

// The CSV: 64 pixels (0..16) then the class (0..9), per line. Images come back as
// (N, 1, 8, 8) floats scaled to [0, 1], classes as int64. A malformed line throws,
// naming the file and the line.
inline void load(const std::string& path, ember::Tensor& images, ember::Tensor& labels) {
  std::ifstream in(path);
  if (!in) throw ember::Error("digits: cannot open " + path);
  std::vector<float> pixels;
  std::vector<int64_t> classes;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.empty()) continue;
    std::stringstream row(line);
    std::vector<double> cells;
    for (std::string cell; std::getline(row, cell, ',');) {
      char* end = nullptr;
      const double v = std::strtod(cell.c_str(), &end);
      if (end == cell.c_str())
        throw ember::Error("digits: " + path + " line " + std::to_string(line_no) +
                           ": not a number: '" + cell + "'");
      cells.push_back(v);
    }
    const bool ok = cells.size() == 65 && cells[64] >= 0 && cells[64] <= 9 &&
                    cells[64] == static_cast<double>(static_cast<int64_t>(cells[64]));
    if (!ok)
      throw ember::Error("digits: " + path + " line " + std::to_string(line_no) +
                         ": expected 64 pixels and a class 0..9, got " +
                         std::to_string(cells.size()) + " cells");
    for (int i = 0; i < 64; ++i) pixels.push_back(static_cast<float>(cells[i] / 16.0));
    classes.push_back(static_cast<int64_t>(cells[64]));
  }
  if (classes.empty()) throw ember::Error("digits: " + path + " has no rows");
  const auto n = static_cast<int64_t>(classes.size());
  images = ember::from_vector(pixels, {n, 1, 8, 8});
  std::vector<double> as_double(classes.begin(), classes.end());  // classes < 10: exact
  labels = ember::from_vector(as_double, {n}, ember::kInt64);
}

// The flags of both examples: --data, --epochs, --min-accuracy (and --help). A flag
// it does not know, one without its value or a value that is not a number is an
// error that says which.
struct Flags {
  std::string data;
  int epochs;
  double min_accuracy;
};
inline Flags parse_flags(int argc, char** argv, int epochs, double min_accuracy) {
  Flags f{EMBER_EXAMPLES_DATA_DIR "/digits/digits.csv", epochs, min_accuracy};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf(
          "usage: %s [--data FILE.csv] [--epochs N (default %d)] "
          "[--min-accuracy A (default %.3f; exit 1 below it)]\n",
          argv[0], epochs, min_accuracy);
      std::exit(0);
    }
    if (flag != "--data" && flag != "--epochs" && flag != "--min-accuracy")
      throw ember::Error("digits: unknown flag '" + flag + "' (--help lists them)");
    if (i + 1 >= argc) throw ember::Error("digits: " + flag + " needs a value");
    const char* value = argv[++i];
    char* end = nullptr;
    if (flag == "--data") {
      f.data = value;
    } else if (flag == "--epochs") {
      const long n = std::strtol(value, &end, 10);
      if (end == value || *end != '\0' || n < 1 || n > 1000000)
        throw ember::Error("digits: --epochs must be a whole number of at least 1, got '" +
                           std::string(value) + "'");
      f.epochs = static_cast<int>(n);
    } else {
      const double a = std::strtod(value, &end);
      if (end == value || *end != '\0' || !(a >= 0.0 && a <= 1.0))
        throw ember::Error("digits: --min-accuracy must be a number in [0, 1], got '" +
                           std::string(value) + "'");
      f.min_accuracy = a;
    }
  }
  return f;
}

// A fixed random 80/20 split (after manual_seed) into a shuffling training loader of
// `batch` on `device` and the test images (on `device`) and classes (on the CPU).
struct Split {
  ember::nn::DataLoader loader;
  ember::Tensor test_x, test_y;
};
inline Split split(const ember::Tensor& images, const ember::Tensor& labels, int64_t batch,
                   ember::Device device) {
  using namespace ember;
  const int64_t n = labels.numel(), n_train = n * 8 / 10;
  Tensor order = randperm(n);
  Tensor train_idx = order.slice(0, 0, n_train), test_idx = order.slice(0, n_train, n);
  return Split{nn::DataLoader(nn::TensorDataset(index_select(images, 0, train_idx),
                                                index_select(labels, 0, train_idx)),
                              nn::DataLoaderOptions(batch).shuffle(true).device(device)),
               index_select(images, 0, test_idx).to(device), index_select(labels, 0, test_idx)};
}

// The share of test images whose largest logit is their class (no autograd).
template <typename Model>
double accuracy(Model& model, const Split& data) {
  ember::NoGradGuard no_grad;
  const ember::Tensor logits = model.forward(data.test_x);
  const std::vector<int64_t> predicted = logits.argmax(1).to_vector<int64_t>();
  const std::vector<int64_t> truth = data.test_y.to_vector<int64_t>();
  int64_t correct = 0;
  for (size_t i = 0; i < truth.size(); ++i) correct += predicted[i] == truth[i];
  return static_cast<double>(correct) / static_cast<double>(truth.size());
}

// main() of an example: run(argc, argv), or the error and exit 2 for bad flags or
// data (an uncaught exception would abort).
inline int main_of(int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}

}  // namespace digits
