"""The C++17 kernel library of the generated ``postprocess.hpp`` (standard library only).

``cpp_runtime.RUNTIME`` is always emitted; ``KERNELS`` maps
an ONNX op to the text of its kernel and the helper kernels it needs, and ``codegen_cpp`` emits
only those a model uses.  Semantics mirror ``ops_numpy`` (ONNX opset 17); shapes are runtime
values, so one header serves any input size the cut model accepts.
"""

from __future__ import annotations



# op -> (helper kernels it needs, C++ text)
KERNELS: dict[str, tuple[tuple[str, ...], str]] = {}


def _kernel(op: str, text: str, needs: tuple[str, ...] = ()) -> None:
    KERNELS[op] = (needs, text.strip("\n"))


def _binary(op: str, name: str, expr: str, result: str = "T") -> None:
    _kernel(op, f"""
template <typename T>
Tensor<{result}> {name}(const Tensor<T>& a, const Tensor<T>& b) {{
  return detail::binary<{result}>(a, b, [](T x, T y) {{ return static_cast<{result}>({expr}); }}, "{op}");
}}""")


def _unary(op: str, name: str, expr: str) -> None:
    _kernel(op, f"""
template <typename T>
Tensor<T> {name}(const Tensor<T>& x) {{
  return detail::unary<T>(x, [](T v) {{ return static_cast<T>({expr}); }});
}}""")


_binary("Add", "op_add", "x + y")
_binary("Sub", "op_sub", "x - y")
_binary("Mul", "op_mul", "x * y")
_binary("Div", "op_div", "x / y")  # C++ integer division truncates toward zero, as ONNX asks
_binary("Max", "op_max", "x < y ? y : x")
_binary("Min", "op_min", "y < x ? y : x")
_binary("Greater", "op_greater", "x > y", "uint8_t")
_binary("Less", "op_less", "x < y", "uint8_t")
_binary("Equal", "op_equal", "x == y", "uint8_t")
_unary("Exp", "op_exp", "std::exp(v)")
_unary("Log", "op_log", "std::log(v)")
_unary("Sqrt", "op_sqrt", "std::sqrt(v)")
_unary("Neg", "op_neg", "-v")
_unary("Abs", "op_abs", "v < T(0) ? -v : v")
_unary("Tanh", "op_tanh", "std::tanh(v)")
_unary("Relu", "op_relu", "v > T(0) ? v : T(0)")
_unary("Identity", "op_identity", "v")

_kernel("Sigmoid", """
template <typename T>
Tensor<T> op_sigmoid(const Tensor<T>& x) {
  // exp(-|v|) never overflows, so both branches are finite.
  return detail::unary<T>(x, [](T v) {
    const T z = std::exp(-std::abs(v));
    return static_cast<T>(v >= T(0) ? T(1) / (T(1) + z) : z / (T(1) + z));
  });
}""")

_kernel("Softmax", """
template <typename T>
Tensor<T> op_softmax(const Tensor<T>& x, int64_t axis) {
  const int64_t rank = detail::rank_of(x.shape);
  axis = detail::norm_axis(axis, rank, "Softmax");
  const int64_t outer = detail::prod(x.shape, 0, axis), n = x.shape[static_cast<size_t>(axis)];
  const int64_t inner = detail::prod(x.shape, axis + 1, rank);
  Tensor<T> out{x.shape, std::vector<T>(x.data.size())};
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * n * inner + i;
      T peak = x.data[static_cast<size_t>(base)];
      for (int64_t j = 1; j < n; ++j) peak = std::max(peak, x.data[static_cast<size_t>(base + j * inner)]);
      T sum = T(0);
      for (int64_t j = 0; j < n; ++j) {
        const size_t at = static_cast<size_t>(base + j * inner);
        out.data[at] = std::exp(x.data[at] - peak);
        sum += out.data[at];
      }
      for (int64_t j = 0; j < n; ++j) out.data[static_cast<size_t>(base + j * inner)] /= sum;
    }
  }
  return out;
}""")

_kernel("Clip", """
template <typename T>
Tensor<T> op_clip(const Tensor<T>& x, bool has_min, typename detail::identity<T>::type lo, bool has_max,
                  typename detail::identity<T>::type hi) {
  return detail::unary<T>(x, [=](T v) {
    if (has_min && v < lo) v = lo;
    if (has_max && v > hi) v = hi;
    return v;
  });
}""")

_kernel("Cast", """
template <typename To, typename From>
Tensor<To> op_cast(const Tensor<From>& x) {
  return detail::unary<To>(x, [](From v) { return static_cast<To>(v); });
}

template <typename From>
Tensor<uint8_t> op_cast_bool(const Tensor<From>& x) {
  return detail::unary<uint8_t>(x, [](From v) { return static_cast<uint8_t>(v != From(0)); });
}""")

_kernel("Where", """
template <typename C, typename T>
Tensor<T> op_where(const Tensor<C>& c, const Tensor<T>& a, const Tensor<T>& b) {
  Tensor<T> out;
  out.shape = detail::broadcast_shape({&c.shape, &a.shape, &b.shape}, "Where");
  out.data.resize(static_cast<size_t>(detail::numel(out.shape)));
  const std::array<std::vector<int64_t>, 3> strides{detail::broadcast_strides(c.shape, out.shape),
                                                    detail::broadcast_strides(a.shape, out.shape),
                                                    detail::broadcast_strides(b.shape, out.shape)};
  detail::for_each_index<3>(out.shape, strides, [&](int64_t k, const std::array<int64_t, 3>& off) {
    out.data[static_cast<size_t>(k)] = c.data[static_cast<size_t>(off[0])] ? a.data[static_cast<size_t>(off[1])]
                                                                           : b.data[static_cast<size_t>(off[2])];
  });
  return out;
}""")

_kernel("Reshape", """
template <typename T>
Tensor<T> op_reshape(const Tensor<T>& x, std::vector<int64_t> shape, int64_t allowzero) {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allowzero) shape[i] = x.shape.at(i);  // 0 copies the input's dimension
    if (shape[i] == -1) {
      infer = static_cast<int64_t>(i);
    } else {
      known *= shape[i];
    }
  }
  const int64_t total = detail::numel(x.shape);
  if (infer >= 0) shape[static_cast<size_t>(infer)] = known == 0 ? 0 : total / known;
  if (detail::numel(shape) != total) throw std::invalid_argument("Reshape: element count changes");
  return Tensor<T>{shape, x.data};
}""")

_kernel("Flatten", """
template <typename T>
Tensor<T> op_flatten(const Tensor<T>& x, int64_t axis) {
  const int64_t rank = detail::rank_of(x.shape);
  if (axis < 0) axis += rank;
  return Tensor<T>{{detail::prod(x.shape, 0, axis), detail::prod(x.shape, axis, rank)}, x.data};
}""")

_kernel("Squeeze", """
template <typename T>
Tensor<T> op_squeeze(const Tensor<T>& x, std::vector<int64_t> axes) {
  const int64_t rank = detail::rank_of(x.shape);
  std::vector<bool> drop(x.shape.size(), false);
  for (int64_t a : axes) drop[static_cast<size_t>(detail::norm_axis(a, rank, "Squeeze"))] = true;
  std::vector<int64_t> shape;
  for (size_t i = 0; i < x.shape.size(); ++i) {
    const bool squeeze = axes.empty() ? x.shape[i] == 1 : drop[i];
    if (!squeeze) shape.push_back(x.shape[i]);
  }
  return Tensor<T>{shape, x.data};
}""")

_kernel("Unsqueeze", """
template <typename T>
Tensor<T> op_unsqueeze(const Tensor<T>& x, std::vector<int64_t> axes) {
  const int64_t rank = detail::rank_of(x.shape) + static_cast<int64_t>(axes.size());
  std::vector<bool> inserted(static_cast<size_t>(rank), false);
  for (int64_t a : axes) inserted[static_cast<size_t>(detail::norm_axis(a, rank, "Unsqueeze"))] = true;
  std::vector<int64_t> shape;
  size_t next = 0;
  for (size_t i = 0; i < inserted.size(); ++i) shape.push_back(inserted[i] ? 1 : x.shape[next++]);
  return Tensor<T>{shape, x.data};
}""")

_kernel("Transpose", """
template <typename T>
Tensor<T> op_transpose(const Tensor<T>& x, std::vector<int64_t> perm) {
  const size_t rank = x.shape.size();
  if (perm.empty()) {
    for (size_t i = rank; i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  }
  Tensor<T> out;
  std::vector<int64_t> in_strides(rank, 1), strides(rank);
  for (size_t i = rank; i-- > 1;) in_strides[i - 1] = in_strides[i] * x.shape[i];
  for (size_t i = 0; i < rank; ++i) {
    out.shape.push_back(x.shape[static_cast<size_t>(perm[i])]);
    strides[i] = in_strides[static_cast<size_t>(perm[i])];
  }
  out.data.resize(x.data.size());
  const std::array<std::vector<int64_t>, 1> reads{strides};
  detail::for_each_index<1>(out.shape, reads, [&](int64_t k, const std::array<int64_t, 1>& off) {
    out.data[static_cast<size_t>(k)] = x.data[static_cast<size_t>(off[0])];
  });
  return out;
}""")

_kernel("Slice", """
template <typename T>
Tensor<T> op_slice(const Tensor<T>& x, std::vector<int64_t> starts, std::vector<int64_t> ends,
                   std::vector<int64_t> axes, std::vector<int64_t> steps) {
  const int64_t rank = detail::rank_of(x.shape);
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  std::vector<int64_t> first(x.shape.size(), 0), step(x.shape.size(), 1), shape = x.shape;
  for (size_t i = 0; i < starts.size(); ++i) {
    const size_t a = static_cast<size_t>(detail::norm_axis(axes[i], rank, "Slice"));
    const int64_t dim = x.shape[a], st = steps[i];
    int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    // Clamping rules of the ONNX spec differ for positive and negative steps.
    if (st > 0) {
      s = std::min(std::max<int64_t>(s, 0), dim);
      e = std::min(std::max<int64_t>(e, 0), dim);
      shape[a] = e > s ? (e - s + st - 1) / st : 0;
    } else {
      s = std::min(std::max<int64_t>(s, 0), dim - 1);
      e = std::min(std::max<int64_t>(e, -1), dim - 1);
      shape[a] = s > e ? (s - e - st - 1) / -st : 0;
    }
    first[a] = s;
    step[a] = st;
  }
  std::vector<int64_t> in_strides(x.shape.size(), 1);
  for (size_t i = x.shape.size(); i-- > 1;) in_strides[i - 1] = in_strides[i] * x.shape[i];
  int64_t base = 0;
  std::array<std::vector<int64_t>, 1> reads{std::vector<int64_t>(x.shape.size())};
  for (size_t i = 0; i < x.shape.size(); ++i) {
    base += first[i] * in_strides[i];
    reads[0][i] = step[i] * in_strides[i];
  }
  Tensor<T> out;
  out.shape = shape;
  out.data.resize(static_cast<size_t>(detail::numel(shape)));
  detail::for_each_index<1>(shape, reads, [&](int64_t k, const std::array<int64_t, 1>& off) {
    out.data[static_cast<size_t>(k)] = x.data[static_cast<size_t>(base + off[0])];
  });
  return out;
}""")

_kernel("Gather", """
template <typename T, typename I>
Tensor<T> op_gather(const Tensor<T>& x, const Tensor<I>& indices, int64_t axis) {
  const int64_t rank = detail::rank_of(x.shape);
  axis = detail::norm_axis(axis, rank, "Gather");
  const int64_t outer = detail::prod(x.shape, 0, axis), n = x.shape[static_cast<size_t>(axis)];
  const int64_t inner = detail::prod(x.shape, axis + 1, rank);
  Tensor<T> out;
  out.shape.assign(x.shape.begin(), x.shape.begin() + axis);
  out.shape.insert(out.shape.end(), indices.shape.begin(), indices.shape.end());
  out.shape.insert(out.shape.end(), x.shape.begin() + axis + 1, x.shape.end());
  out.data.reserve(static_cast<size_t>(detail::numel(out.shape)));
  for (int64_t o = 0; o < outer; ++o) {
    for (const I raw : indices.data) {
      const int64_t j = raw < 0 ? static_cast<int64_t>(raw) + n : static_cast<int64_t>(raw);
      if (j < 0 || j >= n) throw std::out_of_range("Gather: index out of range");
      const auto from = x.data.begin() + (o * n + j) * inner;
      out.data.insert(out.data.end(), from, from + inner);
    }
  }
  return out;
}""")

_kernel("Concat", """
template <typename T, typename... Rest>
Tensor<T> op_concat(int64_t axis, const Tensor<T>& first, const Rest&... rest) {
  const std::vector<const Tensor<T>*> parts{&first, &rest...};
  const int64_t rank = detail::rank_of(first.shape);
  axis = detail::norm_axis(axis, rank, "Concat");
  Tensor<T> out;
  out.shape = first.shape;
  out.shape[static_cast<size_t>(axis)] = 0;
  for (const auto* p : parts) out.shape[static_cast<size_t>(axis)] += p->shape[static_cast<size_t>(axis)];
  const int64_t outer = detail::prod(first.shape, 0, axis);
  out.data.reserve(static_cast<size_t>(detail::numel(out.shape)));
  for (int64_t o = 0; o < outer; ++o) {
    for (const auto* p : parts) {
      const int64_t block = detail::prod(p->shape, axis, rank);
      out.data.insert(out.data.end(), p->data.begin() + o * block, p->data.begin() + (o + 1) * block);
    }
  }
  return out;
}""")

_kernel("Split", """
template <typename T>
std::vector<Tensor<T>> op_split(const Tensor<T>& x, int64_t axis, std::vector<int64_t> split, int64_t num_outputs) {
  const int64_t rank = detail::rank_of(x.shape);
  axis = detail::norm_axis(axis, rank, "Split");
  const int64_t dim = x.shape[static_cast<size_t>(axis)];
  if (split.empty()) split.assign(static_cast<size_t>(num_outputs), dim / num_outputs);
  const int64_t outer = detail::prod(x.shape, 0, axis), inner = detail::prod(x.shape, axis + 1, rank);
  std::vector<Tensor<T>> parts;
  int64_t start = 0;
  for (int64_t size : split) {
    Tensor<T> part;
    part.shape = x.shape;
    part.shape[static_cast<size_t>(axis)] = size;
    for (int64_t o = 0; o < outer; ++o) {
      const auto from = x.data.begin() + (o * dim + start) * inner;
      part.data.insert(part.data.end(), from, from + size * inner);
    }
    start += size;
    parts.push_back(std::move(part));
  }
  return parts;
}""")

_kernel("_reduce", """
namespace detail {
// Folds `x` over `axes` (all axes when empty) with `combine`, starting from `init`.
template <typename Acc, typename T, typename F>
Tensor<Acc> reduce(const Tensor<T>& x, std::vector<int64_t> axes, int64_t keepdims, Acc init, F combine,
                   const char* op) {
  const int64_t rank = rank_of(x.shape);
  std::vector<bool> reduced(x.shape.size(), axes.empty());
  for (int64_t a : axes) reduced[static_cast<size_t>(norm_axis(a, rank, op))] = true;
  std::vector<int64_t> kept_shape(x.shape), out_shape;
  for (size_t i = 0; i < x.shape.size(); ++i) {
    if (reduced[i]) kept_shape[i] = 1;
    if (!reduced[i] || keepdims) out_shape.push_back(kept_shape[i]);
  }
  std::vector<int64_t> strides = broadcast_strides(kept_shape, x.shape);
  Tensor<Acc> out{out_shape, std::vector<Acc>(static_cast<size_t>(numel(kept_shape)), init)};
  const std::array<std::vector<int64_t>, 1> writes{strides};
  for_each_index<1>(x.shape, writes, [&](int64_t k, const std::array<int64_t, 1>& off) {
    Acc& acc = out.data[static_cast<size_t>(off[0])];
    acc = combine(acc, x.data[static_cast<size_t>(k)]);
  });
  return out;
}

template <typename T>
using acc_t = typename std::conditional<std::is_floating_point<T>::value, double, T>::type;
}  // namespace detail""")

_kernel("ReduceMax", """
template <typename T>
Tensor<T> op_reducemax(const Tensor<T>& x, std::vector<int64_t> axes, int64_t keepdims) {
  const T low = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                     : std::numeric_limits<T>::lowest();
  return detail::reduce<T>(x, axes, keepdims, low, [](T a, T b) { return b > a ? b : a; }, "ReduceMax");
}""", ("_reduce",))

_kernel("ReduceMin", """
template <typename T>
Tensor<T> op_reducemin(const Tensor<T>& x, std::vector<int64_t> axes, int64_t keepdims) {
  const T high = std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                      : std::numeric_limits<T>::max();
  return detail::reduce<T>(x, axes, keepdims, high, [](T a, T b) { return b < a ? b : a; }, "ReduceMin");
}""", ("_reduce",))

_kernel("ReduceSum", """
template <typename T>
Tensor<T> op_reducesum(const Tensor<T>& x, std::vector<int64_t> axes, int64_t keepdims) {
  using Acc = detail::acc_t<T>;
  const auto sums = detail::reduce<Acc>(x, axes, keepdims, Acc(0), [](Acc a, T b) { return a + Acc(b); }, "ReduceSum");
  return detail::unary<T>(sums, [](Acc v) { return static_cast<T>(v); });
}""", ("_reduce",))

_kernel("ReduceMean", """
template <typename T>
Tensor<T> op_reducemean(const Tensor<T>& x, std::vector<int64_t> axes, int64_t keepdims) {
  using Acc = detail::acc_t<T>;
  const auto sums = detail::reduce<Acc>(x, axes, keepdims, Acc(0), [](Acc a, T b) { return a + Acc(b); }, "ReduceMean");
  const int64_t outputs = std::max<int64_t>(1, detail::numel(sums.shape));
  const Acc count = static_cast<Acc>(std::max<int64_t>(1, detail::numel(x.shape) / outputs));
  return detail::unary<T>(sums, [count](Acc v) { return static_cast<T>(v / count); });
}""", ("_reduce",))

_ARG = """
template <typename T>
Tensor<int64_t> {name}(const Tensor<T>& x, int64_t axis, int64_t keepdims, int64_t select_last_index) {{
  const int64_t rank = detail::rank_of(x.shape);
  axis = detail::norm_axis(axis, rank, "{op}");
  const int64_t outer = detail::prod(x.shape, 0, axis), n = x.shape[static_cast<size_t>(axis)];
  const int64_t inner = detail::prod(x.shape, axis + 1, rank);
  Tensor<int64_t> out;
  for (size_t i = 0; i < x.shape.size(); ++i) {{
    if (static_cast<int64_t>(i) != axis) out.shape.push_back(x.shape[i]);
    else if (keepdims) out.shape.push_back(1);
  }}
  out.data.resize(static_cast<size_t>(outer * inner));
  for (int64_t o = 0; o < outer; ++o) {{
    for (int64_t i = 0; i < inner; ++i) {{
      int64_t best = 0;
      for (int64_t j = 1; j < n; ++j) {{
        const T v = x.data[static_cast<size_t>((o * n + j) * inner + i)];
        const T b = x.data[static_cast<size_t>((o * n + best) * inner + i)];
        if (v {cmp} b || (select_last_index && v == b)) best = j;
      }}
      out.data[static_cast<size_t>(o * inner + i)] = best;
    }}
  }}
  return out;
}}"""
_kernel("ArgMax", _ARG.format(name="op_argmax", op="ArgMax", cmp=">"))
_kernel("ArgMin", _ARG.format(name="op_argmin", op="ArgMin", cmp="<"))

_kernel("TopK", """
template <typename T>
std::pair<Tensor<T>, Tensor<int64_t>> op_topk(const Tensor<T>& x, int64_t k, int64_t axis, int64_t largest) {
  const int64_t rank = detail::rank_of(x.shape);
  axis = detail::norm_axis(axis, rank, "TopK");
  const int64_t outer = detail::prod(x.shape, 0, axis), n = x.shape[static_cast<size_t>(axis)];
  const int64_t inner = detail::prod(x.shape, axis + 1, rank);
  if (k < 0 || k > n) throw std::invalid_argument("TopK: k out of range");
  std::pair<Tensor<T>, Tensor<int64_t>> out;
  out.first.shape = x.shape;
  out.first.shape[static_cast<size_t>(axis)] = k;
  out.second.shape = out.first.shape;
  out.first.data.resize(static_cast<size_t>(outer * k * inner));
  out.second.data.resize(out.first.data.size());
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return x.data[static_cast<size_t>((o * n + j) * inner + i)]; };
      std::iota(order.begin(), order.end(), int64_t(0));
      // Stable: among equal values the lower index comes first, as the ONNX spec asks.
      std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
        return largest ? at(p) > at(q) : at(p) < at(q);
      });
      for (int64_t j = 0; j < k; ++j) {
        const size_t dst = static_cast<size_t>((o * k + j) * inner + i);
        out.first.data[dst] = at(order[static_cast<size_t>(j)]);
        out.second.data[dst] = order[static_cast<size_t>(j)];
      }
    }
  }
  return out;
}""")



def kernels_for(ops: set[str]) -> list[str]:
    """Kernel texts for ``ops`` and their helpers, helpers first, in a fixed order."""
    wanted: list[str] = []
    for op in sorted(ops):
        needs, _ = KERNELS[op]
        for helper in needs:
            if helper not in wanted:
                wanted.append(helper)
    wanted.sort()
    wanted += [op for op in sorted(ops) if op not in wanted]
    return [KERNELS[name][1] for name in wanted]
