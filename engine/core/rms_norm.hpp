// RMSNorm as Hugging Face's LlamaRMSNorm computes it, with a backward that saves only the input,
// the weight and the fp32 rstd. Used by the decoder (model.hpp) and the tiled loss (tiled.hpp).
#pragma once

#include <torch/torch.h>

namespace ulysses {

// RMSNorm in fp32 as Hugging Face computes it: w * (x / sqrt(mean(x^2) + eps)).to(dtype).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps);

}  // namespace ulysses
