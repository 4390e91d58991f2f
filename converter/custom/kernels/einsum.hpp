// Reference CPU kernel for ONNX Einsum (opset 12): any number of operands, explicit ("ij,jk->ik")
// or implicit ("ij,jk": output = labels seen once, alphabetical) output, repeated labels
// (diagonals, "ii->i"), and "..." with numpy broadcasting of the ellipsis dimensions.
// Written from the operator definition (onnx/docs/Operators.md#Einsum): one loop over every
// label; output labels index the result, the others are summed over.  Float32 only.
#pragma once

#include <string>
#include <vector>

#include "edgeconv_custom.hpp"

namespace edgeconv {
namespace ops {
namespace Einsum {

// Labels are ints: letters 0..51, ellipsis dimensions 100 + position (right-aligned).
constexpr int kEllipsisBase = 100;

struct Plan {
  std::vector<std::vector<int>> operand_labels;
  std::vector<int> output_labels;
  std::vector<int> all_labels;  // output labels first, then the summed ones
  std::vector<int64_t> size;    // per entry of all_labels
  Shape output_shape;
};

inline int LetterLabel(char c) {
  if (c >= 'a' && c <= 'z') return c - 'a';
  if (c >= 'A' && c <= 'Z') return 26 + (c - 'A');
  return -1;
}

// Parse one term; ellipsis_rank < 0 means "count it from rank".
inline std::string ParseTerm(const std::string& term, int rank, int total_ellipsis, std::vector<int>* labels,
                             int* ellipsis_dims) {
  int letters = 0;
  bool has_ellipsis = false;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term[i] == '.') {
      if (term.compare(i, 3, "...") != 0 || has_ellipsis) return "bad ellipsis in Einsum term '" + term + "'";
      has_ellipsis = true;
      i += 2;
    } else if (LetterLabel(term[i]) >= 0) {
      ++letters;
    } else {
      return std::string("bad character '") + term[i] + "' in Einsum equation";
    }
  }
  const int e = has_ellipsis ? (rank >= 0 ? rank - letters : total_ellipsis) : 0;
  if (e < 0 || (rank >= 0 && !has_ellipsis && letters != rank))
    return "Einsum term '" + term + "' does not match an operand of rank " + std::to_string(rank);
  *ellipsis_dims = e;
  labels->clear();
  for (size_t i = 0; i < term.size(); ++i) {
    if (term[i] == '.') {
      for (int k = 0; k < e; ++k) labels->push_back(kEllipsisBase + (total_ellipsis - e) + k);
      i += 2;
    } else {
      labels->push_back(LetterLabel(term[i]));
    }
  }
  return "";
}

inline std::string MakePlan(const Attrs& attrs, const std::vector<Shape>& shapes, Plan* plan) {
  std::string eq;
  for (char c : attrs.String("equation", "")) if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  size_t start = 0;
  for (size_t i = 0; i <= lhs.size(); ++i) {
    if (i == lhs.size() || lhs[i] == ',') {
      terms.push_back(lhs.substr(start, i - start));
      start = i + 1;
    }
  }
  if (terms.size() != shapes.size())
    return "Einsum equation has " + std::to_string(terms.size()) + " operands, got " + std::to_string(shapes.size());
  // First pass: the widest ellipsis.
  int total_ellipsis = 0;
  for (size_t k = 0; k < terms.size(); ++k) {
    std::vector<int> labels;
    int e = 0;
    std::string err = ParseTerm(terms[k], static_cast<int>(shapes[k].size()), 0, &labels, &e);
    if (!err.empty()) return err;
    if (e > total_ellipsis) total_ellipsis = e;
  }
  plan->operand_labels.assign(terms.size(), {});
  std::vector<int64_t> label_size(kEllipsisBase + total_ellipsis, -1);
  std::vector<int> count(kEllipsisBase + total_ellipsis, 0);
  for (size_t k = 0; k < terms.size(); ++k) {
    int e = 0;
    std::string err = ParseTerm(terms[k], static_cast<int>(shapes[k].size()), total_ellipsis,
                                &plan->operand_labels[k], &e);
    if (!err.empty()) return err;
    for (size_t d = 0; d < shapes[k].size(); ++d) {
      const int l = plan->operand_labels[k][d];
      const int64_t s = shapes[k][d];
      ++count[l];
      if (l < kEllipsisBase) {
        if (label_size[l] >= 0 && label_size[l] != s) return "Einsum: dimension sizes disagree for a label";
        label_size[l] = s;
      } else if (label_size[l] < 0 || label_size[l] == 1) {
        label_size[l] = s;  // ellipsis dimensions broadcast numpy-style
      } else if (s != 1 && s != label_size[l]) {
        return "Einsum: ellipsis dimensions do not broadcast";
      }
    }
  }
  plan->output_labels.clear();
  if (arrow != std::string::npos) {
    int e = 0;
    std::string err = ParseTerm(eq.substr(arrow + 2), -1, total_ellipsis, &plan->output_labels, &e);
    if (!err.empty()) return err;
  } else {
    for (int k = 0; k < total_ellipsis; ++k) plan->output_labels.push_back(kEllipsisBase + k);
    for (int l = 0; l < 52; ++l) if (count[l] == 1) plan->output_labels.push_back(l);
  }
  plan->all_labels = plan->output_labels;
  plan->output_shape.clear();
  for (int l : plan->output_labels) {
    if (label_size[l] < 0) return "Einsum: output label not in any input";
    plan->output_shape.push_back(label_size[l]);
  }
  for (int l = 0; l < kEllipsisBase + total_ellipsis; ++l) {
    bool in_output = false;
    for (int o : plan->output_labels) in_output |= (o == l);
    if (label_size[l] >= 0 && !in_output) plan->all_labels.push_back(l);
  }
  plan->size.clear();
  for (int l : plan->all_labels) plan->size.push_back(label_size[l]);
  return "";
}

inline std::string InferShapes(const Attrs& attrs, const std::vector<Shape>& in, std::vector<Shape>* out) {
  Plan plan;
  std::string err = MakePlan(attrs, in, &plan);
  if (!err.empty()) return err;
  *out = {plan.output_shape};
  return "";
}

inline std::string Compute(const Attrs& attrs, const std::vector<ConstTensor>& in, const std::vector<Tensor>& out) {
  std::vector<Shape> shapes;
  for (const auto& t : in) {
    if (t.dtype != "float32") return "Einsum reference kernel is float32 only";
    shapes.push_back(t.shape);
  }
  Plan plan;
  std::string err = MakePlan(attrs, shapes, &plan);
  if (!err.empty()) return err;
  const size_t L = plan.all_labels.size();
  // stride[k][j]: how far operand k moves when label j advances (0 for broadcast/absent labels;
  // a label repeated within one operand adds its strides: the diagonal).
  std::vector<std::vector<int64_t>> stride(in.size(), std::vector<int64_t>(L, 0));
  for (size_t k = 0; k < in.size(); ++k) {
    int64_t s = 1;
    for (size_t d = in[k].shape.size(); d-- > 0;) {
      for (size_t j = 0; j < L; ++j)
        if (plan.all_labels[j] == plan.operand_labels[k][d] && in[k].shape[d] != 1) stride[k][j] += s;
      s *= in[k].shape[d];
    }
  }
  std::vector<int64_t> out_stride(L, 0);
  int64_t s = 1;
  for (size_t j = plan.output_labels.size(); j-- > 0;) {
    out_stride[j] = s;
    s *= plan.size[j];
  }
  float* Y = out[0].as<float>();
  const int64_t total_out = NumElements(plan.output_shape);
  for (int64_t i = 0; i < total_out; ++i) Y[i] = 0.f;
  for (size_t j = 0; j < L; ++j) if (plan.size[j] == 0) return "";
  std::vector<int64_t> idx(L, 0), offset(in.size(), 0);
  int64_t out_offset = 0;
  while (true) {
    float prod = 1.f;
    for (size_t k = 0; k < in.size(); ++k) prod *= in[k].as<float>()[offset[k]];
    Y[out_offset] += prod;
    size_t j = L;  // odometer: advance the last label, carry leftwards
    while (j-- > 0) {
      ++idx[j];
      for (size_t k = 0; k < in.size(); ++k) offset[k] += stride[k][j];
      out_offset += out_stride[j];
      if (idx[j] < plan.size[j]) break;
      for (size_t k = 0; k < in.size(); ++k) offset[k] -= stride[k][j] * idx[j];
      out_offset -= out_stride[j] * idx[j];
      idx[j] = 0;
    }
    if (j == static_cast<size_t>(-1)) break;
  }
  return "";
}

}  // namespace Einsum
}  // namespace ops
}  // namespace edgeconv
