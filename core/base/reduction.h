// How a loss reduces its per-element values, as PyTorch's `reduction=`: None keeps
// them, Mean averages (over the counted elements), Sum adds. On the ground floor
// so that kernels (cuda/) and ops (core/) share it.
#pragma once

namespace ember {

enum class Reduction { None, Mean, Sum };

}  // namespace ember
