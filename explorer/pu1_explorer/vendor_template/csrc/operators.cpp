// Guide step "operators": the minimal kernels, a fallback for every other operator, and the
// operators PyTorch routes to a device's own kernel.
//
// A vendor registers kernels for the PrivateUse1 key with TORCH_LIBRARY_IMPL(aten, PrivateUse1, m):
// first the minimal set every device needs to create, view, resize and copy tensors (below, all
// through the runtime), then a boxed fallback for the operators without a kernel. The fallback
// here is PyTorch's at::native::cpu_fallback: it copies the arguments to the CPU, runs the CPU
// kernel and copies the results back, so every operator works from day one, slowly. Some
// operators never reach a fallback, because PyTorch sends every device but the CPU to a kernel
// of the device's own: the *_overrideable convolutions, the fused RNN cells and the attention
// choice; they are registered here too. What a vendor replaces: one operator after another, by
// registering its device kernel in place of the fallback (start with the operators the
// explorer's fallback report ranks first).
#include "backend.h"

#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/jit_type.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/strides.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace torch_{{ name }} {

namespace {

constexpr c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

// [guide: operators]
// ------------------------------------------------------------------ creating tensors
c10::Device target_device(std::optional<c10::Device> device) {
  if (device.has_value() && device->has_index()) return *device;
  return c10::Device(kDevice, current_device());
}

void check_dense(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided, "{{ name }} supports strided tensors only, got ",
              *layout);
  TORCH_CHECK(!pin_memory.value_or(false),
              "Only dense CPU tensors can be pinned; {{ name }} tensors live on the device");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  check_dense(layout, pin_memory);
  c10::DeviceGuard guard(target_device(device));
  return at::detail::empty_generic(size, device_allocator(), kKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  check_dense(layout, pin_memory);
  c10::DeviceGuard guard(target_device(device));
  return at::detail::empty_strided_generic(size, stride, device_allocator(), kKeys, c10::dtype_or_default(dtype));
}

// ------------------------------------------------------------- resizing and set_
// The bytes a tensor of this geometry reaches from the start of its storage.
size_t bytes_reached(c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset, size_t itemsize) {
  int64_t last = offset;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    last += (sizes[d] - 1) * strides[d];
  }
  return static_cast<size_t>(last + 1) * itemsize;
}

void grow_to_fit(const at::Tensor& self) {
  size_t needed = bytes_reached(self.sizes(), self.strides(), self.storage_offset(), self.itemsize());
  if (needed > self.storage().nbytes()) resize_storage(self.storage(), needed);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  if (self.sizes() != size) impl->set_sizes_contiguous(size);  // same sizes keep their strides
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "{{ name }}: resize_ cannot preserve a memory format");
    impl->empty_tensor_restride(*memory_format);
  }
  grow_to_fit(self);
  return self;
}

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                               c10::IntArrayRef stride) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  if (stride.empty() && !size.empty()) {
    impl->set_sizes_and_strides(size, c10::contiguous_strides(size), offset);
  } else {
    impl->set_sizes_and_strides(size, stride, offset);
  }
  grow_to_fit(self);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  int64_t elements = static_cast<int64_t>(source.nbytes() / self.itemsize());
  return set_storage_offset(self, std::move(source), 0, {elements}, {1});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_storage_offset(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, device_allocator(), /*resizable=*/true);
  return set_storage_offset(self, std::move(empty), 0, {0}, {});
}

// ------------------------------------------------------------------------- copies
runtime::CopyKind copy_kind(const at::Tensor& source, const at::Tensor& destination) {
  if (source.is_cpu()) return runtime::CopyKind::host_to_device;
  return destination.is_cpu() ? runtime::CopyKind::device_to_host : runtime::CopyKind::device_to_device;
}

// A host copy of a device storage's bytes, as a CPU byte tensor.
at::Tensor host_copy(const c10::Storage& storage) {
  at::Tensor bytes = at::empty({static_cast<int64_t>(storage.nbytes())}, at::TensorOptions().dtype(at::kByte));
  if (storage.nbytes() > 0) {
    RUNTIME_CHECK(runtime::copy(bytes.data_ptr(), storage.data(), storage.nbytes(),
                                runtime::CopyKind::device_to_host));
  }
  return bytes;
}

// A CPU tensor with `tensor`'s geometry over host bytes of its storage.
at::Tensor host_view(const at::Tensor& bytes, const at::Tensor& tensor) {
  at::Tensor host = at::empty({0}, at::TensorOptions().dtype(tensor.scalar_type()));
  host.set_(bytes.storage(), tensor.storage_offset(), tensor.sizes(), tensor.strides());
  host._set_conj(tensor.is_conj());
  host._set_neg(tensor.is_neg());
  return host;
}

// A CPU tensor with `tensor`'s geometry over a host copy of its whole storage.
at::Tensor host_copy(const at::Tensor& tensor) { return host_view(host_copy(tensor.storage()), tensor); }

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking: the runtime is synchronous*/) {
  if (dst.numel() == 0) return dst;
  if (record_copy(self, dst)) return dst;  // a capturing stream records the copy for its graph
  bool same_layout = self.scalar_type() == dst.scalar_type() && self.sizes() == dst.sizes() &&
                     self.is_contiguous() && dst.is_contiguous() && self.is_conj() == dst.is_conj() &&
                     self.is_neg() == dst.is_neg();
  if (same_layout) {  // one runtime copy of the bytes
    RUNTIME_CHECK(runtime::copy(dst.data_ptr(), self.data_ptr(), dst.nbytes(), copy_kind(self, dst)));
    return dst;
  }
  // Anything else (another dtype, strides, broadcasting) is converted on the host.
  at::Tensor source = self.is_cpu() ? self : host_copy(self);
  if (dst.is_cpu()) {
    dst.copy_(source);
    return dst;
  }
  at::Tensor staging = host_copy(dst);  // the whole storage, so that bytes outside the view survive
  staging.copy_(source);
  RUNTIME_CHECK(runtime::copy(dst.storage().mutable_data(), staging.storage().data(), dst.storage().nbytes(),
                              runtime::CopyKind::host_to_device));
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  refuse_while_capturing(c10::impl::getDeviceGuardImpl(kDevice)->getStream(self.device()),
                         "reading a value to the host (.item())");
  at::Tensor host = at::empty(c10::IntArrayRef{}, at::TensorOptions().dtype(self.scalar_type()));
  RUNTIME_CHECK(runtime::copy(host.data_ptr(), self.data_ptr(), self.itemsize(), runtime::CopyKind::device_to_host));
  host._set_conj(self.is_conj());
  host._set_neg(self.is_neg());
  return host.item();
}

// ------------------------------------------------------------------------ fallback
bool is_generator_argument(const c10::Argument& argument) {
  c10::TypePtr type = argument.real_type();
  if (type->kind() == c10::TypeKind::OptionalType) type = type->castRaw<c10::OptionalType>()->getElementType();
  return type->kind() == c10::TypeKind::GeneratorType;
}

// The device an operator runs on: that of its {{ name }} tensors, which must agree, as must any CPU tensor
// that is not a scalar (the CPU copies cpu_fallback computes on would not notice); the current device when
// it has none. Indexing takes CPU index tensors, as on CUDA.
DeviceIndex device_of_arguments(const torch::jit::Stack& stack, size_t first, const std::string& op) {
  static const std::vector<std::string> takes_cpu_indices{"aten::index", "aten::index_put", "aten::index_put_",
                                                          "aten::_index_put_impl_", "aten::_unsafe_index",
                                                          "aten::_unsafe_index_put"};
  bool cpu_allowed = std::find(takes_cpu_indices.begin(), takes_cpu_indices.end(), op) != takes_cpu_indices.end();
  std::optional<c10::Device> found, cpu;
  auto see = [&](const at::Tensor& tensor) {
    if (!tensor.defined()) return;
    if (tensor.is_cpu() && tensor.dim() > 0 && !cpu_allowed) cpu = tensor.device();
    if (tensor.device().type() != kDevice) return;
    TORCH_CHECK(!found || *found == tensor.device(), "Expected all tensors to be on the same device, but found at "
                "least two devices, ", *found, " and ", tensor.device(), "! (in ", op, ")");
    found = tensor.device();
  };
  for (size_t i = first; i < stack.size(); ++i) {
    if (stack[i].isTensor()) see(stack[i].toTensor());
    if (stack[i].isTensorList())
      for (const at::Tensor& tensor : stack[i].toTensorList()) see(tensor);
  }
  TORCH_CHECK(!found || !cpu, "Expected all tensors to be on the same device, but found at least two devices, ",
              *found, " and ", cpu.value_or(c10::Device(c10::kCPU)), "! (in ", op, ")");
  return found ? found->index() : current_device();
}

// cpu_fallback copies each argument on its own, so on the CPU an output no longer overlaps the input it overlaps
// on the device, and the CPU kernel cannot refuse that as it should. When an argument the operator writes shares
// memory with another or with itself, the CPU kernel first runs on host copies that share memory as the device
// tensors do, to raise the CPU's error; what that run computes is thrown away.
void check_overlaps_on_host(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t first) {
  const auto& arguments = op.schema().arguments();
  std::vector<c10::Storage> written, read;
  bool internal_overlap = false;  // a written tensor whose elements share memory (an expanded tensor)
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = stack[first + i];
    bool writes = arguments[i].alias_info() != nullptr && arguments[i].alias_info()->isWrite();
    auto note = [&](const at::Tensor& tensor) {
      if (!tensor.defined() || tensor.device().type() != kDevice) return;
      (writes ? written : read).push_back(tensor.storage());
      internal_overlap = internal_overlap || (writes && at::has_internal_overlap(tensor) != at::MemOverlap::No);
    };
    if (value.isTensor()) note(value.toTensor());
    if (value.isTensorList())
      for (const at::Tensor& tensor : value.toTensorList()) note(tensor);
  }
  bool overlap = internal_overlap;
  for (const auto& w : written)
    for (const auto& r : read) overlap = overlap || w.is_alias_of(r);
  if (!overlap) return;
  // One host copy per device storage, and one host tensor per device tensor (kernels check `is_same` first).
  std::vector<std::pair<const void*, at::Tensor>> host_storages, host_tensors;
  auto known = [](auto& entries, const void* key) {
    return std::find_if(entries.begin(), entries.end(), [&](auto& entry) { return entry.first == key; });
  };
  auto to_host = [&](const at::Tensor& tensor) -> at::Tensor {
    if (!tensor.defined() || tensor.device().type() != kDevice) return tensor;
    auto same_tensor = known(host_tensors, tensor.unsafeGetTensorImpl());
    if (same_tensor != host_tensors.end()) return same_tensor->second;
    auto same_storage = known(host_storages, tensor.storage().unsafeGetStorageImpl());
    at::Tensor bytes = same_storage != host_storages.end() ? same_storage->second : host_copy(tensor.storage());
    if (same_storage == host_storages.end()) host_storages.emplace_back(tensor.storage().unsafeGetStorageImpl(), bytes);
    host_tensors.emplace_back(tensor.unsafeGetTensorImpl(), host_view(bytes, tensor));
    return host_tensors.back().second;
  };
  torch::jit::Stack copy(stack.begin() + first, stack.end());
  for (auto& value : copy) {
    if (value.isTensor()) value = to_host(value.toTensor());
    if (value.isTensorList()) {
      std::vector<at::Tensor> tensors;
      for (const at::Tensor& tensor : value.toTensorList()) tensors.push_back(to_host(tensor));
      value = c10::List<at::Tensor>(tensors);
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &copy);
}

// The copying fallback, plus what a CPU kernel needs to compute for the device: the random operators draw from
// the device generator's host state (generator.cpp), an explicit {{ name }} generator or else the default
// generator of the device the operator runs on.
void copying_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  const size_t first = stack->size() - arguments.size();
  DeviceIndex device = device_of_arguments(*stack, first, op.schema().name());
  bool random = false;
  for (size_t i = 0; i < arguments.size(); ++i) {
    c10::IValue& value = (*stack)[first + i];
    if (value.isGenerator() && value.toGenerator().device().type() == kDevice) {
      value = host_generator(value.toGenerator());
      random = true;
    } else if (value.isNone() && is_generator_argument(arguments[i])) {
      value = host_generator(default_generator(device));
      random = true;
    }
  }
  if (record_operator(op, stack, first, device)) return;  // a capturing stream records it for its graph
  if (!random) check_overlaps_on_host(op, *stack, first);  // a random operator would draw twice
  at::native::cpu_fallback(op, stack);
}

// ------------------------------------------------------------------- convolution
// Convolutions reach these two instead of any fallback; until the device has its own, they run on the CPU.
// Their outputs are contiguous whatever the inputs' layout: torch.compile plans them so (torch's fake kernels
// predict the contiguous format for a device's *_overrideable convolutions) and asserts the strides it planned,
// while the CPU kernel may answer in channels-last.
at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                    c10::IntArrayRef output_padding, int64_t groups) {
  std::optional<at::Tensor> host_bias = bias.has_value() && bias->defined() ? std::optional(bias->cpu()) : std::nullopt;
  return at::convolution(input.cpu(), weight.cpu(), host_bias, stride, padding, dilation, transposed, output_padding,
                         groups).contiguous().to(input.device());
}

// [guide: autograd]
// Training needs no autograd registration: PyTorch's derivative formulas reach the device through the
// Autograd alias key and call the device's backward kernels, such as these of the operators PyTorch routes
// to the device. A device that computes a gradient its own way registers an AutogradPrivateUse1 kernel.
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  std::vector<int64_t> bias_sizes{grad_output.size(1)};
  auto [grad_input, grad_weight, grad_bias] =
      at::convolution_backward(grad_output.cpu(), input.cpu(), weight.cpu(), bias_sizes, stride, padding, dilation,
                               transposed, output_padding, groups, output_mask);
  auto back = [&](const at::Tensor& t) { return t.defined() ? t.contiguous().to(input.device()) : t; };
  return {back(grad_input), back(grad_weight), back(grad_bias)};
}
// [/guide: autograd]
// [/guide: operators]

// ----------------------------------------------------------------- fused RNN cells
// nn.LSTM and nn.GRU call these fused cells on every device but the CPU. Written with ATen
// operators, they run on the device (here: through the fallback); the workspace keeps what the
// backward needs.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(const at::Tensor& input_gates,
                                                               const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                               const std::optional<at::Tensor>& input_bias,
                                                               const std::optional<at::Tensor>& hidden_bias) {
  at::Tensor gates = input_gates + hidden_gates;
  if (input_bias.has_value() && input_bias->defined()) gates = gates + *input_bias + *hidden_bias;
  auto chunks = gates.chunk(4, 1);
  at::Tensor in = chunks[0].sigmoid(), forget = chunks[1].sigmoid(), cell = chunks[2].tanh(), out = chunks[3].sigmoid();
  at::Tensor cy = forget * cx + in * cell;
  at::Tensor hy = out * cy.tanh();
  return {hy, cy, at::cat({in, forget, cell, out}, 1)};
}

// [guide: autograd]
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy_in, const std::optional<at::Tensor>& grad_cy_in, const at::Tensor& cx,
    const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  auto gates = workspace.chunk(4, 1);
  const at::Tensor &in = gates[0], &forget = gates[1], &cell = gates[2], &out = gates[3];
  at::Tensor tanh_cy = cy.tanh();
  at::Tensor grad_hy = grad_hy_in.has_value() && grad_hy_in->defined() ? *grad_hy_in : at::zeros_like(cy);
  at::Tensor grad_c = grad_hy * out * (1 - tanh_cy * tanh_cy);
  if (grad_cy_in.has_value() && grad_cy_in->defined()) grad_c = grad_c + *grad_cy_in;
  at::Tensor grad_gates = at::cat({grad_c * cell * in * (1 - in), grad_c * cx * forget * (1 - forget),
                                   grad_c * in * (1 - cell * cell), grad_hy * tanh_cy * out * (1 - out)}, 1);
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : grad_gates.new_empty({0});
  return {grad_gates, grad_c * forget, grad_bias};
}
// [/guide: autograd]

std::tuple<at::Tensor, at::Tensor> fused_gru_cell(const at::Tensor& input_gates_in, const at::Tensor& hidden_gates_in,
                                                  const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias) {
  at::Tensor input_gates = input_gates_in, hidden_gates = hidden_gates_in;
  if (input_bias.has_value() && input_bias->defined()) {
    input_gates = input_gates + *input_bias;
    hidden_gates = hidden_gates + *hidden_bias;
  }
  auto i = input_gates.chunk(3, 1);
  auto h = hidden_gates.chunk(3, 1);
  at::Tensor reset = (i[0] + h[0]).sigmoid(), update = (i[1] + h[1]).sigmoid();
  at::Tensor fresh = (i[2] + reset * h[2]).tanh();
  at::Tensor hy = fresh + update * (hx - fresh);
  return {hy, at::cat({reset, update, fresh, hx, h[2]}, 1)};
}

// [guide: autograd]
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  auto parts = workspace.chunk(5, 1);
  const at::Tensor &reset = parts[0], &update = parts[1], &fresh = parts[2], &hx = parts[3], &hidden_new = parts[4];
  at::Tensor grad_new = grad_hy * (1 - update) * (1 - fresh * fresh);
  at::Tensor grad_update = grad_hy * (hx - fresh) * update * (1 - update);
  at::Tensor grad_reset = grad_new * hidden_new * reset * (1 - reset);
  at::Tensor grad_input_gates = at::cat({grad_reset, grad_update, grad_new}, 1);
  at::Tensor grad_hidden_gates = at::cat({grad_reset, grad_update, grad_new * reset}, 1);
  at::Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : grad_hy.new_empty({0});
  at::Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : grad_hy.new_empty({0});
  return {grad_input_gates, grad_hidden_gates, grad_hy * update, grad_input_bias, grad_hidden_bias};
}
// [/guide: autograd]

// --------------------------------------------------------------------- attention
// scaled_dot_product_attention asks each device which kernel to run (a per-device hook, plus the
// _fused_sdp_choice operator). This device answers "overrideable", PrivateUse1's own fused attention
// below, where it applies, and else "math", the composite made of matmul and softmax. The fused
// kernel here is written with ATen operators; a vendor puts its attention kernel in its place.
int64_t attention_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool, std::optional<double>,
                         bool) {
  bool fused = query.dim() == 4 && key.dim() == 4 && value.dim() == 4 && dropout_p == 0.0 &&
               query.size(1) == key.size(1) && key.size(1) == value.size(1) &&
               !(attn_mask.has_value() && attn_mask->defined() && attn_mask->requires_grad());
  return static_cast<int64_t>(fused ? sdp::SDPBackend::overrideable : sdp::SDPBackend::math);
}

// The attention weights before the softmax: scaled scores, the causal mask and the additive or boolean mask.
at::Tensor attention_scores(const at::Tensor& query, const at::Tensor& key, const at::Tensor& mask, bool is_causal,
                            double scale) {
  at::Tensor scores = at::matmul(query, key.transpose(-2, -1)) * scale;
  if (is_causal) {
    at::Tensor keep = at::ones({query.size(-2), key.size(-2)}, query.options().dtype(at::kBool)).tril();
    scores = scores.masked_fill(keep.logical_not(), -std::numeric_limits<double>::infinity());
  }
  if (mask.defined() && mask.numel() > 0) {
    scores = mask.scalar_type() == at::kBool
                 ? scores.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity())
                 : scores + mask;
  }
  return scores;
}

double attention_scale(const at::Tensor& query, std::optional<double> scale) {
  return scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
fused_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                const std::optional<at::Tensor>& attn_bias, double, bool is_causal, bool, std::optional<double> scale) {
  at::Tensor scores = attention_scores(query, key, attn_bias.value_or(at::Tensor()), is_causal,
                                       attention_scale(query, scale));
  at::Tensor logsumexp = scores.logsumexp(-1);
  at::Tensor output = at::matmul((scores - logsumexp.unsqueeze(-1)).exp(), value);
  at::Tensor nothing = query.new_empty({0}), no_seed = query.new_empty({}, at::kLong);
  return {output, logsumexp, nothing, nothing, c10::SymInt(query.size(-2)), c10::SymInt(key.size(-2)), no_seed,
          no_seed, nothing};
}

// [guide: autograd]
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, std::array<bool, 4>, const at::Tensor& out, const at::Tensor& logsumexp,
    const at::Tensor&, const at::Tensor&, int64_t, int64_t, double, bool is_causal, const at::Tensor&,
    const at::Tensor&, std::optional<double> scale) {
  double factor = attention_scale(query, scale);
  at::Tensor probs = (attention_scores(query, key, attn_bias, is_causal, factor) - logsumexp.unsqueeze(-1)).exp();
  at::Tensor grad_value = at::matmul(probs.transpose(-2, -1), grad_out);
  at::Tensor grad_probs = at::matmul(grad_out, value.transpose(-2, -1));
  at::Tensor grad_scores = probs * (grad_probs - (grad_out * out).sum(-1, /*keepdim=*/true));
  at::Tensor grad_query = at::matmul(grad_scores, key) * factor;
  at::Tensor grad_key = at::matmul(grad_scores.transpose(-2, -1), query) * factor;
  return {grad_query, grad_key, grad_value, at::Tensor()};
}
// [/guide: autograd]

const bool g_attention_choice_registered = [] {
  at::native::_fused_sdp_choice_stub.set_privateuse1_dispatch_ptr(&attention_choice);
  return true;
}();

}  // namespace

// [guide: operators]
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  // The other views with a kernel per device: a view shares its tensor's memory, which no fallback's copy can.
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fused_lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward));
  m.impl("_fused_sdp_choice", TORCH_FN(attention_choice));
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(fused_attention));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(fused_attention_backward));
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&copying_fallback>());
}

// The copies keep a tensor's lazy conjugate and negative bits themselves (host_view), so the Conjugate and Negative
// keys let them through: their fallbacks would resolve the bit with clone(), which copies with _copy_from again.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
// [/guide: operators]

}  // namespace torch_{{ name }}
