/* Kokoro's Snake activation, y = x + (1/alpha) * sin(alpha * x)^2, as one ONNX Runtime
 * custom operator: op "Snake" in domain "ai.rtts", inputs x (float, N x C x T), alpha and
 * inv_alpha (float, C values each: the graph's own alpha and its folded reciprocal),
 * output y (like x).
 *
 * The exported graph spells Snake as five elementwise nodes (Mul, Sin, Mul, Mul, Add),
 * each a pass over a tensor of megabytes, and ONNX Runtime runs its Sin on one thread:
 * about a fifth of the decoder's time. Here it is one pass, vectorized by the compiler
 * (-O3 -march=native) and split over the rows (n, c) with ONNX Runtime's own intra-op
 * threads (KernelContext_ParallelFor).
 *
 * The result is bit for bit the graph's. Every step rounds as the graph's nodes do:
 * v = fl(alpha * x), s = fl(sin v), then fl(x + fl(inv * fl(s * s))), so this is built
 * with -ffp-contract=off (a fused multiply-add would round once where the graph rounds
 * twice); -fno-trapping-math only lets the compiler turn the loop's selects into blends.
 * And the sine is ONNX Runtime's own: its CPU Sin is Eigen's vectorized float sine (range
 * reduction by pi/2 in parts, a sine and a cosine polynomial on [-pi/4, pi/4]), which
 * sine_squared evaluates with the same constants in the same order, so that s matches
 * it in every bit; Eigen gives the last (count mod 4) elements of the tensor, which fill
 * no packet of 4, to the C library's sinf, and so does this. ORT's x86-64 build has no
 * fused multiply-add in Eigen, its aarch64 build has; both are spelled out below. The
 * build's self-test (rtts/native/__init__.py) runs both forms in ONNX Runtime and keeps
 * the library only if they agree exactly, so a runtime whose Sin is another one gets
 * the graph form back, never other audio.
 *
 * |alpha * x| at or beyond HUGE (never in Kokoro: its largest is 128 on the 29 public
 * sentences in five languages), infinities and NaNs take sinf in a second pass over
 * the row, run only when the first saw one; there, Eigen's own reduction for huge
 * arguments may differ from sinf in the last bit.
 *
 * Since only s * s is used, the sign of the sine is not computed.
 *
 * Built and loaded by rtts/native/__init__.py; the graph rewrite is rtts/engines/snake.py.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "onnxruntime_c_api.h"

/* The oldest ONNX Runtime rtts supports (pyproject: onnxruntime>=1.20): every API call
 * below exists there (KernelContext_ParallelFor since 1.17). */
#define RTTS_ORT_API_VERSION 20

#define PACKET 4                 /* floats per Eigen packet (SSE, NEON) */
#define ROUNDER 12582912.0f      /* 1.5 * 2^23: adding it rounds to an integer */
#define TWO_OVER_PI 0.636619746685028076171875f

#if defined(__aarch64__)
/* Eigen with a fused multiply-add: three parts of pi/2. */
#define HUGE 117435.992f
#define MADD(a, b, c) fmaf((a), (b), (c))
#else
/* Eigen without one (ORT's x86-64 build): four parts of pi/2. */
#define HUGE 25966.0f
#define MADD(a, b, c) ((a) * (b) + (c))
#endif

static const OrtApi *api;

/* sin(v)^2 for |v| < HUGE: the float square of ONNX Runtime's float sine of v. */
static inline float sine_squared(float v) {
  float a = fabsf(v);
  float t = a * TWO_OVER_PI + ROUNDER; /* ROUNDER + k: its last bit is k's parity */
  uint32_t bits;
  memcpy(&bits, &t, sizeof bits);
  float k = t - ROUNDER; /* the nearest integer to v * 2/pi */
#if defined(__aarch64__)
  float r = MADD(k, -1.57079601287841796875f, a);
  r = MADD(k, -3.1391647326017846353352069854736328125e-07f, r);
  r = MADD(k, -5.390302529957764765544681040410068817436695098876953125e-15f, r);
#else
  float r = MADD(k, -1.5703125f, a);
  r = MADD(k, -0.000483989715576171875f, r);
  r = MADD(k, 1.62865035235881805419921875e-07f, r);
  r = MADD(k, 5.5644315544167710640977020375430583953857421875e-11f, r);
#endif
  float r2 = r * r; /* |r| <= pi/4 */
  float c = 2.4372266125283204019069671630859375e-05f;
  c = MADD(c, r2, -0.00138865201734006404876708984375f);
  c = MADD(c, r2, 0.041666619479656219482421875f);
  c = MADD(c, r2, -0.5f);
  c = MADD(c, r2, 1.0f);
  float s = -0.0001959234114083702898469196984621021329076029360294342041015625f;
  s = MADD(s, r2, 0.0083326873655616851693794799871284340042620897293090820312500000f);
  s = MADD(s, r2, -0.1666666203982298255503735617821803316473960876464843750000000000f);
  s = s * r2;
  s = MADD(s, r, r);
  float sine = (bits & 1) ? c : s; /* odd k: sin(k pi/2 + r) = +-cos r */
  return sine * sine;
}

/* One row of n samples with one channel's alpha and 1/alpha; from ``scalar`` on (the
 * tensor's last elements, that fill no packet), sinf as Eigen does. */
static void snake_row(const float *restrict x, float *restrict y, size_t n, size_t scalar, float alpha, float inv) {
  int unusual = 0;
  for (size_t i = 0; i < n; ++i) {
    float v = alpha * x[i];
    int ok = fabsf(v) < HUGE; /* false for NaN too */
    unusual |= !ok;
    y[i] = x[i] + inv * sine_squared(ok ? v : 0.0f);
  }
  if (!unusual && scalar >= n) return;
  for (size_t i = 0; i < n; ++i) {
    float v = alpha * x[i];
    if (i >= scalar || !(fabsf(v) < HUGE)) {
      float s = sinf(v);
      y[i] = x[i] + inv * (s * s);
    }
  }
}

typedef struct {
  const float *x, *alpha, *inv;
  float *y;
  size_t channels, width, per_channel, scalar_from; /* scalar_from: a flat index */
} Work;

static void run_row(void *data, size_t row) {
  const Work *w = (const Work *)data;
  size_t c = w->per_channel ? row % w->channels : 0;
  size_t start = row * w->width;
  size_t scalar = w->scalar_from > start ? w->scalar_from - start : 0;
  snake_row(w->x + start, w->y + start, w->width, scalar, w->alpha[c], w->inv[c]);
}

/* The float data and element count of a kernel input. */
static OrtStatus *input(OrtKernelContext *ctx, size_t index, const OrtValue **value, size_t *count,
                        int64_t *dims, size_t *rank) {
  OrtStatus *status = api->KernelContext_GetInput(ctx, index, value);
  if (status) return status;
  OrtTensorTypeAndShapeInfo *info = NULL;
  if ((status = api->GetTensorTypeAndShape(*value, &info))) return status;
  size_t r = 0;
  if (!(status = api->GetDimensionsCount(info, &r)) && dims) {
    if (r > 4) {
      status = api->CreateStatus(ORT_INVALID_ARGUMENT, "Snake: x must be N x C x T");
    } else {
      status = api->GetDimensions(info, dims, r);
    }
  }
  if (!status) status = api->GetTensorShapeElementCount(info, count);
  api->ReleaseTensorTypeAndShapeInfo(info);
  if (rank) *rank = r;
  return status;
}

static OrtStatus *ORT_API_CALL snake_compute(void *kernel, OrtKernelContext *ctx) {
  (void)kernel;
  const OrtValue *xv, *av, *iv;
  int64_t dims[4];
  size_t rank = 0, total = 0, alphas = 0, invs = 0;
  OrtStatus *status;
  if ((status = input(ctx, 0, &xv, &total, dims, &rank))) return status;
  if ((status = input(ctx, 1, &av, &alphas, NULL, NULL))) return status;
  if ((status = input(ctx, 2, &iv, &invs, NULL, NULL))) return status;
  if (rank != 3) return api->CreateStatus(ORT_INVALID_ARGUMENT, "Snake: x must be N x C x T");
  size_t channels = (size_t)dims[1];
  if (alphas != invs || (alphas != 1 && alphas != channels))
    return api->CreateStatus(ORT_INVALID_ARGUMENT, "Snake: alpha and inv_alpha need one value per channel");
  OrtValue *yv;
  if ((status = api->KernelContext_GetOutput(ctx, 0, dims, rank, &yv))) return status;
  if (total == 0) return NULL;
  Work w;
  /* GetTensorData (const) is of 1.23; the inputs are only read. */
  if ((status = api->GetTensorMutableData((OrtValue *)xv, (void **)&w.x))) return status;
  if ((status = api->GetTensorMutableData((OrtValue *)av, (void **)&w.alpha))) return status;
  if ((status = api->GetTensorMutableData((OrtValue *)iv, (void **)&w.inv))) return status;
  if ((status = api->GetTensorMutableData(yv, (void **)&w.y))) return status;
  w.channels = channels;
  w.width = (size_t)dims[2];
  w.per_channel = alphas != 1;
  w.scalar_from = total - total % PACKET;
  return api->KernelContext_ParallelFor(ctx, run_row, (size_t)dims[0] * channels, 0, &w);
}

static OrtStatus *ORT_API_CALL snake_create(const OrtCustomOp *op, const OrtApi *a, const OrtKernelInfo *info,
                                            void **kernel) {
  (void)op, (void)a, (void)info;
  *kernel = (void *)1; /* stateless; ORT wants a non-null kernel */
  return NULL;
}

static void ORT_API_CALL snake_destroy(void *kernel) { (void)kernel; }
static const char *ORT_API_CALL snake_name(const OrtCustomOp *op) { (void)op; return "Snake"; }
static const char *ORT_API_CALL snake_provider(const OrtCustomOp *op) { (void)op; return NULL; }
static ONNXTensorElementDataType ORT_API_CALL snake_type(const OrtCustomOp *op, size_t i) {
  (void)op, (void)i;
  return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}
static size_t ORT_API_CALL snake_inputs(const OrtCustomOp *op) { (void)op; return 3; }
static size_t ORT_API_CALL snake_outputs(const OrtCustomOp *op) { (void)op; return 1; }
static OrtCustomOpInputOutputCharacteristic ORT_API_CALL snake_required(const OrtCustomOp *op, size_t i) {
  (void)op, (void)i;
  return INPUT_OUTPUT_REQUIRED;
}
static OrtMemType ORT_API_CALL snake_memory(const OrtCustomOp *op, size_t i) {
  (void)op, (void)i;
  return OrtMemTypeDefault;
}
static int ORT_API_CALL snake_one(const OrtCustomOp *op) { (void)op; return 1; }
static int ORT_API_CALL snake_start(const OrtCustomOp *op) { (void)op; return 1; }
static int ORT_API_CALL snake_end(const OrtCustomOp *op) { (void)op; return 2147483647; }

/* Every field a runtime of RTTS_ORT_API_VERSION reads for an op of that version. */
static const OrtCustomOp snake_op = {
    .version = RTTS_ORT_API_VERSION,
    .CreateKernel = NULL,
    .GetName = snake_name,
    .GetExecutionProviderType = snake_provider,
    .GetInputType = snake_type,
    .GetInputTypeCount = snake_inputs,
    .GetOutputType = snake_type,
    .GetOutputTypeCount = snake_outputs,
    .KernelCompute = NULL,
    .KernelDestroy = snake_destroy,
    .GetInputCharacteristic = snake_required,
    .GetOutputCharacteristic = snake_required,
    .GetInputMemoryType = snake_memory,
    .GetVariadicInputMinArity = snake_one,
    .GetVariadicInputHomogeneity = snake_one,
    .GetVariadicOutputMinArity = snake_one,
    .GetVariadicOutputHomogeneity = snake_one,
    .CreateKernelV2 = snake_create,
    .KernelComputeV2 = snake_compute,
    .InferOutputShapeFn = NULL,
    .GetStartVersion = snake_start,
    .GetEndVersion = snake_end,
};

/* Called by SessionOptions.register_custom_ops_library. The domain is made once and kept
 * for the life of the process: sessions made with it must not outlive it. */
ORT_EXPORT OrtStatus *ORT_API_CALL RegisterCustomOps(OrtSessionOptions *options, const OrtApiBase *base) {
  static OrtCustomOpDomain *domain;
  OrtStatus *status;
  if (!api && !(api = base->GetApi(RTTS_ORT_API_VERSION))) return NULL; /* cannot even report it */
  if (!domain) {
    if ((status = api->CreateCustomOpDomain("ai.rtts", &domain))) return status;
    if ((status = api->CustomOpDomain_Add(domain, &snake_op))) return status;
  }
  return api->AddCustomOpDomain(options, domain);
}
