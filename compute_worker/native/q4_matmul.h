// The int4 matmul of q4_kernels.cpp, for the other kernels of the library (llama_forward.cpp).
#pragma once

#include <cstdint>
#include <vector>

namespace bidaw {

constexpr int64_t kGroup = 32;  // inputs per quantization group, of weights and activations

// Rows of x quantized per group: q = round(x / d), d = max|x| / 127; sum = d * sum(q) (the
// dequantized group's sum, for the int4 format's min term).
struct QuantRows {
  std::vector<int8_t> q;
  std::vector<float> d, sum;
};

QuantRows quantize_rows(const float* x, int64_t rows, int64_t k);

// out [rows, n] = x [rows, k] times the int4 weight (qweight uint8 [n, k / 2], scale_min float16
// bits [n, k / 32, 2]) transposed; parallel over column blocks on torch's intra-op threads.
void q4_matmul(const QuantRows& xq, int64_t rows, int64_t k, const uint8_t* w,
               const uint16_t* scale_min, int64_t n, float* out);

}  // namespace bidaw
