// One decode step of a Llama-family model in q4 weights, every layer in one call: B sequences,
// one new token each, each attending over its own KV cache.
//
// Why: at batch 1 a step is ~600 small ops, and on a 2-core VM each torch op from Python costs
// more than its arithmetic (docs/engine.md). Here the norms, rotary embedding, cache append,
// attention and MLP activation are loops over a few thousand floats, and the matmuls are the
// q4 kernel's. The engine routes every one-token row of a q4 model here, whatever the rows beside
// it (models/base.py), so a row's bits never depend on which path its batch took.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "q4_matmul.h"

namespace bidaw {
namespace {

constexpr int64_t kPerLayer = 14;  // tensors per layer in `weights` (see llama_decode below)

struct Linear {
  const uint8_t* w;
  const uint16_t* scale_min;
  const float* bias;  // nullptr: none
  int64_t in, out;
};

Linear linear(const std::vector<at::Tensor>& t, size_t i, int64_t in) {
  const at::Tensor& q = t[i];
  TORCH_CHECK(q.scalar_type() == at::kByte && q.is_contiguous() && q.size(1) * 2 == in,
              "weight ", i, ": uint8 [out, ", in / 2, "]");
  const int64_t out = q.size(0);
  TORCH_CHECK(t[i + 1].scalar_type() == at::kHalf && t[i + 1].numel() == out * in / kGroup * 2,
              "weight ", i + 1, ": float16 scale and min");
  TORCH_CHECK(t[i + 2].numel() == 0 || (t[i + 2].scalar_type() == at::kFloat &&
                                        t[i + 2].numel() == out), "weight ", i + 2, ": bias");
  return {q.data_ptr<uint8_t>(), reinterpret_cast<const uint16_t*>(t[i + 1].data_ptr<at::Half>()),
          t[i + 2].numel() ? t[i + 2].data_ptr<float>() : nullptr, in, out};
}

void run(const Linear& l, const float* x, int64_t rows, float* y) {
  q4_matmul(quantize_rows(x, rows, l.in), rows, l.in, l.w, l.scale_min, l.out, y);
  if (l.bias)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < l.out; ++j) y[r * l.out + j] += l.bias[j];
}

void rms_norm(const float* x, const float* w, int64_t rows, int64_t n, double eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float sq = 0.0f;
    for (int64_t i = 0; i < n; ++i) sq += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(sq / static_cast<float>(n) + static_cast<float>(eps));
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = xr[i] * inv * w[i];
  }
}

// x [heads, d] rotated in place: x * cos + roll(x, d / 2) * signed_sin (models/rope.py).
void rope(float* x, int64_t heads, int64_t d, const float* cos, const float* ssin) {
  std::vector<float> h(d);
  for (int64_t j = 0; j < heads; ++j) {
    float* v = x + j * d;
    for (int64_t i = 0; i < d; ++i) h[i] = v[i];
    for (int64_t i = 0; i < d; ++i) v[i] = h[i] * cos[i] + h[(i + d / 2) % d] * ssin[i];
  }
}

inline float dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float total = _mm_cvtss_f32(s);
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

// One query head over keys/values [len, d] (rows `stride` floats apart): softmax(q k / sqrt(d)) v.
void attend(const float* q, const float* k, const float* v, int64_t len, int64_t stride,
            int64_t d, float* out, std::vector<float>& score) {
  score.resize(len);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float top = -INFINITY;
  for (int64_t t = 0; t < len; ++t) {
    score[t] = dot(q, k + t * stride, d) * scale;
    top = std::max(top, score[t]);
  }
  float total = 0.0f;
  for (int64_t t = 0; t < len; ++t) total += (score[t] = std::exp(score[t] - top));
  for (int64_t i = 0; i < d; ++i) out[i] = 0.0f;
  for (int64_t t = 0; t < len; ++t) {
    const float p = score[t] / total;
    const float* vt = v + t * stride;
    for (int64_t i = 0; i < d; ++i) out[i] += p * vt[i];
  }
}

// x [B, hidden] float32: the new tokens' embeddings. caches: B tensors [L, 2, Hkv, capacity, D]
// with room at positions[b]; cos, signed_sin [B, D] for those positions. weights: per layer
// attn_norm, qkv (qweight, scale_min, bias or empty), o (3), mlp_norm, gate_up (3), down (3).
// Writes each layer's K/V at positions[b]; returns the last layer's output [B, hidden] and, if
// want_hidden6, the attention norms' outputs (tensor 6) [B, L, hidden] (else an empty tensor).
std::vector<at::Tensor> llama_decode(const at::Tensor& x_in, const std::vector<at::Tensor>& caches,
                                     const std::vector<int64_t>& positions, const at::Tensor& cos,
                                     const at::Tensor& signed_sin,
                                     const std::vector<at::Tensor>& weights, int64_t heads,
                                     int64_t kv_heads, double eps, bool want_hidden6) {
  TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kFloat, "x: float32 [B, hidden]");
  const int64_t B = x_in.size(0), hid = x_in.size(1);
  const int64_t L = static_cast<int64_t>(weights.size()) / kPerLayer;
  TORCH_CHECK(L > 0 && static_cast<int64_t>(weights.size()) == L * kPerLayer,
              "weights: ", kPerLayer, " tensors per layer");
  TORCH_CHECK(static_cast<int64_t>(caches.size()) == B && static_cast<int64_t>(positions.size()) == B,
              "one cache and one position per row");
  TORCH_CHECK(heads % kv_heads == 0, "query heads must be a multiple of KV heads");
  const int64_t D = cos.size(1), group = heads / kv_heads;
  TORCH_CHECK(cos.is_contiguous() && signed_sin.is_contiguous() && cos.size(0) == B &&
              cos.scalar_type() == at::kFloat && signed_sin.sizes() == cos.sizes(), "cos, sin: [B, D]");
  for (int64_t b = 0; b < B; ++b) {
    const at::Tensor& c = caches[b];
    TORCH_CHECK(c.is_contiguous() && c.scalar_type() == at::kFloat && c.dim() == 5 &&
                c.size(0) == L && c.size(2) == kv_heads && c.size(4) == D &&
                positions[b] >= 0 && positions[b] < c.size(3), "cache ", b, ": no room or wrong shape");
  }
  at::Tensor x = x_in.contiguous().clone();
  at::Tensor h6 = want_hidden6 ? at::empty({B, L, hid}, x.options()) : at::empty({0}, x.options());
  const int64_t qkv_width = (heads + 2 * kv_heads) * D;
  std::vector<float> h(B * hid), qkv, att(B * heads * D), proj(B * hid), gu, act;
  float* xp = x.data_ptr<float>();
  for (int64_t l = 0; l < L; ++l) {
    const size_t at0 = static_cast<size_t>(l * kPerLayer);
    const Linear qkv_l = linear(weights, at0 + 1, hid), o_l = linear(weights, at0 + 4, heads * D);
    const Linear gu_l = linear(weights, at0 + 8, hid);
    const Linear down_l = linear(weights, at0 + 11, gu_l.out / 2);
    TORCH_CHECK(qkv_l.out == qkv_width && o_l.out == hid && down_l.out == hid, "layer ", l, " shapes");
    rms_norm(xp, weights[at0].data_ptr<float>(), B, hid, eps, h.data());
    if (want_hidden6)
      for (int64_t b = 0; b < B; ++b)
        std::copy(&h[b * hid], &h[(b + 1) * hid], h6.data_ptr<float>() + (b * L + l) * hid);
    qkv.resize(B * qkv_width);
    run(qkv_l, h.data(), B, qkv.data());
    at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> score;
      for (int64_t b = begin; b < end; ++b) {
        float* row = &qkv[b * qkv_width];
        rope(row, heads + kv_heads, D, cos.data_ptr<float>() + b * D,
             signed_sin.data_ptr<float>() + b * D);  // q and k heads side by side
        float* cache = caches[b].data_ptr<float>();
        const int64_t cap = caches[b].size(3), pos = positions[b];
        for (int64_t j = 0; j < kv_heads; ++j) {
          float* k = cache + ((l * 2 + 0) * kv_heads + j) * cap * D;
          float* v = cache + ((l * 2 + 1) * kv_heads + j) * cap * D;
          std::copy(row + (heads + j) * D, row + (heads + j + 1) * D, k + pos * D);
          std::copy(row + (heads + kv_heads + j) * D, row + (heads + kv_heads + j + 1) * D, v + pos * D);
          for (int64_t g = 0; g < group; ++g) {
            const int64_t head = j * group + g;
            attend(row + head * D, k, v, pos + 1, D, D, &att[(b * heads + head) * D], score);
          }
        }
      }
    });
    run(o_l, att.data(), B, proj.data());
    for (int64_t i = 0; i < B * hid; ++i) xp[i] += proj[i];
    rms_norm(xp, weights[at0 + 7].data_ptr<float>(), B, hid, eps, h.data());
    const int64_t inter = gu_l.out / 2;
    gu.resize(B * gu_l.out);
    act.resize(B * inter);
    run(gu_l, h.data(), B, gu.data());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < inter; ++i) {
        const float gate = gu[b * gu_l.out + i], up = gu[b * gu_l.out + inter + i];
        act[b * inter + i] = gate / (1.0f + std::exp(-gate)) * up;  // silu(gate) * up
      }
    run(down_l, act.data(), B, proj.data());
    for (int64_t i = 0; i < B * hid; ++i) xp[i] += proj[i];
  }
  return {x, h6};
}

}  // namespace
}  // namespace bidaw

TORCH_LIBRARY_FRAGMENT(bidaw_native, m) {
  m.def("llama_decode(Tensor x, Tensor[] caches, int[] positions, Tensor cos, Tensor signed_sin, "
        "Tensor[] weights, int heads, int kv_heads, float eps, bool want_hidden6) -> Tensor[]",
        &bidaw::llama_decode);
}
