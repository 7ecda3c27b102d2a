"""Variants of our small-M bfloat16 kernel (weight streams per thread, software prefetch distance) over the
model's GEMM sequence (30 layers x 4 shapes, 212 MB, cold), timed inside C++ as a graph calls them back to back.

    python results/smollm2-cpu-epyc-narrow-linear/kernel_variants.py   (alone on the machine, ~1 min)
"""
import time, statistics, torch, sys
from torch.utils.cpp_extension import load_inline
src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <cstring>
template <int R, int S>  // S streams: tiles t, t+step, ... at once
void tiles(const uint16_t* x, int64_t K, const uint16_t* wt, int64_t step, at::BFloat16* y, int64_t N, int64_t n0, int64_t PF) {
  __m512 acc[S][R][2];
  for (int s = 0; s < S; ++s) for (int r = 0; r < R; ++r) { acc[s][r][0] = _mm512_setzero_ps(); acc[s][r][1] = _mm512_setzero_ps(); }
  for (int64_t k2 = 0; k2 < K / 2; ++k2) {
    __m512bh b[S][2];
    for (int s = 0; s < S; ++s) {
      const uint16_t* w = wt + s * step * K * 32 + k2 * 64;
      _mm_prefetch((const char*)(w + PF * 64), _MM_HINT_T0);
      b[s][0] = (__m512bh)_mm512_loadu_si512(w); b[s][1] = (__m512bh)_mm512_loadu_si512(w + 32);
    }
    for (int r = 0; r < R; ++r) {
      uint32_t pair; std::memcpy(&pair, x + r * K + 2 * k2, 4);
      __m512bh a = (__m512bh)_mm512_set1_epi32((int)pair);
      for (int s = 0; s < S; ++s) { acc[s][r][0] = _mm512_dpbf16_ps(acc[s][r][0], a, b[s][0]); acc[s][r][1] = _mm512_dpbf16_ps(acc[s][r][1], a, b[s][1]); }
    }
  }
  for (int s = 0; s < S; ++s) for (int r = 0; r < R; ++r) for (int v = 0; v < 2; ++v)
    _mm256_storeu_si256((__m256i*)(y + r * N + n0 + s * step * 32 + 16 * v), (__m256i)_mm512_cvtneps_pbh(acc[s][r][v]));
}
template <int R, int S>
void gemm(const at::Tensor& x, const at::Tensor& w, at::Tensor& y, int64_t PF) {
  int64_t K = x.size(1), N = y.size(1), T = N / 32;
  auto xp = (const uint16_t*)x.data_ptr(); auto wp = (const uint16_t*)w.data_ptr(); auto yp = y.data_ptr<at::BFloat16>();
  at::parallel_for(0, T, 1, [&](int64_t b, int64_t e) {
    int64_t n = e - b, step = n / S, t = b;
    for (; t < b + step; ++t) tiles<R, S>(xp, K, wp + t * K * 32, step, yp, N, t * 32, PF);
    for (t = b + step * S; t < e; ++t) tiles<R, 1>(xp, K, wp + t * K * 32, 0, yp, N, t * 32, PF);
  });
}
double seq(std::vector<at::Tensor> ws, std::vector<at::Tensor> xs, int64_t streams, int64_t pf, int64_t reps) {
  std::vector<at::Tensor> ys;
  for (auto& w : ws) ys.push_back(at::empty({xs[0].size(0), w.size(0) * 32}, xs[0].options()));
  int64_t M = xs[0].size(0);
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t r = 0; r < reps; ++r) for (size_t i = 0; i < ws.size(); ++i) {
    auto& x = xs[ws[i].size(1) * 2 == xs[0].size(1) ? 0 : 1];
    if (M == 2) { if (streams == 1) gemm<2, 1>(x, ws[i], ys[i], pf); else if (streams == 2) gemm<2, 2>(x, ws[i], ys[i], pf); else gemm<2, 4>(x, ws[i], ys[i], pf); }
    else { if (streams == 1) gemm<8, 1>(x, ws[i], ys[i], pf); else gemm<8, 2>(x, ws[i], ys[i], pf); }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps * 1e3;
}
at::Tensor pack(at::Tensor w) { auto N = w.size(0), K = w.size(1); return w.view({N / 32, 32, K / 2, 2}).permute({0, 2, 1, 3}).contiguous(); }
"""
mod = load_inline("kseq2", cpp_sources=src, functions=["seq", "pack"],
                  extra_cflags=["-O3", "-mavx512f", "-mavx512bf16", "-mavx512bw", "-mavx512vl", "-fopenmp"], extra_ldflags=["-fopenmp"])
torch.set_num_threads(2)
shapes = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
ws = [mod.pack(torch.randn(n, k).bfloat16()) for _ in range(30) for n, k in shapes]
for M in (2, 8):
    xs = [torch.randn(M, 576).bfloat16(), torch.randn(M, 1536).bfloat16()]
    arms = {f"s{s} pf{pf}": (s, pf) for s in ((1, 2, 4) if M == 2 else (1, 2)) for pf in (0, 8, 16, 32)}
    ts = {k: [] for k in arms}
    for _ in range(9):
        for k, (s, pf) in arms.items(): ts[k].append(mod.seq(ws, xs, s, pf, 3))
    print(f"M={M}: " + "  ".join(f"{k} {statistics.median(v):.2f}" for k, v in ts.items()), "ms (212 MB)")
