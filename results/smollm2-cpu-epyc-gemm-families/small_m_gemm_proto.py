"""Prototype (an experiment, not engine code): a small-M bfloat16 GEMM with AVX512-BF16 dot products (vdpbf16ps), weights packed as
[N/32][K/2][32][2] so one 64-byte load holds 32 output columns x 2 k-values, against oneDNN's prepacked
linear, cold weights (30 distinct copies, > L3), 2 threads."""
import time, statistics, torch
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <immintrin.h>
#include <omp.h>

// W packed: [N/32][K/2][32 cols][2 k] bf16. x: [M, K] bf16. y: [M, N] float32.
template <int M>
static void tile(const uint16_t* x, int64_t K, const uint16_t* wt, float* y, int64_t N, int64_t n0) {
  __m512 acc0[M], acc1[M];
  for (int m = 0; m < M; ++m) { acc0[m] = _mm512_setzero_ps(); acc1[m] = _mm512_setzero_ps(); }
  for (int64_t k2 = 0; k2 < K / 2; ++k2) {
    const uint16_t* w = wt + k2 * 64;
    _mm_prefetch((const char*)(w + 64 * 8), _MM_HINT_T0);
    __m512bh b0 = (__m512bh)_mm512_loadu_si512(w);        // cols 0-15, k pair
    __m512bh b1 = (__m512bh)_mm512_loadu_si512(w + 32);   // cols 16-31
    for (int m = 0; m < M; ++m) {
      uint32_t pair = *(const uint32_t*)(x + m * K + 2 * k2);
      __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
      acc0[m] = _mm512_dpbf16_ps(acc0[m], a, b0);
      acc1[m] = _mm512_dpbf16_ps(acc1[m], a, b1);
    }
  }
  for (int m = 0; m < M; ++m) {
    _mm512_storeu_ps(y + m * N + n0, acc0[m]);
    _mm512_storeu_ps(y + m * N + n0 + 16, acc1[m]);
  }
}

// Row-major weights, no packing: y[m,n] = dot(x[m,:], W[n,:]) by 32-wide bf16 pair dot products,
// NT output columns at a time, reduced at the end. W is the model's own [N, K] tensor.
template <int M, int NT>
static void rowtile(const uint16_t* x, int64_t K, const uint16_t* W, float* y, int64_t N, int64_t n0) {
  __m512 acc[M][NT];
  for (int m = 0; m < M; ++m) for (int j = 0; j < NT; ++j) acc[m][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 32) {
    __m512bh w[NT];
    for (int j = 0; j < NT; ++j) w[j] = (__m512bh)_mm512_loadu_si512(W + (n0 + j) * K + k);
    for (int m = 0; m < M; ++m) {
      __m512bh a = (__m512bh)_mm512_loadu_si512(x + m * K + k);
      for (int j = 0; j < NT; ++j) acc[m][j] = _mm512_dpbf16_ps(acc[m][j], a, w[j]);
    }
  }
  for (int m = 0; m < M; ++m) for (int j = 0; j < NT; ++j) y[m * N + n0 + j] = _mm512_reduce_add_ps(acc[m][j]);
}

template <int M>
static void rows(const uint16_t* x, int64_t K, const uint16_t* W, float* y, int64_t N) {
  constexpr int NT = M <= 2 ? 8 : (M <= 4 ? 4 : 2);
  #pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N / NT; ++t) rowtile<M, NT>(x, K, W, y, N, t * NT);
}

torch::Tensor gemm_rowmajor(torch::Tensor x, torch::Tensor w) {
  auto M = x.size(0), K = x.size(1), N = w.size(0);
  auto y = torch::empty({M, N}, x.options().dtype(torch::kFloat));
  const uint16_t* xp = (const uint16_t*)x.data_ptr();
  const uint16_t* wp = (const uint16_t*)w.data_ptr();
  float* yp = y.data_ptr<float>();
  for (int64_t m0 = 0; m0 < M; m0 += 8) {
    int64_t r = std::min<int64_t>(8, M - m0);
    const uint16_t* xr = xp + m0 * K; float* yr = yp + m0 * N;
    switch (r) {
      case 1: rows<1>(xr, K, wp, yr, N); break;
      case 2: rows<2>(xr, K, wp, yr, N); break;
      case 3: rows<3>(xr, K, wp, yr, N); break;
      case 4: rows<4>(xr, K, wp, yr, N); break;
      case 5: rows<5>(xr, K, wp, yr, N); break;
      case 6: rows<6>(xr, K, wp, yr, N); break;
      case 7: rows<7>(xr, K, wp, yr, N); break;
      default: rows<8>(xr, K, wp, yr, N); break;
    }
  }
  return y;
}

torch::Tensor pack(torch::Tensor w) {  // [N, K] bf16 -> [N/32, K/2, 32, 2]
  auto N = w.size(0), K = w.size(1);
  return w.view({N / 32, 32, K / 2, 2}).permute({0, 2, 1, 3}).contiguous();
}

torch::Tensor gemm(torch::Tensor x, torch::Tensor wp, int64_t N) {
  auto M = x.size(0), K = x.size(1);
  auto y = torch::empty({M, N}, x.options().dtype(torch::kFloat));
  const uint16_t* xp = (const uint16_t*)x.data_ptr();
  const uint16_t* w = (const uint16_t*)wp.data_ptr();
  float* yp = y.data_ptr<float>();
  int64_t tiles = N / 32;
  #pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tiles; ++t) {
    const uint16_t* wt = w + t * K * 32;
    for (int64_t m0 = 0; m0 < M; m0 += 8) {   // rows in groups of up to 8 (weights re-read per group)
      int64_t rows = std::min<int64_t>(8, M - m0);
      const uint16_t* xr = xp + m0 * K; float* yr = yp + m0 * N;
      switch (rows) {
        case 1: tile<1>(xr, K, wt, yr, N, t * 32); break;
        case 2: tile<2>(xr, K, wt, yr, N, t * 32); break;
        case 3: tile<3>(xr, K, wt, yr, N, t * 32); break;
        case 4: tile<4>(xr, K, wt, yr, N, t * 32); break;
        case 5: tile<5>(xr, K, wt, yr, N, t * 32); break;
        case 6: tile<6>(xr, K, wt, yr, N, t * 32); break;
        case 7: tile<7>(xr, K, wt, yr, N, t * 32); break;
        default: tile<8>(xr, K, wt, yr, N, t * 32); break;
      }
    }
  }
  return y;
}
"""
mod = load_inline("bf16gemm_proto2", cpp_sources=src, functions=["pack", "gemm", "gemm_rowmajor"],
                  extra_cflags=["-O3", "-mavx512f", "-mavx512bf16", "-mavx512bw", "-fopenmp"],
                  extra_ldflags=["-fopenmp"], build_directory=None, verbose=False)
torch.set_num_threads(2)
L = 30
for N, K in [(3072, 576), (576, 1536), (960, 576), (576, 576)]:
    Ws = [torch.randn(N, K).to(torch.bfloat16) for _ in range(L)]
    packed = [torch.ops.mkldnn._reorder_linear_weight(w, None) for w in Ws]
    ours = [mod.pack(w) for w in Ws]
    def bench(fns, M, reps=25):
        """Median us per call of each fn over the 30 cold weights, the fns interleaved rep by rep."""
        x = torch.randn(M, K).to(torch.bfloat16)
        for fn in fns:
            for _ in range(3):
                for i in range(L): fn(x, i)
        ts = [[] for _ in fns]
        for _ in range(reps):
            for j, fn in enumerate(fns):
                t = time.perf_counter()
                for i in range(L): fn(x, i)
                ts[j].append((time.perf_counter() - t) / L * 1e6)
        return [statistics.median(t) for t in ts]
    x = torch.randn(8, K).to(torch.bfloat16)
    err = (mod.gemm(x, ours[0], N) - x.float() @ Ws[0].float().t()).abs().max().item()
    err2 = (mod.gemm_rowmajor(x, Ws[0]) - x.float() @ Ws[0].float().t()).abs().max().item()
    print(f"N={N} K={K} max err vs fp32 {err:.3g} / {err2:.3g}; roofline@30GB/s {N*K*2/30e9*1e6:.0f} us")
    for M in [1, 2, 4, 8, 16]:
        a, b, c = bench([lambda x, i: torch.ops.mkldnn._linear_pointwise(x, packed[i], None, "none", [], ""),
                         lambda x, i: mod.gemm(x, ours[i], N), lambda x, i: mod.gemm_rowmajor(x, Ws[i])], M)
        print(f"  M={M:2d} oneDNN {a:6.0f} us   packed vdpbf16ps {b:6.0f} us   row-major vdpbf16ps {c:6.0f} us")
