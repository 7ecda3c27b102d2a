// The indices of each row's k largest values, for a few rows of a vocabulary's logits
// (specharness/model/accel/row_topk.py).
//
// Why: Token Recycling refreshes its matrix from the top-k of every verified node's logits, and
// torch.topk took ~0.3 ms over 8 x 49,152 bfloat16 logits on a 2-core EPYC: half the round's
// bookkeeping. For a small k almost every value is below the running k-th largest, so one pass
// compares 8 values per instruction against it (AVX2: both builds of the engine's library have it)
// and only the rare larger one is inserted into a sorted list of k (expected k ln(V/k) insertions
// on random data).
//
// Layout: x [R, V] (or one row [V]) bfloat16 or float32, contiguous; k <= V. Returns [R, k] ([k]) int64, each row's
// indices by value, largest first; equal values by index, lowest first (the first k of a stable
// descending sort). NaN is never chosen over a number (logits hold none).
#include <ATen/ATen.h>
#include <torch/library.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

struct Top {
  std::vector<float> vals;
  std::vector<int64_t> idx;
  int k, n = 0;  // n held, k once full
  explicit Top(int k_) : vals(k_), idx(k_), k(k_) {}
  float floor() const { return vals[k - 1]; }  // once full
  // v at index i, later than every index held: it goes after the values it does not exceed
  void insert(float v, int64_t i) {
    int p = n < k ? n++ : k - 1;
    while (p > 0 && vals[p - 1] < v) {
      vals[p] = vals[p - 1];
      idx[p] = idx[p - 1];
      --p;
    }
    vals[p] = v;
    idx[p] = i;
  }
};

inline float bf16(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline __m256 load8(const uint16_t* p) {  // 8 bfloat16, widened exactly
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
}
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline float value(const uint16_t* p) { return bf16(*p); }
inline float value(const float* p) { return *p; }

template <typename T>
void row(const T* x, int64_t V, int k, int64_t* out) {
  Top top(k);
  int64_t j = 0;
  for (; j < k; ++j) top.insert(value(x + j), j);  // the first k fill it
  // a value enters only if it exceeds the k-th largest so far: equal ones keep the earlier index
  for (; j + 8 <= V; j += 8) {
    unsigned m = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(load8(x + j), _mm256_set1_ps(top.floor()), _CMP_GT_OQ)));
    while (m) {
      const int b = __builtin_ctz(m);
      m &= m - 1;
      const float v = value(x + j + b);
      if (v > top.floor()) top.insert(v, j + b);  // the floor may have risen within these 8
    }
  }
  for (; j < V; ++j) {
    const float v = value(x + j);
    if (v > top.floor()) top.insert(v, j);
  }
  for (int i = 0; i < k; ++i) out[i] = top.idx[i];
}

// [R, V] -> [R, k], or one row [V] -> [k]
at::Tensor row_topk(const at::Tensor& x, int64_t k) {
  TORCH_CHECK((x.dim() == 1 || x.dim() == 2) && x.is_contiguous(), "row_topk: x must be a contiguous [V] or [rows, V] tensor");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat, "row_topk: bfloat16 or float32 only");
  const int64_t R = x.dim() == 2 ? x.size(0) : 1, V = x.size(-1);
  TORCH_CHECK(k >= 1 && k <= V, "row_topk: k must be in [1, V]");
  at::Tensor out = x.dim() == 2 ? at::empty({R, k}, x.options().dtype(at::kLong)) : at::empty({k}, x.options().dtype(at::kLong));
  int64_t* o = out.data_ptr<int64_t>();
  for (int64_t r = 0; r < R; ++r) {
    if (x.scalar_type() == at::kBFloat16)
      row(reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>()) + r * V, V, static_cast<int>(k), o + r * k);
    else
      row(x.data_ptr<float>() + r * V, V, static_cast<int>(k), o + r * k);
  }
  return out;
}

// argmax over the last dimension as one op: [V] -> [], [R, V] -> [R] (a round's greedy verification
// takes one row right after the target's forward, when every extra torch call costs tens of us)
at::Tensor row_argmax(const at::Tensor& x) {
  at::Tensor top = row_topk(x, 1);
  return x.dim() == 2 ? top.view({x.size(0)}) : top.view(at::IntArrayRef{});  // (a bare {} would be view(dtype))
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(specharness, m) {
  m.def("row_topk(Tensor x, int k) -> Tensor");
  m.def("row_argmax(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(specharness, CPU, m) {
  m.impl("row_topk", &row_topk);
  m.impl("row_argmax", &row_argmax);
}
