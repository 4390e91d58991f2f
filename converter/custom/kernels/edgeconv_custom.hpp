// edgeconv custom-layer runtime: the framework-neutral types every generated kernel uses.
//
// A framework wrapper (TFLite TfLiteRegistration, TNN layer acc, MACE Operation) converts its
// attribute storage into `edgeconv::Attrs` and its tensors into `ConstTensor`/`Tensor` views,
// then calls the op's `InferShapes` and `Compute`.  No exceptions, no allocation in Compute:
// errors come back as a non-empty message string, as every plugin API wants a status code.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace edgeconv {

using Shape = std::vector<int64_t>;

inline int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

inline std::string ShapeString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// A read-only tensor: contiguous, row-major (the ONNX layout), dtype named as in ONNX/numpy.
struct ConstTensor {
  const void* data;
  Shape shape;
  std::string dtype;  // "float32", "int64", ...
  template <typename T> const T* as() const { return static_cast<const T*>(data); }
};

struct Tensor {
  void* data;
  Shape shape;
  std::string dtype;
  template <typename T> T* as() const { return static_cast<T*>(data); }
};

// The ONNX node's attributes, by kind (ONNX AttributeProto types INT, FLOAT, STRING, INTS, FLOATS).
struct Attrs {
  std::map<std::string, int64_t> ints;
  std::map<std::string, float> floats;
  std::map<std::string, std::string> strings;
  std::map<std::string, std::vector<int64_t>> int_lists;
  std::map<std::string, std::vector<float>> float_lists;

  int64_t Int(const std::string& k, int64_t fallback) const {
    auto it = ints.find(k);
    return it == ints.end() ? fallback : it->second;
  }
  float Float(const std::string& k, float fallback) const {
    auto it = floats.find(k);
    return it == floats.end() ? fallback : it->second;
  }
  std::string String(const std::string& k, const std::string& fallback) const {
    auto it = strings.find(k);
    return it == strings.end() ? fallback : it->second;
  }
  std::vector<int64_t> Ints(const std::string& k) const {
    auto it = int_lists.find(k);
    return it == int_lists.end() ? std::vector<int64_t>() : it->second;
  }
  std::vector<float> Floats(const std::string& k) const {
    auto it = float_lists.find(k);
    return it == float_lists.end() ? std::vector<float>() : it->second;
  }
};

}  // namespace edgeconv
