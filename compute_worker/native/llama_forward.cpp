// A forward of a Llama-family model in q4 weights, every layer in one call: a packed batch of
// sequences (prefill chunks and one-token decodes alike), each attending over its own KV cache.
//
// Why: at batch 1 a decode step is ~600 small ops, and on a 2-core VM each torch op from Python
// costs more than its arithmetic (docs/engine.md). Here the norms, rotary embedding, cache
// append, attention and MLP activation are loops over a few thousand floats and the matmuls are
// the q4 kernel's. Every row is computed alone, the same instructions whichever chunk or batch
// it comes in (the q4 kernel's tiling never changes a row's bits; attention is one query row at
// a time), so KV prefilled in one pass equals KV computed token by token, bit for bit: q4 needs
// no aligned blocks (models/kv_blocks.py). Built with -ffp-contract=off so that a*b + c*d is
// rounded as torch rounds it (the rotary embedding then matches models/rope.py's, which
// tensor 6 -> K/V runs).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "q4_matmul.h"

namespace bidaw {
namespace {

constexpr int64_t kPerLayer = 14;  // tensors per layer in `weights` (see llama_forward below)

struct Linear {
  const uint8_t* w;
  const uint16_t* scale_min;
  const float* bias;  // nullptr: none
  int64_t in, out;
};

// Weight i of `t` in the q4 kernel's layout (q4_linear in q4_kernels.cpp), then its scale and min,
// then its bias or an empty tensor.
Linear linear(const std::vector<at::Tensor>& t, size_t i, int64_t in, int64_t out) {
  const at::Tensor& q = t[i];
  const int64_t blocks = (out + 7) / 8;
  TORCH_CHECK(in % kGroup == 0, "weight ", i, ": ", in, " inputs, not whole groups of ", kGroup);
  TORCH_CHECK(q.scalar_type() == at::kByte && q.is_contiguous() && q.dim() == 2 &&
              q.size(0) == blocks && q.size(1) == in * 4,
              "weight ", i, ": uint8 [", blocks, ", ", in * 4, "]");
  TORCH_CHECK(t[i + 1].scalar_type() == at::kHalf && t[i + 1].is_contiguous() &&
              t[i + 1].numel() == blocks * 8 * in / kGroup * 2,
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

inline float hsum8(__m256 acc) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float total = hsum8(acc);
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

// e^x, 8 at a time: x = n ln2 + r, |r| <= ln2 / 2, e^r by its degree-6 Taylor polynomial
// (relative error < 2e-7), 2^n through the exponent bits; x clamped to [-87, 88], where e^x is a
// normal float.
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693359375f)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(-2.12194440e-4f)));
  __m256 p = _mm256_set1_ps(1.0f / 720);
  for (const float c : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(c));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
                                                          _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// out = silu(gate) * up = gate / (1 + e^-gate) * up, for gate_up = [gate | up] of n each.
void silu_mul(const float* gate_up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate_up + i);
    const __m256 e = exp8(_mm256_xor_ps(g, sign));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)),
                                            _mm256_loadu_ps(gate_up + n + i)));
  }
  for (; i < n; ++i) {  // the tail through the same arithmetic, one lane used
    float e[8];
    _mm256_storeu_ps(e, exp8(_mm256_set1_ps(-gate_up[i])));
    out[i] = gate_up[i] / (1.0f + e[0]) * gate_up[n + i];
  }
}

// The softmax of scores [len] in place (their max `top`); returns their sum.
float softmax_exp(float* score, int64_t len, float top) {
  int64_t t = 0;
  __m256 sum8 = _mm256_setzero_ps();
  for (; t + 8 <= len; t += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(score + t), _mm256_set1_ps(top)));
    _mm256_storeu_ps(score + t, e);
    sum8 = _mm256_add_ps(sum8, e);
  }
  float part[8], total = 0.0f;
  _mm256_storeu_ps(part, sum8);
  for (const float v : part) total += v;
  for (; t < len; ++t) {  // the tail through the same polynomial, one lane used
    float e[8];
    _mm256_storeu_ps(e, exp8(_mm256_set1_ps(score[t] - top)));
    total += (score[t] = e[0]);
  }
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
  const float inv = 1.0f / softmax_exp(score.data(), len, top);
  for (int64_t i = 0; i < d; ++i) out[i] = 0.0f;
  for (int64_t t = 0; t < len; ++t) {
    const float p = score[t] * inv;
    const float* vt = v + t * stride;
    int64_t i = 0;
    for (; i + 8 <= d; i += 8)
      _mm256_storeu_ps(out + i, _mm256_fmadd_ps(_mm256_set1_ps(p), _mm256_loadu_ps(vt + i),
                                                _mm256_loadu_ps(out + i)));
    for (; i < d; ++i) out[i] += p * vt[i];
  }
}

// attend() for a head size D known at compile time (64, 128: most models), the same arithmetic
// in the same order, so the same bits; q and the output stay in registers, where attend() takes
// each key's output through memory (a store-to-load wait per key). Measured: a 16-row decode
// step at 1,000 keys ~10% faster in all.
template <int D>
void attend_d(const float* q, const float* k, const float* v, int64_t len, int64_t stride,
              float* out, std::vector<float>& score) {
  constexpr int kV = D / 8;
  score.resize(len);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  __m256 qv[kV], acc[kV];
  for (int i = 0; i < kV; ++i) qv[i] = _mm256_loadu_ps(q + 8 * i);
  float top = -INFINITY;
  for (int64_t t = 0; t < len; ++t) {
    __m256 sum = _mm256_setzero_ps();
    for (int i = 0; i < kV; ++i)
      sum = _mm256_fmadd_ps(qv[i], _mm256_loadu_ps(k + t * stride + 8 * i), sum);
    score[t] = hsum8(sum) * scale;
    top = std::max(top, score[t]);
  }
  const float inv = 1.0f / softmax_exp(score.data(), len, top);
  for (int i = 0; i < kV; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t t = 0; t < len; ++t) {
    const __m256 p = _mm256_set1_ps(score[t] * inv);
    for (int i = 0; i < kV; ++i)
      acc[i] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + t * stride + 8 * i), acc[i]);
  }
  for (int i = 0; i < kV; ++i) _mm256_storeu_ps(out + 8 * i, acc[i]);
}

// x [N, hidden] float32: the new tokens' embeddings, sequence after sequence; sequence s has
// counts[s] rows at positions starts[s].. of caches[s] ([L, 2, Hkv, capacity, D], with room);
// cos, signed_sin [N, D] for each row's position. weights: per layer attn_norm, qkv (qweight,
// scale_min, bias or empty), o (3), mlp_norm, gate_up (3), down (3). Writes each row's K/V at its
// position; returns the last layer's output [N, hidden] and, if want_hidden6, the attention
// norms' outputs (tensor 6) [N, L, hidden] (else an empty tensor).
std::vector<at::Tensor> llama_forward(const at::Tensor& x_in, const std::vector<at::Tensor>& caches,
                                      const std::vector<int64_t>& starts,
                                      const std::vector<int64_t>& counts, const at::Tensor& cos,
                                      const at::Tensor& signed_sin,
                                      const std::vector<at::Tensor>& weights, int64_t heads,
                                      int64_t kv_heads, double eps, bool want_hidden6) {
  TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kFloat, "x: float32 [N, hidden]");
  const int64_t N = x_in.size(0), hid = x_in.size(1), S = static_cast<int64_t>(caches.size());
  const int64_t L = static_cast<int64_t>(weights.size()) / kPerLayer;
  TORCH_CHECK(L > 0 && static_cast<int64_t>(weights.size()) == L * kPerLayer,
              "weights: ", kPerLayer, " tensors per layer");
  TORCH_CHECK(static_cast<int64_t>(starts.size()) == S && static_cast<int64_t>(counts.size()) == S,
              "one start and one count per cache");
  TORCH_CHECK(heads % kv_heads == 0, "query heads must be a multiple of KV heads");
  const int64_t D = cos.size(1), group = heads / kv_heads;
  TORCH_CHECK(cos.is_contiguous() && signed_sin.is_contiguous() && cos.size(0) == N &&
              cos.scalar_type() == at::kFloat && signed_sin.sizes() == cos.sizes(), "cos, sin: [N, D]");
  std::vector<int64_t> seq_of(N), pos_of(N);  // each row's sequence and position
  int64_t row = 0;
  for (int64_t s = 0; s < S; ++s) {
    const at::Tensor& c = caches[s];
    TORCH_CHECK(c.is_contiguous() && c.scalar_type() == at::kFloat && c.dim() == 5 &&
                c.size(0) == L && c.size(2) == kv_heads && c.size(4) == D && counts[s] > 0 &&
                starts[s] >= 0 && starts[s] + counts[s] <= c.size(3),
                "cache ", s, ": no room or wrong shape");
    for (int64_t i = 0; i < counts[s] && row < N; ++i, ++row) seq_of[row] = s, pos_of[row] = starts[s] + i;
  }
  TORCH_CHECK(row == N, "the counts add up to ", row, " rows, x has ", N);
  // a thread's chunk of query heads is worth its start (some 64k multiply-adds), so a decode's
  // few heads over a short context stay on this thread; the split never changes a head's bits
  int64_t keys = 0;
  for (int64_t r = 0; r < N; ++r) keys += pos_of[r] + 1;
  const int64_t attention_grain = std::max<int64_t>(1, (int64_t{1} << 16) * N / (keys * 2 * D));
  at::Tensor x = x_in.contiguous().clone();
  at::Tensor h6 = want_hidden6 ? at::empty({N, L, hid}, x.options()) : at::empty({0}, x.options());
  const int64_t qkv_width = (heads + 2 * kv_heads) * D;
  std::vector<float> h(N * hid), qkv, att(N * heads * D), proj(N * hid), gu, act;
  float* xp = x.data_ptr<float>();
  for (int64_t l = 0; l < L; ++l) {
    const size_t at0 = static_cast<size_t>(l * kPerLayer);
    TORCH_CHECK(weights[at0 + 11].dim() == 2, "weight ", at0 + 11, ": uint8 [blocks, inputs * 4]");
    const int64_t inter = weights[at0 + 11].size(1) / 4;  // the down projection's inputs
    const Linear qkv_l = linear(weights, at0 + 1, hid, qkv_width);
    const Linear o_l = linear(weights, at0 + 4, heads * D, hid);
    const Linear gu_l = linear(weights, at0 + 8, hid, 2 * inter);
    const Linear down_l = linear(weights, at0 + 11, inter, hid);
    rms_norm(xp, weights[at0].data_ptr<float>(), N, hid, eps, h.data());
    if (want_hidden6)
      for (int64_t r = 0; r < N; ++r)
        std::copy(&h[r * hid], &h[(r + 1) * hid], h6.data_ptr<float>() + (r * L + l) * hid);
    qkv.resize(N * qkv_width);
    run(qkv_l, h.data(), N, qkv.data());
    for (int64_t r = 0; r < N; ++r) {  // rotate q and k, append k and v at the row's position
      float* q = &qkv[r * qkv_width];
      rope(q, heads + kv_heads, D, cos.data_ptr<float>() + r * D, signed_sin.data_ptr<float>() + r * D);
      const at::Tensor& c = caches[seq_of[r]];
      float* cache = c.data_ptr<float>();
      const int64_t cap = c.size(3);
      for (int64_t j = 0; j < kv_heads; ++j)
        for (int64_t kv = 0; kv < 2; ++kv)
          std::copy(q + (heads + kv * kv_heads + j) * D, q + (heads + kv * kv_heads + j + 1) * D,
                    cache + (((l * 2 + kv) * kv_heads + j) * cap + pos_of[r]) * D);
    }
    at::parallel_for(0, N * heads, attention_grain, [&](int64_t begin, int64_t end) {
      std::vector<float> score;
      for (int64_t i = begin; i < end; ++i) {  // query row r's head: keys 0..its position
        const int64_t r = i / heads, head = i % heads, j = head / group;
        const at::Tensor& c = caches[seq_of[r]];
        const int64_t cap = c.size(3);
        const float* k = c.data_ptr<float>() + ((l * 2 + 0) * kv_heads + j) * cap * D;
        const float* v = c.data_ptr<float>() + ((l * 2 + 1) * kv_heads + j) * cap * D;
        const float* q = &qkv[r * qkv_width + head * D];
        if (D == 64) {
          attend_d<64>(q, k, v, pos_of[r] + 1, D, &att[i * D], score);
        } else if (D == 128) {
          attend_d<128>(q, k, v, pos_of[r] + 1, D, &att[i * D], score);
        } else {
          attend(q, k, v, pos_of[r] + 1, D, D, &att[i * D], score);
        }
      }
    });
    run(o_l, att.data(), N, proj.data());
    for (int64_t i = 0; i < N * hid; ++i) xp[i] += proj[i];
    rms_norm(xp, weights[at0 + 7].data_ptr<float>(), N, hid, eps, h.data());
    gu.resize(N * gu_l.out);
    act.resize(N * inter);
    run(gu_l, h.data(), N, gu.data());
    const int64_t silu_grain = std::max<int64_t>(1, (int64_t{1} << 14) / inter);
    at::parallel_for(0, N, silu_grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) silu_mul(&gu[r * gu_l.out], inter, &act[r * inter]);
    });
    run(down_l, act.data(), N, proj.data());
    for (int64_t i = 0; i < N * hid; ++i) xp[i] += proj[i];
  }
  return {x, h6};
}

}  // namespace
}  // namespace bidaw

TORCH_LIBRARY_FRAGMENT(bidaw_native, m) {
  m.def("llama_forward(Tensor x, Tensor[] caches, int[] starts, int[] counts, Tensor cos, "
        "Tensor signed_sin, Tensor[] weights, int heads, int kv_heads, float eps, "
        "bool want_hidden6) -> Tensor[]", &bidaw::llama_forward);
}
