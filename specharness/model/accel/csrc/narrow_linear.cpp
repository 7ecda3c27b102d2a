// A linear layer over a few rows in bfloat16, on AVX512-BF16 dot products
// (specharness/model/accel/narrow_linear.py).
//
// Why: a verification forward over 8 positions cost ~1.65x a 2-position one on a 2-core EPYC
// without AMX, though both read the same 270 MB of weights. oneDNN's small-M GEMMs and inductor's
// C++ template (which widens bfloat16 to float32 and uses no vdpbf16ps) are not flat in M there.
// Here one 64-byte load holds 32 output columns x 2 k-values, and each row's pair of inputs is
// broadcast against it: 16 x M dot-product instructions per 128 bytes of weights, so the cost stays
// the weights' stream for a few rows (results/smollm2-cpu-epyc-narrow-linear).
//
// Layout: x [M, K] bfloat16, contiguous, K even; w packed [N/32, K/2, 32, 2] bfloat16 (column tile,
// k pair, column, k within the pair: ``narrow_linear.pack``, folded into a constant when a graph is
// frozen); bias [N] float32 (widened once, at freezing) or none. Returns [M, N] bfloat16: float32 sums rounded to nearest even,
// as a bfloat16 GEMM rounds its float32 accumulator.
#include <ATen/ATen.h>
#include <torch/library.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include "narrow_linear_args.h"

#include <algorithm>
#include <cstring>
#include <optional>

namespace {

constexpr int64_t COLS = 32;  // output columns per tile: two 16-float accumulators per row
constexpr int ROWS = 8;       // rows per pass over a tile's weights (16 accumulators at 8)

// rows [0, R) of x against S tiles of 32 columns at once (tile s at wt + s * stride weights, its
// columns from n0 + s * 32 * gap), k pairs [0, K/2). Several tiles at once are several weight
// streams in flight: with 2 rows the whole model's GEMMs took 4.7 ms with two, 5.3 with one (212 MB,
// 2 threads, 2-core EPYC). No software prefetch: it made the same sequence 1.3-1.7x slower than
// the hardware's own (results/smollm2-cpu-epyc-narrow-linear).
template <int R, int S>
void tiles(const uint16_t* x, int64_t K, const uint16_t* wt, int64_t stride, int64_t gap, const float* bias,
           at::BFloat16* y, int64_t N, int64_t n0) {
  __m512 acc[S][R][2];
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < 2; ++v)
        acc[s][r][v] = bias ? _mm512_loadu_ps(bias + n0 + s * gap * COLS + 16 * v) : _mm512_setzero_ps();
  for (int64_t k2 = 0; k2 < K / 2; ++k2) {
    __m512bh b[S][2];
    for (int s = 0; s < S; ++s) {
      const uint16_t* w = wt + s * stride + k2 * 2 * COLS;
      b[s][0] = (__m512bh)_mm512_loadu_si512(w);          // columns 0-15, both k of the pair
      b[s][1] = (__m512bh)_mm512_loadu_si512(w + COLS);   // columns 16-31
    }
    for (int r = 0; r < R; ++r) {
      uint32_t pair;
      std::memcpy(&pair, x + r * K + 2 * k2, sizeof pair);
      const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
      for (int s = 0; s < S; ++s) {
        acc[s][r][0] = _mm512_dpbf16_ps(acc[s][r][0], a, b[s][0]);
        acc[s][r][1] = _mm512_dpbf16_ps(acc[s][r][1], a, b[s][1]);
      }
    }
  }
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < 2; ++v) {
        at::BFloat16* out = y + r * N + n0 + s * gap * COLS + 16 * v;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), (__m256i)_mm512_cvtneps_pbh(acc[s][r][v]));
      }
}

// a thread's tiles [begin, end) for rows [0, R): two streams (the range's halves) while 4 rows or
// fewer leave the registers for them (2 x R x 2 accumulators), else one
template <int R>
void tile_range(const uint16_t* x, int64_t K, const uint16_t* w, const float* bias, at::BFloat16* y, int64_t N,
                int64_t begin, int64_t end) {
  constexpr int S = R <= 4 ? 2 : 1;
  const int64_t half = (end - begin) / S, size = K * COLS;
  int64_t t = begin;
  for (; t < begin + half; ++t) tiles<R, S>(x, K, w + t * size, half * size, half, bias, y, N, t * COLS);
  for (t = begin + half * S; t < end; ++t) tiles<R, 1>(x, K, w + t * size, 0, 0, bias, y, N, t * COLS);
}

using RangeFn = void (*)(const uint16_t*, int64_t, const uint16_t*, const float*, at::BFloat16*, int64_t, int64_t, int64_t);
constexpr RangeFn RANGES[ROWS + 1] = {nullptr, tile_range<1>, tile_range<2>, tile_range<3>, tile_range<4>,
                                      tile_range<5>, tile_range<6>, tile_range<7>, tile_range<8>};

at::Tensor narrow_linear(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias) {
  const NarrowLinearShape shape = narrow_linear_shape(x, w, bias, COLS);
  const int64_t M = shape.M, K = shape.K, N = shape.N;
  const int64_t n_tiles = N / COLS;
  auto y = at::empty({M, N}, x.options());
  const auto* xp = reinterpret_cast<const uint16_t*>(x.const_data_ptr<at::BFloat16>());
  const auto* wp = reinterpret_cast<const uint16_t*>(w.const_data_ptr<at::BFloat16>());
  const float* bp = bias.has_value() ? bias->const_data_ptr<float>() : nullptr;
  at::BFloat16* yp = y.data_ptr<at::BFloat16>();
  if (M == 0) return y;
  // each thread takes a contiguous range of column tiles (K * 64 bytes apiece); past 8 rows, each tile
  // serves every group of 8 rows while it is in cache
  at::parallel_for(0, n_tiles, 1, [&](int64_t begin, int64_t end) {
    if (M <= ROWS) {
      RANGES[M](xp, K, wp, bp, yp, N, begin, end);
      return;
    }
    for (int64_t t = begin; t < end; ++t)
      for (int64_t m0 = 0; m0 < M; m0 += ROWS)
        RANGES[std::min<int64_t>(ROWS, M - m0)](xp + m0 * K, K, wp, bp, yp + m0 * N, N, t, t + 1);
  });
  return y;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(specharness, m) {
  m.def("narrow_linear(Tensor x, Tensor w, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(specharness, CPU, m) { m.impl("narrow_linear", &narrow_linear); }
