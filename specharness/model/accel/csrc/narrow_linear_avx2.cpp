// A linear layer over a few rows in bfloat16, on AVX2 float32 FMAs: narrow_linear.cpp's op for CPUs
// without bfloat16 dot products (specharness/model/accel/narrow_linear.py).
//
// Why: on a 2-core Zen 3 EPYC with AVX2 only, oneDNN emulates bfloat16 GEMMs, and a forward over 8
// positions cost 3.36x one (47.6 against 14.2 ms; 1.33x on the AVX512-BF16 EPYC with
// narrow_linear.cpp): every tree verification cost three vanilla steps
// (results/smollm2-cpu-epyc-avx2-engine-choice/profile). Widening bfloat16 is a shift: in the
// packed layout each 32-bit word holds one column's k pair, so a word shifted left 16 is the
// first k's float32 and the word with its low half cleared is the second's. Each 32-byte load
// then feeds 8 columns x 2 k of every row by two FMAs a row, the weights stay half the bytes of
// float32, and a few rows cost what the weights' stream costs until the FMAs bind.
//
// Same op and layout as narrow_linear.cpp: x [M, K] bfloat16 contiguous, K even; w packed
// [N/32, K/2, 32, 2] bfloat16; bias [N] float32 or none; returns [M, N] bfloat16, float32 sums
// rounded to nearest even once (as there, but a NaN comes out as the quiet NaN 0x7FC0 whatever its sign
// and payload, and float32 denormals are not flushed). Only one of the two libraries is built in a process.
#include <ATen/ATen.h>
#include <torch/library.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include "narrow_linear_args.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

namespace {

constexpr int64_t COLS = 32;  // output columns per packed tile: 4 groups of 8 floats
constexpr int ROWS = 4;       // rows per pass over a tile's weights

// float32 -> bfloat16, round to nearest even (NaN stays a quiet NaN), 8 at a time
inline void store_bf16(at::BFloat16* out, __m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), packed);
}

// rows [0, R) of x (widened to float32, row stride K) against column groups [g0, g0 + G) of one
// tile (8 columns each) over all K/2 k pairs; the groups' weights are loaded once per k pair and
// serve every row (R x G accumulators, 2G widened weights, 2 broadcasts: at 2 rows x 4 groups that is
// 18 of the 16 ymm registers, yet it measured as fast as 2 groups a pass)
template <int R, int G>
void groups(const float* x, int64_t K, const uint32_t* wt, const float* bias, at::BFloat16* y, int64_t N,
            int64_t n0, int g0) {
  __m256 acc[R][G];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g)
      acc[r][g] = bias ? _mm256_loadu_ps(bias + n0 + 8 * (g0 + g)) : _mm256_setzero_ps();
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t k2 = 0; k2 < K / 2; ++k2) {
    __m256 w0[G], w1[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wt + k2 * COLS + 8 * (g0 + g)));
      w0[g] = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));  // the pair's first k
      w1[g] = _mm256_castsi256_ps(_mm256_and_si256(w, high));  // ... and its second
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 a0 = _mm256_broadcast_ss(x + r * K + 2 * k2), a1 = _mm256_broadcast_ss(x + r * K + 2 * k2 + 1);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[r][g] = _mm256_fmadd_ps(a1, w1[g], _mm256_fmadd_ps(a0, w0[g], acc[r][g]));
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) store_bf16(y + r * N + n0 + 8 * (g0 + g), acc[r][g]);
}

// one tile's 32 columns for rows [0, R): in passes of G groups (the tile's later passes read its
// weights from L1/L2, not memory)
template <int R>
void tile(const float* x, int64_t K, const uint32_t* wt, const float* bias, at::BFloat16* y, int64_t N, int64_t n0) {
  constexpr int G = R <= 2 ? 4 : R <= 4 ? 2 : 1;
  for (int g0 = 0; g0 < 4; g0 += G) groups<R, G>(x, K, wt, bias, y, N, n0, g0);
}

using TileFn = void (*)(const float*, int64_t, const uint32_t*, const float*, at::BFloat16*, int64_t, int64_t);
constexpr TileFn TILES[ROWS + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>};

at::Tensor narrow_linear(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias) {
  const NarrowLinearShape shape = narrow_linear_shape(x, w, bias, COLS);
  const int64_t M = shape.M, K = shape.K, N = shape.N;
  const int64_t n_tiles = N / COLS;
  auto y = at::empty({M, N}, x.options());
  if (M == 0) return y;
  // the rows widened once (exact): M x K floats
  std::vector<float> xf(M * K);
  const auto* xb = reinterpret_cast<const uint16_t*>(x.const_data_ptr<at::BFloat16>());
  for (int64_t i = 0; i < M * K; ++i) {
    const uint32_t bits = static_cast<uint32_t>(xb[i]) << 16;
    std::memcpy(&xf[i], &bits, sizeof bits);
  }
  const auto* wp = reinterpret_cast<const uint32_t*>(w.const_data_ptr<at::BFloat16>());
  const float* bp = bias.has_value() ? bias->const_data_ptr<float>() : nullptr;
  at::BFloat16* yp = y.data_ptr<at::BFloat16>();
  const int64_t size = K / 2 * COLS;  // 32-bit words per tile
  // each thread a contiguous range of column tiles; each tile serves every group of 4 rows while cached
  at::parallel_for(0, n_tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t m0 = 0; m0 < M; m0 += ROWS)
        TILES[std::min<int64_t>(ROWS, M - m0)](xf.data() + m0 * K, K, wp + t * size, bp, yp + m0 * N, N, t * COLS);
  });
  return y;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(specharness, m) {
  m.def("narrow_linear(Tensor x, Tensor w, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(specharness, CPU, m) { m.impl("narrow_linear", &narrow_linear); }
