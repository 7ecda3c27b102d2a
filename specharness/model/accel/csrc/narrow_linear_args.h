// The narrow_linear op's argument checks, shared by its two builds (narrow_linear.cpp on AVX512-BF16,
// narrow_linear_avx2.cpp on AVX2; one of them per library, narrow_attention.LIBRARIES).
#pragma once
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>

struct NarrowLinearShape {
  int64_t M, K, N;  // rows, inputs, outputs
};

// x [M, K] contiguous bfloat16; w packed [N/cols, K/2, cols, 2] bfloat16; bias [N] contiguous float32 or none
inline NarrowLinearShape narrow_linear_shape(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias,
                                             int64_t cols) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.is_contiguous(),
              "narrow_linear: x must be [rows, K] contiguous bfloat16");
  TORCH_CHECK(w.dim() == 4 && w.scalar_type() == at::kBFloat16 && w.is_contiguous() && w.size(2) == cols && w.size(3) == 2,
              "narrow_linear: w must be packed [N/32, K/2, 32, 2] bfloat16 (narrow_linear.pack)");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0) * cols;
  TORCH_CHECK(w.size(1) * 2 == K, "narrow_linear: x has ", K, " columns, the packed weight ", w.size(1) * 2);
  if (bias.has_value())
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == N && bias->scalar_type() == at::kFloat && bias->is_contiguous(),
                "narrow_linear: bias must be [", N, "] contiguous float32");
  return {M, K, N};
}
