// Step 10, serialization: backend metadata that travels with a tensor through torch.save/torch.load.
//
// A device may keep facts about a tensor that its sizes and strides do not say (a private memory
// format, a compression flag). PyTorch gives each TensorImpl one BackendMeta slot for them and lets
// PrivateUse1 register two functions that turn it into the {name: bool} map torch.save writes and
// back; torch._utils.get_tensor_metadata / set_tensor_metadata call the same two. sim keeps any
// boolean flags a user attaches, so the guide can show them surviving a save and a load.
#include "sim.h"
#include "interface_trace.h"

#include <torch/extension.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>

#include <map>
#include <string>
#include <unordered_map>

namespace sim {

struct SimTensorMeta : public c10::BackendMeta {
  std::map<std::string, bool> flags;

  // Copies (detach, shallow copies) get their own flags, so changing one tensor's never changes another's.
  c10::intrusive_ptr<c10::BackendMeta> clone(const c10::intrusive_ptr<c10::BackendMeta>& ptr) const override {
    SIM_TRACE("serialization", "BackendMeta.clone", "");
    auto copy = c10::make_intrusive<SimTensorMeta>();
    copy->flags = static_cast<const SimTensorMeta*>(ptr.get())->flags;
    return copy;
  }
};

static void metadata_of(const at::Tensor& tensor, std::unordered_map<std::string, bool>& metadata) {
  SIM_TRACE("serialization", "get_backend_meta", c10::str("tensor on ", tensor.device()));
  auto* meta = dynamic_cast<SimTensorMeta*>(tensor.unsafeGetTensorImpl()->get_backend_meta());
  if (meta == nullptr) return;
  for (const auto& [name, value] : meta->flags) metadata[name] = value;
}

static void set_metadata(const at::Tensor& tensor, std::unordered_map<std::string, bool>& metadata) {
  SIM_TRACE("serialization", "set_backend_meta", c10::str("tensor on ", tensor.device(), " keys=", metadata.size()));
  if (metadata.empty()) return;
  auto* impl = tensor.unsafeGetTensorImpl();
  auto* existing = dynamic_cast<SimTensorMeta*>(impl->get_backend_meta());
  auto meta = c10::make_intrusive<SimTensorMeta>();
  if (existing != nullptr) meta->flags = existing->flags;
  for (const auto& [name, value] : metadata) meta->flags[name] = value;
  impl->set_backend_meta(meta);
}

static void install_tensor_metadata() {
  static bool installed = false;  // PyTorch refuses a second registration for the same device type
  if (installed) return;
  torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &metadata_of, &set_metadata);
  installed = true;
}

void bind_serialization(pybind11::module& module) {
  module.def("install_tensor_metadata", &install_tensor_metadata);
}

}  // namespace sim
