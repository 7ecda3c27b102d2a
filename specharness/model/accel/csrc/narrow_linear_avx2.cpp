// A linear layer over a few rows in bfloat16, on AVX2 float32 FMAs: narrow_linear.cpp's op for CPUs
// without bfloat16 dot products (specharness/model/accel/narrow_linear.py).
//
// Why: on a 2-core Zen 3 EPYC with AVX2 only, oneDNN emulates bfloat16 GEMMs, and a forward over 8
// positions cost 3.36x one (47.6 against 14.2 ms; 1.33x on the AVX512-BF16 EPYC with
// narrow_linear.cpp): every tree verification cost three vanilla steps
// (results/smollm2-cpu-epyc-avx2-engine-choice/profile). Widening bfloat16 is a shift: in the
// packed layout each 32-bit word holds one column's k pair, so a word shifted left 16 is the
// first k's float32 and the word with its low half cleared is the second's. Each 32-byte load
// then feeds 8 columns x 2 k of a row by two FMAs, the weights stay half the bytes of float32, and
// a few rows cost what the weights' stream costs until the FMAs bind. Rows go in passes of three
// over each 32-column tile (12 accumulators: what 16 ymm registers hold beside 3 broadcasts and a
// weight); a tile's later passes read it from L2.
//
// Same op and layout as narrow_linear.cpp: x [M, K] bfloat16 contiguous, K even; w packed
// [N/32, K/2, 32, 2] bfloat16; bias [N] float32 or none; returns [M, N] bfloat16, float32 sums
// rounded to nearest even once (as there, but a NaN comes out as the quiet NaN 0x7FC0 whatever its sign
// and payload, and float32 denormals are not flushed). Only one of the two libraries is built in a process.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include "narrow_linear_args.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

namespace {

constexpr int64_t COLS = 32;  // output columns per packed tile: 4 groups of 8 floats
constexpr int ROWS = 3;       // rows per pass over a tile's weights (rows3's registers)

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

// Every row sums its products in the same order, k by k, starting from its bias, whichever pass
// and however many rows beside it: a row's output does not depend on the other rows of the call.

// one or two rows (widened to float32, row stride K) against a tile's 4 column groups over all K/2
// k pairs: R x 4 accumulators, R broadcasts, one widened weight at a time (at most 12 ymm registers)
template <int R>
void rows12(const float* x, int64_t K, const uint32_t* wt, float* acc) {
  __m256 a[R][4];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) a[r][g] = _mm256_loadu_ps(acc + r * COLS + 8 * g);
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t k2 = 0; k2 < K / 2; ++k2) {
    const __m256i* wk = reinterpret_cast<const __m256i*>(wt + k2 * COLS);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {  // the pair's first k (word << 16), then its second (word & high)
      __m256 b[R];
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) b[r] = _mm256_broadcast_ss(x + r * K + 2 * k2 + h);
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const __m256i raw = _mm256_loadu_si256(wk + g);
        const __m256 w = _mm256_castsi256_ps(h == 0 ? _mm256_slli_epi32(raw, 16) : _mm256_and_si256(raw, high));
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) a[r][g] = _mm256_fmadd_ps(b[r], w, a[r][g]);
      }
    }
  }
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) _mm256_storeu_ps(acc + r * COLS + 8 * g, a[r][g]);
}

// Three rows x 4 column groups, in fixed registers: the 12 accumulators ymm0-11, the rows'
// broadcasts ymm12-14, one widened weight ymm15, the same order of operations as rows12. GCC spills
// two of these sixteen when they are written with intrinsics, and each spill puts a store-to-load
// round trip into an accumulator's chain of FMAs: on a 2-core Zen 3 EPYC the intrinsics reached 48%
// of the FMA peak on L2-resident weights, this 59% (85% on a 3 MB weight, where a call's fixed cost
// is amortised). Results/smollm2-cpu-epyc-avx2-narrow-linear has the A/B.
#define NL_BROADCAST3(off)                                                                   \
  "vbroadcastss " #off "(%[x]), %%ymm12\n\tvbroadcastss " #off "(%[x],%[s]), %%ymm13\n\t" \
  "vbroadcastss " #off "(%[x],%[s],2), %%ymm14\n\t"
#define NL_FIRST_K(off) "vmovdqu " #off "(%[w]), %%ymm15\n\tvpslld $16, %%ymm15, %%ymm15\n\t"
#define NL_SECOND_K(off) "vmovdqu " #off "(%[w]), %%ymm15\n\tvpand (%[m]), %%ymm15, %%ymm15\n\t"
#define NL_FMA3(a, b, c)                                                                                  \
  "vfmadd231ps %%ymm15, %%ymm12, %%ymm" #a "\n\tvfmadd231ps %%ymm15, %%ymm13, %%ymm" #b "\n\t" \
  "vfmadd231ps %%ymm15, %%ymm14, %%ymm" #c "\n\t"

void rows3(const float* x, int64_t K, const uint32_t* wt, float* acc) {
  alignas(32) static const uint32_t high[8] = {0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u,
                                               0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u};
  int64_t pairs = K / 2;
  if (pairs == 0) return;
  const int64_t stride = K * 4;  // bytes from one row of x to the next
  asm volatile(
      // acc in: ymm0-3 row 0's groups, ymm4-7 row 1's, ymm8-11 row 2's
      "vmovups 0(%[acc]), %%ymm0\n\tvmovups 32(%[acc]), %%ymm1\n\tvmovups 64(%[acc]), %%ymm2\n\t"
      "vmovups 96(%[acc]), %%ymm3\n\tvmovups 128(%[acc]), %%ymm4\n\tvmovups 160(%[acc]), %%ymm5\n\t"
      "vmovups 192(%[acc]), %%ymm6\n\tvmovups 224(%[acc]), %%ymm7\n\tvmovups 256(%[acc]), %%ymm8\n\t"
      "vmovups 288(%[acc]), %%ymm9\n\tvmovups 320(%[acc]), %%ymm10\n\tvmovups 352(%[acc]), %%ymm11\n\t"
      "1:\n\t"
      NL_BROADCAST3(0)
      NL_FIRST_K(0) NL_FMA3(0, 4, 8) NL_FIRST_K(32) NL_FMA3(1, 5, 9)
      NL_FIRST_K(64) NL_FMA3(2, 6, 10) NL_FIRST_K(96) NL_FMA3(3, 7, 11)
      NL_BROADCAST3(4)
      NL_SECOND_K(0) NL_FMA3(0, 4, 8) NL_SECOND_K(32) NL_FMA3(1, 5, 9)
      NL_SECOND_K(64) NL_FMA3(2, 6, 10) NL_SECOND_K(96) NL_FMA3(3, 7, 11)
      "add $8, %[x]\n\tsub $-128, %[w]\n\tdec %[n]\n\tjnz 1b\n\t"
      "vmovups %%ymm0, 0(%[acc])\n\tvmovups %%ymm1, 32(%[acc])\n\tvmovups %%ymm2, 64(%[acc])\n\t"
      "vmovups %%ymm3, 96(%[acc])\n\tvmovups %%ymm4, 128(%[acc])\n\tvmovups %%ymm5, 160(%[acc])\n\t"
      "vmovups %%ymm6, 192(%[acc])\n\tvmovups %%ymm7, 224(%[acc])\n\tvmovups %%ymm8, 256(%[acc])\n\t"
      "vmovups %%ymm9, 288(%[acc])\n\tvmovups %%ymm10, 320(%[acc])\n\tvmovups %%ymm11, 352(%[acc])\n\t"
      : [x] "+r"(x), [w] "+r"(wt), [n] "+r"(pairs)
      : [s] "r"(stride), [m] "r"(high), [acc] "r"(acc)
      : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
        "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
}

// one tile's 32 columns for rows [0, R): sums from the bias, rounded to bfloat16 once
template <int R>
void tile(const float* x, int64_t K, const uint32_t* wt, const float* bias, at::BFloat16* y, int64_t N, int64_t n0) {
  alignas(32) float acc[R][COLS];
  for (int r = 0; r < R; ++r)
    for (int64_t c = 0; c < COLS; ++c) acc[r][c] = bias ? bias[n0 + c] : 0.0f;
  if constexpr (R == 3)
    rows3(x, K, wt, &acc[0][0]);
  else
    rows12<R>(x, K, wt, &acc[0][0]);
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < 4; ++g) store_bf16(y + r * N + n0 + 8 * g, _mm256_load_ps(&acc[r][8 * g]));
}

using TileFn = void (*)(const float*, int64_t, const uint32_t*, const float*, at::BFloat16*, int64_t, int64_t);
constexpr TileFn TILES[ROWS + 1] = {nullptr, tile<1>, tile<2>, tile<3>};

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
  // each thread a contiguous range of column tiles; each tile serves every group of 3 rows while cached
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
