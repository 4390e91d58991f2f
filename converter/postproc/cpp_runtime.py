"""The part of the generated C++ header every model gets: tensor types and index helpers.

``Tensor<T>`` owns a shape and its row-major data; ``View<T>`` is a caller-owned flat buffer
(a runtime's output) with its shape.  ``detail`` holds numpy-style broadcasting, an odometer
that walks strided indices, and the element-wise drivers the kernels in ``ops_cpp`` build on.
"""

from __future__ import annotations

INCLUDES = (
    "algorithm", "array", "cmath", "cstdint", "limits", "numeric", "stdexcept", "string",
    "type_traits", "utility", "vector",
)

RUNTIME = r"""
template <typename T>
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<T> data;
};

// A flat buffer owned by the caller (e.g. a runtime's output) plus its shape.
template <typename T>
struct View {
  const T* data = nullptr;
  std::vector<int64_t> shape;
};

namespace detail {

template <typename T>
struct identity {
  using type = T;
};

inline int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

inline int64_t rank_of(const std::vector<int64_t>& shape) { return static_cast<int64_t>(shape.size()); }

// Product of the dimensions in [begin, end).
inline int64_t prod(const std::vector<int64_t>& shape, int64_t begin, int64_t end) {
  int64_t n = 1;
  for (int64_t i = begin; i < end; ++i) n *= shape[static_cast<size_t>(i)];
  return n;
}

inline int64_t norm_axis(int64_t axis, int64_t rank, const char* op) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) throw std::invalid_argument(std::string(op) + ": axis out of range");
  return a;
}

template <typename T>
Tensor<T> from_view(const View<T>& v) {
  Tensor<T> t;
  t.shape = v.shape;
  t.data.assign(v.data, v.data + numel(v.shape));
  return t;
}

// One piece of a merged output: `shape` elements from `offset`, cast back to the original dtype.
template <typename To, typename From>
Tensor<To> unpack(const View<From>& merged, int64_t offset, std::vector<int64_t> shape) {
  const int64_t n = numel(shape);
  if (offset + n > numel(merged.shape)) throw std::invalid_argument("merged output is too short");
  Tensor<To> t;
  t.shape = std::move(shape);
  t.data.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t.data[static_cast<size_t>(i)] = static_cast<To>(merged.data[offset + i]);
  return t;
}

// numpy-style (multidirectional) broadcasting of several shapes.
inline std::vector<int64_t> broadcast_shape(const std::vector<const std::vector<int64_t>*>& shapes, const char* op) {
  size_t rank = 0;
  for (const auto* s : shapes) rank = std::max(rank, s->size());
  std::vector<int64_t> out(rank, 1);
  for (const auto* s : shapes) {
    const size_t pad = rank - s->size();
    for (size_t i = 0; i < s->size(); ++i) {
      const int64_t d = (*s)[i];
      int64_t& o = out[pad + i];
      if (d == o || d == 1) continue;
      if (o != 1) throw std::invalid_argument(std::string(op) + ": shapes do not broadcast");
      o = d;
    }
  }
  return out;
}

// Element strides of `shape` read through the broadcast shape `out` (0 on broadcast axes).
inline std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& shape, const std::vector<int64_t>& out) {
  std::vector<int64_t> strides(out.size(), 0);
  const size_t pad = out.size() - shape.size();
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[pad + i] = shape[i] == 1 ? 0 : step;
    step *= shape[i];
  }
  return strides;
}

// Calls f(k, offsets) for each element k of `out`; offsets[j] is the element of input j it reads.
template <size_t N, typename F>
void for_each_index(const std::vector<int64_t>& out, const std::array<std::vector<int64_t>, N>& strides, F f) {
  const int64_t n = numel(out);
  const size_t rank = out.size();
  std::vector<int64_t> index(rank, 0);
  std::array<int64_t, N> offsets{};
  for (int64_t k = 0; k < n; ++k) {
    f(k, offsets);
    for (size_t d = rank; d-- > 0;) {
      ++index[d];
      for (size_t j = 0; j < N; ++j) offsets[j] += strides[j][d];
      if (index[d] < out[d]) break;
      for (size_t j = 0; j < N; ++j) offsets[j] -= strides[j][d] * out[d];
      index[d] = 0;
    }
  }
}

template <typename R, typename A, typename F>
Tensor<R> unary(const Tensor<A>& x, F f) {
  Tensor<R> out;
  out.shape = x.shape;
  out.data.resize(x.data.size());
  for (size_t i = 0; i < x.data.size(); ++i) out.data[i] = f(x.data[i]);
  return out;
}

template <typename R, typename A, typename B, typename F>
Tensor<R> binary(const Tensor<A>& a, const Tensor<B>& b, F f, const char* op) {
  Tensor<R> out;
  out.shape = broadcast_shape({&a.shape, &b.shape}, op);
  out.data.resize(static_cast<size_t>(numel(out.shape)));
  const std::array<std::vector<int64_t>, 2> strides{broadcast_strides(a.shape, out.shape),
                                                    broadcast_strides(b.shape, out.shape)};
  for_each_index<2>(out.shape, strides, [&](int64_t k, const std::array<int64_t, 2>& off) {
    out.data[static_cast<size_t>(k)] = f(a.data[static_cast<size_t>(off[0])], b.data[static_cast<size_t>(off[1])]);
  });
  return out;
}

}  // namespace detail
"""
