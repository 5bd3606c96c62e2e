// Guide step "amp": torch.autocast("{{ name }}", dtype=torch.float16 or torch.bfloat16).
//
// Autocast is a dispatch key per device. A vendor registers, for AutocastPrivateUse1, a kernel per
// operator that casts the inputs and calls the operator again below the key (PyTorch's
// KERNEL_PRIVATEUSEONE macro writes each one), and a fallthrough for every other operator, so that
// they run unchanged. The device module's get_amp_supported_dtype() and friends (Python) are the
// other half. This backend takes CUDA's policy from PyTorch's shared operator lists. What a vendor
// replaces: the lists, where its device prefers another precision for an operator.
#include "backend.h"

#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torch_{{ name }} {

// [guide: amp]
namespace {

// CUDA refuses binary_cross_entropy under autocast (a float16 sigmoid output loses too much
// precision), and so does this backend, in PyTorch's own words: the kernel on AutocastCUDA only
// raises, so calling it needs no CUDA and yields the sentence tests and users' code match.
at::Tensor binary_cross_entropy_refused(const at::Tensor& self, const at::Tensor& target,
                                        const std::optional<at::Tensor>& weight, int64_t reduction) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("aten::binary_cross_entropy", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                         int64_t)>();
  std::string refusal = "binary_cross_entropy is unsafe to autocast.";
  try {
    op.redispatch(c10::DispatchKeySet(c10::DispatchKey::AutocastCUDA), self, target, weight, reduction);
  } catch (const c10::Error& error) {
    refusal = error.msg();
  }
  TORCH_CHECK(false, refusal, "\n{{ name }} refuses it under autocast as CUDA does.");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  using at::IntArrayRef, at::Scalar, at::ScalarType, at::Tensor;  // the names PyTorch's operator lists use
#define TO_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TO_FLOAT32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TO_FLOAT32_UNLESS_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TO_WIDEST(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(TO_LOWER_PRECISION)
  AT_FORALL_FP32(TO_FLOAT32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TO_FLOAT32_UNLESS_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(TO_WIDEST)
  m.impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy_refused));
#undef TO_LOWER_PRECISION
#undef TO_FLOAT32
#undef TO_FLOAT32_UNLESS_DTYPE
#undef TO_WIDEST
}
// [/guide: amp]

}  // namespace torch_{{ name }}
