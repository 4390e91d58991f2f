// Reference CPU kernel for ONNX GridSample (opset 16 names bilinear/nearest, opset 20 linear),
// 4-D input only: X [N, C, H, W], grid [N, Ho, Wo, 2] (x, y in [-1, 1]) -> Y [N, C, Ho, Wo].
// Written from the operator definition (onnx/docs/Operators.md#GridSample): coordinates are
// un-normalized per align_corners, then border/reflection padding moves them into the image,
// and "zeros" padding reads 0 outside it.  Nearest rounds half to even (std::nearbyint), as
// onnxruntime's CPU kernel does (onnxruntime/core/providers/cpu/tensor/grid_sample.cc).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "edgeconv_custom.hpp"

namespace edgeconv {
namespace ops {
namespace GridSample {

struct Params {
  bool align_corners;
  bool nearest;  // else bilinear
  int padding;   // 0 zeros, 1 border, 2 reflection
};

inline std::string Parse(const Attrs& attrs, Params* p) {
  p->align_corners = attrs.Int("align_corners", 0) != 0;
  const std::string mode = attrs.String("mode", "bilinear");
  if (mode == "bilinear" || mode == "linear") {
    p->nearest = false;
  } else if (mode == "nearest") {
    p->nearest = true;
  } else {
    return "GridSample mode '" + mode + "' is not implemented by this reference kernel";
  }
  const std::string pad = attrs.String("padding_mode", "zeros");
  if (pad == "zeros") p->padding = 0;
  else if (pad == "border") p->padding = 1;
  else if (pad == "reflection") p->padding = 2;
  else return "GridSample padding_mode '" + pad + "' is unknown";
  return "";
}

inline std::string InferShapes(const Attrs& attrs, const std::vector<Shape>& in, std::vector<Shape>* out) {
  Params p;
  std::string err = Parse(attrs, &p);
  if (!err.empty()) return err;
  if (in.size() != 2 || in[0].size() != 4 || in[1].size() != 4 || in[1][3] != 2)
    return "GridSample expects X [N,C,H,W] and grid [N,Ho,Wo,2]";
  if (in[0][0] != in[1][0]) return "GridSample: X and grid batch sizes differ";
  *out = {Shape{in[0][0], in[0][1], in[1][1], in[1][2]}};
  return "";
}

// Pixel coordinate of a normalized one (align_corners: -1/1 are the corner pixels' centers).
inline float Denormalize(float v, int64_t size, bool align_corners) {
  return align_corners ? (v + 1.f) / 2.f * (size - 1) : ((v + 1.f) * size - 1.f) / 2.f;
}

// Reflect v into [lo, hi] as many times as needed.
inline float Reflect(float v, float lo, float hi) {
  const float range = hi - lo;
  if (range <= 0) return lo;
  if (v < lo) {
    const float d = lo - v;
    const int n = static_cast<int>(d / range);
    const float r = d - n * range;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (v > hi) {
    const float d = v - hi;
    const int n = static_cast<int>(d / range);
    const float r = d - n * range;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return v;
}

inline float Clamp(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }

// X[y, x] with the padding rule for indices outside the image.
inline float PixelAt(const float* image, int64_t y, int64_t x, int64_t H, int64_t W, const Params& p,
                     const float bounds[4]) {
  if (p.padding == 1) {
    x = static_cast<int64_t>(Clamp(static_cast<float>(x), 0.f, static_cast<float>(W - 1)));
    y = static_cast<int64_t>(Clamp(static_cast<float>(y), 0.f, static_cast<float>(H - 1)));
  } else if (p.padding == 2) {
    x = static_cast<int64_t>(Reflect(static_cast<float>(x), bounds[0], bounds[2]));
    y = static_cast<int64_t>(Reflect(static_cast<float>(y), bounds[1], bounds[3]));
  }
  if (x < 0 || x >= W || y < 0 || y >= H) return 0.f;
  return image[y * W + x];
}

inline std::string Compute(const Attrs& attrs, const std::vector<ConstTensor>& in, const std::vector<Tensor>& out) {
  Params p;
  std::string err = Parse(attrs, &p);
  if (!err.empty()) return err;
  if (in[0].dtype != "float32" || in[1].dtype != "float32") return "GridSample reference kernel is float32 only";
  const int64_t N = in[0].shape[0], C = in[0].shape[1], H = in[0].shape[2], W = in[0].shape[3];
  const int64_t Ho = in[1].shape[1], Wo = in[1].shape[2];
  const float* X = in[0].as<float>();
  const float* grid = in[1].as<float>();
  float* Y = out[0].as<float>();
  // Reflection bounds [x_min, y_min, x_max, y_max] in pixel coordinates.
  const float bounds[4] = {p.align_corners ? 0.f : -0.5f, p.align_corners ? 0.f : -0.5f,
                           p.align_corners ? W - 1.f : W - 0.5f, p.align_corners ? H - 1.f : H - 0.5f};
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t oy = 0; oy < Ho; ++oy) {
      for (int64_t ox = 0; ox < Wo; ++ox) {
        const float* g = grid + ((n * Ho + oy) * Wo + ox) * 2;
        float x = Denormalize(g[0], W, p.align_corners);
        float y = Denormalize(g[1], H, p.align_corners);
        if (p.padding == 1) {
          x = Clamp(x, 0.f, W - 1.f);
          y = Clamp(y, 0.f, H - 1.f);
        } else if (p.padding == 2) {
          x = Reflect(x, bounds[0], bounds[2]);
          y = Reflect(y, bounds[1], bounds[3]);
        }
        for (int64_t c = 0; c < C; ++c) {
          const float* image = X + (n * C + c) * H * W;
          float value;
          if (p.nearest) {
            value = PixelAt(image, static_cast<int64_t>(std::nearbyint(y)), static_cast<int64_t>(std::nearbyint(x)),
                            H, W, p, bounds);
          } else {
            const float x0 = std::floor(x), y0 = std::floor(y);
            const float wx = x - x0, wy = y - y0;
            const int64_t ix = static_cast<int64_t>(x0), iy = static_cast<int64_t>(y0);
            value = (1 - wy) * ((1 - wx) * PixelAt(image, iy, ix, H, W, p, bounds) +
                                wx * PixelAt(image, iy, ix + 1, H, W, p, bounds)) +
                    wy * ((1 - wx) * PixelAt(image, iy + 1, ix, H, W, p, bounds) +
                          wx * PixelAt(image, iy + 1, ix + 1, H, W, p, bounds));
          }
          Y[((n * C + c) * Ho + oy) * Wo + ox] = value;
        }
      }
    }
  }
  return "";
}

}  // namespace GridSample
}  // namespace ops
}  // namespace edgeconv
