// What graph capture (graphs.cpp, graphs_capture.cpp) shares with the files it hooks into: the operators
// record instead of computing while their stream captures, the allocator serves a capture from the
// graph's private pool, and the guard answers isStreamCapturing and refuses a synchronize.
#pragma once

#include "sim.h"

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace sim {

// ------------------------------------------------ graphs.cpp, graphs_capture.cpp
extern std::atomic<int> g_capturing_streams;  // how many streams capture now: the one-load test on hot paths
inline bool any_capture() { return g_capturing_streams.load(std::memory_order_relaxed) > 0; }

// The private pool that an allocation for `device` made by this thread goes to (its current stream captures).
std::optional<c10::MempoolId_t> capture_pool_for_allocation(DeviceIndex device);
bool stream_is_capturing(const c10::Stream& stream);
// Records an operator call instead of running it when the current stream of `device` captures;
// false (nothing done) when it does not. Called by compute_on_host with the call's boxed stack.
bool capture_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::Device device);
// The same for a copy between sim tensors, or between a sim tensor and pinned host memory.
bool capture_copy(const at::Tensor& source, const at::Tensor& destination);
// sim's explicit convolution kernels, recorded as aten::convolution and aten::convolution_backward.
std::optional<at::Tensor> capture_convolution(const at::Tensor& input, const at::Tensor& weight,
                                              const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                              c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                              c10::IntArrayRef output_padding, int64_t groups);
std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> capture_convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask);
// Fails the capture of the current stream of `device` (if it captures) with `what`, which cannot be captured.
void refuse_if_capturing(DeviceIndex device, const std::string& what);
// A synchronize of `stream` (or, with stream_id -1, of the whole device) while a stream captures.
void refuse_synchronize_while_capturing(DeviceIndex device, int64_t stream_id);
void bind_graphs(pybind11::module& module);

// ---------------------------------------------------- graphs_capture.cpp
// What a capture records and graphs.cpp replays.
extern const char* const kRefusal;  // CUDA's words for what a capture cannot contain

// What capture and replay need to know of an operator, once per schema.
struct OperatorInfo {
  std::string name;         // "aten::mul.Tensor"
  std::string kernel_name;  // "sim::mul.Tensor", as in profiler traces
  bool random = false;
  std::vector<bool> writes;  // per argument: the schema marks it mutated
  bool out_resolved = false;
  std::optional<c10::OperatorHandle> out;  // the out= overload a replay writes the outputs with
};

struct TensorUse {
  const void* address;
  std::vector<int64_t> shape;
  c10::ScalarType dtype;
};

// One recorded kernel: the operator and its boxed arguments (CPU aliases of the device memory).
struct KernelRecord {
  c10::OperatorHandle op;
  OperatorInfo* info;
  std::vector<c10::IValue> arguments;  // host aliases of device tensors, and constants
  std::vector<c10::IValue> targets;    // per return: the host alias it lands in, or None (the kernel writes it)
  std::vector<c10::IValue> fallback_targets;  // the same places as other aliases, for a replay without out=
  bool out_unusable = false;  // its out= overload did not write in place: replayed as functional plus copy
  bool random;
  std::vector<TensorUse> reads, writes;  // debug mode only
};

// One capture: what a stream recorded between capture_begin and capture_end.
struct Recording {
  DeviceIndex device;
  c10::StreamId stream_id;
  c10::MempoolId_t pool;
  bool debug;
  std::mutex mutex;  // autograd's thread records on the capturing stream too
  std::vector<KernelRecord> kernels;
  std::string failure;  // the first refusal: capture_end reports it
};

void start_recording(Recording* recording);  // its stream records from now on
void stop_recording(Recording* recording);
Recording* capture_of_stream(DeviceIndex device, c10::StreamId stream_id);
const std::optional<c10::OperatorHandle>& out_overload(const c10::OperatorHandle& op, OperatorInfo& info);

// ---------------------------------------------------------- allocator.cpp
// A graph's private pool: created by its first user, given back to the device cache when the last one lets go.
void retain_graph_pool(DeviceIndex device, c10::MempoolId_t pool);
void release_graph_pool(DeviceIndex device, c10::MempoolId_t pool);
c10::MempoolId_t graph_pool_of(const void* block);  // the pool a live block belongs to; {0, 0}: none

}  // namespace sim
