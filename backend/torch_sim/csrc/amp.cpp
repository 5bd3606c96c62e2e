// Step 9, AMP: torch.autocast("sim", dtype=torch.bfloat16 or torch.float16).
//
// Autocast is a dispatch key per device: a vendor registers kernels for AutocastPrivateUse1 that
// cast the inputs and call the operator again below the key (PyTorch's KERNEL_PRIVATEUSEONE macro
// writes them), and a fallthrough for every other operator. The Python side
// (torch._register_device_module's get_amp_supported_dtype) says which dtypes the device takes.
// sim takes CUDA's whole policy, from PyTorch's shared lists of operators.
#include "sim.h"

#include <ATen/autocast_mode.h>

namespace sim {

// CUDA refuses binary_cross_entropy under autocast (a float16 sigmoid output loses too much
// precision). sim refuses it with PyTorch's own message, which tests and users' code match: the
// kernel CUDA registers on its autocast key raises it, and it needs no CUDA to do so (it only
// refuses). sim's own note follows it.
static at::Tensor binary_cross_entropy_refused(const at::Tensor& self, const at::Tensor& target,
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
  TORCH_CHECK(false, refusal,
              "\nsim refuses it under autocast as CUDA does; compute this loss outside the autocast region if it "
              "must take probabilities.");
}

// CUDA's whole policy, from PyTorch's shared op lists. Each category is its own registration
// (its own line), so torch.sim.cast_policy() can read the categories back from the dispatcher.
static void install_autocast() {
  using at::IntArrayRef, at::Scalar, at::ScalarType, at::Tensor;  // the names PyTorch's op lists use
  auto& everything = new_library(torch::Library::IMPL, "_", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
  everything.fallback(torch::CppFunction::makeFallthrough());
  constexpr auto kAutocast = c10::DispatchKey::AutocastPrivateUse1;
#define SIM_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define SIM_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define SIM_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define SIM_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  {
    auto& m = new_library(torch::Library::IMPL, "aten", kAutocast, __FILE__, __LINE__);
    AT_FORALL_LOWER_PRECISION_FP(SIM_LOWER_PRECISION)
  }
  {
    auto& m = new_library(torch::Library::IMPL, "aten", kAutocast, __FILE__, __LINE__);
    AT_FORALL_FP32(SIM_FP32)
  }
  {
    auto& m = new_library(torch::Library::IMPL, "aten", kAutocast, __FILE__, __LINE__);
    AT_FORALL_FP32_SET_OPT_DTYPE(SIM_FP32_SET_OPT_DTYPE)
  }
  {
    auto& m = new_library(torch::Library::IMPL, "aten", kAutocast, __FILE__, __LINE__);
    AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  }
  {
    auto& m = new_library(torch::Library::IMPL, "aten", kAutocast, __FILE__, __LINE__);
    AT_FORALL_PROMOTE(SIM_PROMOTE)
  }
  new_library(torch::Library::IMPL, "aten", kAutocast, __FILE__, __LINE__)
      .impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy_refused));
#undef SIM_LOWER_PRECISION
#undef SIM_FP32
#undef SIM_FP32_SET_OPT_DTYPE
#undef SIM_PROMOTE
}

void bind_amp(pybind11::module& module) { module.def("install_autocast", &install_autocast); }

}  // namespace sim
