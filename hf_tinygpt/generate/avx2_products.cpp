// Products of a few bf16 rows x [M, K] (M <= 4) with weight rows [N, K] on CPUs with AVX2 and FMA but no AVX-512
// BF16, summed in fp32 with fused multiply-adds and rounded to bf16 once:
//   bf16_products(x, weight, bias):  x @ weight.T + bias, bf16 weights (`torch.nn.functional.linear` in bfloat16);
//   int8_products(x, weight, scale): (x @ weight.T) * scale, int8 weights and one bf16 scale per weight row (torch's
//                                    `_weight_int8pack_mm`).
// Each 16 weights widen to two vectors of 8 fp32: a bf16 number is the top half of an fp32 one, so bf16 pairs widen
// with one shift (the even ones) and one mask (the odd ones); int8 ones sign-extend and convert. The rows of x are
// widened once per call and laid out to match. Why kernels of our own: scripts/measurement_log.md, "bf16 and int8 on
// AVX2".
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AVX2_PRODUCTS 1
#define WITH_AVX2 __attribute__((target("avx2,fma")))
#else
#define AVX2_PRODUCTS 0
#endif

namespace {

constexpr int64_t MAX_ROWS = 4;

bool supported() {
#if AVX2_PRODUCTS
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

// Whether the CPU multiplies bf16 natively (VDPBF16PS), where torch's and inductor's own bf16 kernels are fast.
bool has_avx512_bf16() {
#if AVX2_PRODUCTS
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

#if AVX2_PRODUCTS
// Each stream of weight rows is prefetched this many bytes ahead of where it is read.
constexpr int64_t PREFETCH_BYTES = 8192;

WITH_AVX2 inline float sum_of(__m256 v) {
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(quarter, _mm_shuffle_ps(quarter, quarter, 1)));
}

// bf16 weights: 16 of them as 8 pairs; the first vector holds w[2i], the second w[2i + 1].
struct Bf16Weights {
  using Type = uint16_t;
  static int64_t lane(int64_t i) { return (i % 2) * 8 + i / 2; }  // where x[16b + i] goes in its block's 16
  WITH_AVX2 static void widen(const Type* w, __m256& first, __m256& second) {
    const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    first = _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
    second = _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  static float value(Type w) { return at::BFloat16(w, at::BFloat16::from_bits()); }
};

// int8 weights: the first vector holds w[0..8), the second w[8..16).
struct Int8Weights {
  using Type = int8_t;
  static int64_t lane(int64_t i) { return i; }
  WITH_AVX2 static void widen(const Type* w, __m256& first, __m256& second) {
    // Each 8 loaded and sign-extended in one instruction: one load of 16 and a shuffle for its upper half is more
    // arithmetic, and int8 products are bound by it on such a CPU.
    first = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w))));
    second = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + 8))));
  }
  static float value(Type w) { return static_cast<float>(w); }
};

// The rows of x widened to fp32, each block of 16 in the order its weights widen to (K rounded down to 16), and the
// rest as it is.
template <typename Weights>
std::vector<float> widened_rows(const at::BFloat16* x, int64_t M, int64_t K) {
  const int64_t K16 = K / 16 * 16;
  std::vector<float> out(M * K);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      out[m * K + (k < K16 ? k / 16 * 16 + Weights::lane(k % 16) : k)] = static_cast<float>(x[m * K + k]);
  return out;
}

// Weight rows n0, n0 + stride, ..., n0 + (NB - 1) * stride against M rows of widened x: y = round(sum * scale + bias),
// scale and bias optional. Each (row, weight row) pair sums its two halves of 8 in accumulators of their own: one chain
// of dependent FMAs would wait on each one's latency.
template <typename Weights, int M, int NB>
WITH_AVX2 void block(const float* x, const typename Weights::Type* weight, const at::BFloat16* scale,
                     const at::BFloat16* bias, at::BFloat16* y, int64_t n0, int64_t stride, int64_t N, int64_t K,
                     bool prefetch) {
  const int64_t K16 = K / 16 * 16;
  __m256 firsts[M][NB], seconds[M][NB];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) firsts[m][j] = seconds[m][j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K16; k += 16) {
    __m256 first[NB], second[NB];
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) {
      const typename Weights::Type* row = weight + (n0 + j * stride) * K + k;
      if (prefetch && k % (64 / sizeof(typename Weights::Type)) == 0)  // a cache line of this stream at a time
        _mm_prefetch(reinterpret_cast<const char*>(row) + PREFETCH_BYTES, _MM_HINT_T0);
      Weights::widen(row, first[j], second[j]);
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m256 xa = _mm256_loadu_ps(x + m * K + k), xb = _mm256_loadu_ps(x + m * K + k + 8);
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) {
        firsts[m][j] = _mm256_fmadd_ps(xa, first[j], firsts[m][j]);
        seconds[m][j] = _mm256_fmadd_ps(xb, second[j], seconds[m][j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) {
      float total = sum_of(_mm256_add_ps(firsts[m][j], seconds[m][j]));
      const int64_t n = n0 + j * stride;
      for (int64_t k = K16; k < K; ++k) total += x[m * K + k] * Weights::value(weight[n * K + k]);
      if (scale != nullptr) total *= static_cast<float>(scale[n]);
      if (bias != nullptr) total += static_cast<float>(bias[n]);
      y[m * N + n] = at::BFloat16(total);
    }
}

// M rows of x against all of weight. Each thread takes a run of weight rows and reads it as NB streams, one per
// stretch of the run, so that it reads NB long runs of memory at once: NB neighbouring rows at a time read runs of one
// short row each (768 weights in GPT-2's attention), which the CPU's prefetchers followed at two thirds of the
// bandwidth (scripts/measurement_log.md, "bf16 and int8 on AVX2").
template <typename Weights, int M>
void rows_times_weight(const float* x, const typename Weights::Type* weight, const at::BFloat16* scale,
                       const at::BFloat16* bias, at::BFloat16* y, int64_t N, int64_t K) {
  constexpr int NB = M == 1 ? 4 : (M == 2 ? 2 : 1);  // at most 8 accumulators beside the widened weights
  const int64_t ahead = PREFETCH_BYTES / sizeof(typename Weights::Type);
  at::parallel_for(0, N / NB, 16, [&](int64_t begin, int64_t end) {
    const int64_t length = end - begin;  // rows in each stream: the thread's run is rows [begin * NB, end * NB)
    for (int64_t i = 0; i < length; ++i) {
      const bool prefetch = (i + 1) * K + ahead <= length * K;  // within the stream
      block<Weights, M, NB>(x, weight, scale, bias, y, begin * NB + i, length, N, K, prefetch);
    }
  });
  for (int64_t n = N / NB * NB; n < N; ++n) block<Weights, M, 1>(x, weight, scale, bias, y, n, 1, N, K, false);
}

template <typename Weights>
void products(const at::Tensor& rows, const at::Tensor& w, const at::BFloat16* scale, const at::BFloat16* bias,
              at::Tensor& y) {
  const int64_t M = rows.size(0), K = rows.size(1), N = w.size(0);
  const std::vector<float> x = widened_rows<Weights>(rows.const_data_ptr<at::BFloat16>(), M, K);
  const auto* wp = static_cast<const typename Weights::Type*>(w.const_data_ptr());
  at::BFloat16* yp = y.mutable_data_ptr<at::BFloat16>();
  switch (M) {
    case 1: rows_times_weight<Weights, 1>(x.data(), wp, scale, bias, yp, N, K); break;
    case 2: rows_times_weight<Weights, 2>(x.data(), wp, scale, bias, yp, N, K); break;
    case 3: rows_times_weight<Weights, 3>(x.data(), wp, scale, bias, yp, N, K); break;
    default: rows_times_weight<Weights, 4>(x.data(), wp, scale, bias, yp, N, K); break;
  }
}
#endif

// The checks both ops share; x's rows, contiguous, and an empty output of their shape.
std::pair<at::Tensor, at::Tensor> checked(const char* op, const at::Tensor& x, const at::Tensor& weight,
                                          at::ScalarType weight_type, const char* weight_name) {
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2, op, ": x [M, K] and weight [N, K] expected, got ", x.sizes(),
              " and ", weight.sizes());
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && weight.scalar_type() == weight_type, op,
              ": x in bfloat16 and weight in ", weight_name, " expected");
  TORCH_CHECK(x.size(1) == weight.size(1), op, ": x ", x.sizes(), " and weight ", weight.sizes(), " do not fit");
  TORCH_CHECK(x.size(0) <= MAX_ROWS, op, ": at most ", MAX_ROWS, " rows, got ", x.size(0));
  TORCH_CHECK(x.is_meta() || supported(), op, ": this CPU lacks AVX2 and FMA");
  const at::Tensor rows = x.contiguous();
  return {rows, at::empty({rows.size(0), weight.size(0)}, rows.options())};
}

// A bf16 vector of one value per weight row (a bias, or int8 scales), checked.
const at::BFloat16* per_row(const char* op, const char* name, const at::Tensor& values, const at::Tensor& weight) {
  TORCH_CHECK(values.dim() == 1 && values.size(0) == weight.size(0) && values.scalar_type() == at::kBFloat16, op,
              ": a bfloat16 ", name, " of ", weight.size(0), " expected, got ", values.sizes());
  TORCH_CHECK(values.is_contiguous(), op, ": a contiguous ", name, " expected");
  return values.is_meta() ? nullptr : values.const_data_ptr<at::BFloat16>();
}

at::Tensor bf16_products(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias) {
  auto [rows, y] = checked("bf16_products", x, weight, at::kBFloat16, "bfloat16");
  const at::BFloat16* b = bias.has_value() ? per_row("bf16_products", "bias", *bias, weight) : nullptr;
  if (x.is_meta() || rows.size(0) == 0) return y;  // the shape alone, for torch.compile's tracing
#if AVX2_PRODUCTS
  products<Bf16Weights>(rows, weight.contiguous(), nullptr, b, y);
#endif
  return y;
}

at::Tensor int8_products(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& scale) {
  auto [rows, y] = checked("int8_products", x, weight, at::kChar, "int8");
  const at::BFloat16* s = per_row("int8_products", "scale", scale, weight);
  if (x.is_meta() || rows.size(0) == 0) return y;
#if AVX2_PRODUCTS
  products<Int8Weights>(rows, weight.contiguous(), s, nullptr, y);
#endif
  return y;
}

}  // namespace

TORCH_LIBRARY(hf_tinygpt_avx2, m) {
  m.def("bf16_products(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
  m.def("int8_products(Tensor x, Tensor weight, Tensor scale) -> Tensor");
  m.def("supported() -> bool", &supported);
  m.def("has_avx512_bf16() -> bool", &has_avx512_bf16);
}

TORCH_LIBRARY_IMPL(hf_tinygpt_avx2, CPU, m) {
  m.impl("bf16_products", &bf16_products);
  m.impl("int8_products", &int8_products);
}
TORCH_LIBRARY_IMPL(hf_tinygpt_avx2, Meta, m) {
  m.impl("bf16_products", &bf16_products);
  m.impl("int8_products", &int8_products);
}
