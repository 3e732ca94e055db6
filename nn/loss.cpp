#include "nn/loss.h"

namespace ember::nn {

std::string MSELoss::extra_repr() const {
  switch (options.reduction()) {
    case Reduction::None:
      return "reduction=none";
    case Reduction::Sum:
      return "reduction=sum";
    case Reduction::Mean:
      break;
  }
  return "reduction=mean";
}

}  // namespace ember::nn
