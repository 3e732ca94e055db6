#include "nn/loss.h"

#include <sstream>

namespace ember::nn {

std::string reduction_repr(Reduction r) {
  switch (r) {
    case Reduction::None:
      return "reduction=none";
    case Reduction::Sum:
      return "reduction=sum";
    case Reduction::Mean:
      break;
  }
  return "reduction=mean";
}

std::string MSELoss::extra_repr() const {
  return reduction_repr(options.reduction());
}

CrossEntropyLoss::CrossEntropyLoss(const CrossEntropyLossOptions& opts) : options(opts) {
  EMBER_CHECK(opts.label_smoothing() >= 0.0 && opts.label_smoothing() <= 1.0,
              "CrossEntropyLoss: label_smoothing must be in [0, 1], got ", opts.label_smoothing());
}

std::string CrossEntropyLoss::extra_repr() const {
  std::ostringstream os;
  os << reduction_repr(options.reduction()) << ", ignore_index=" << options.ignore_index()
     << ", label_smoothing=" << options.label_smoothing();
  return os.str();
}

std::string NLLLoss::extra_repr() const {
  std::ostringstream os;
  os << reduction_repr(options.reduction()) << ", ignore_index=" << options.ignore_index();
  return os.str();
}

BCEWithLogitsLoss::BCEWithLogitsLoss(const BCEWithLogitsLossOptions& opts) : options(opts) {
  if (opts.pos_weight().defined()) {
    EMBER_CHECK(is_floating(opts.pos_weight().dtype()),
                "BCEWithLogitsLoss: pos_weight must be floating point, got ",
                opts.pos_weight().dtype());
    pos_weight = register_buffer("pos_weight", opts.pos_weight().detach());
  }
}

}  // namespace ember::nn
