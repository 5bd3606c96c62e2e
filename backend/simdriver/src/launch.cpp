// Kernel launch: a host function and a copy of its arguments, queued on a stream, run by the
// executor; a kernel that fails reports a code and, if it likes, a message.
#include "driver.h"

#include <cstring>
#include <exception>
#include <set>
#include <string_view>
#include <unordered_map>

namespace {

using simdriver::driver;
using simdriver::fail;

thread_local bool t_in_kernel = false;
thread_local std::string t_kernel_message;

std::mutex g_names_mutex;
// Never destroyed: a kernel the executor runs while the process exits still has its name.
auto* g_names = new std::set<std::string, std::less<>>();

}  // namespace

namespace simdriver {

const char* intern_name(const char* name) {
  // A caller names a kernel with the same buffer each time: the thread remembers what each buffer held.
  thread_local std::unordered_map<const char*, const char*> known;
  auto found = known.find(name);
  if (found != known.end() && std::strcmp(found->second, name) == 0) return found->second;
  std::lock_guard<std::mutex> lock(g_names_mutex);
  auto kept_name = g_names->find(std::string_view(name));
  if (kept_name == g_names->end()) kept_name = g_names->emplace(name).first;
  const char* kept = kept_name->c_str();
  if (known.size() >= 4096) known.clear();  // buffers that came and went
  known[name] = kept;
  return kept;
}

int run_kernel(Task& task, std::string* message) {
  t_kernel_message.clear();
  t_in_kernel = true;
  int code = 0;
  try {
    code = task.kernel(task.args);
  } catch (const std::exception& error) {
    code = -1;
    t_kernel_message = std::string("it threw a C++ exception: ") + error.what();
  } catch (...) {
    code = -1;
    t_kernel_message = "it threw a C++ exception";
  }
  t_in_kernel = false;
  *message = t_kernel_message;
  return code;
}

void release_task(Task& task) {
  if (task.kind == Task::Kind::Kernel && task.release != nullptr) task.release(task.args);
  task.release = nullptr;
}

}  // namespace simdriver

extern "C" {

simStatus_t simLaunchKernel(simStream_t stream, const char* name, simKernelFunc_t kernel, const void* args,
                            size_t args_bytes, simKernelArgsRelease_t release) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (kernel == nullptr) return fail(simErrorInvalidValue, "simLaunchKernel: kernel is NULL");
  if (name == nullptr || *name == '\0')
    return fail(simErrorInvalidValue, "simLaunchKernel: the kernel needs a name (errors name it), got none");
  if (args == nullptr && args_bytes > 0)
    return fail(simErrorInvalidValue, "simLaunchKernel: args is NULL but args_bytes is " + std::to_string(args_bytes));
  simdriver::Task task;
  task.kind = simdriver::Task::Kind::Kernel;
  task.name = simdriver::intern_name(name);
  task.kernel = kernel;
  task.release = release;
  if (args_bytes > 0) {
    task.args_copy.reset(new unsigned char[args_bytes]);
    std::memcpy(task.args_copy.get(), args, args_bytes);
    task.args = task.args_copy.get();
  } else {
    task.args = const_cast<void*>(args);
  }
  std::unique_lock<std::mutex> lock(driver().mutex, std::defer_lock);
  simdriver::acquire(lock);
  simStatus_t status = simSuccess;
  auto target = simdriver::resolve_stream(stream, &status);
  if (target == nullptr) return status;
  return simdriver::finish_submission(lock, target, simdriver::submit(target, std::move(task)));
}

simStatus_t simLaunchKernelSync(simStream_t stream, const char* name, simKernelFunc_t kernel, void* args) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (simStatus_t status = simdriver::refuse_on_executor("simLaunchKernelSync"); status != simSuccess) return status;
  if (kernel == nullptr) return fail(simErrorInvalidValue, "simLaunchKernelSync: kernel is NULL");
  if (name == nullptr || *name == '\0')
    return fail(simErrorInvalidValue, "simLaunchKernelSync: the kernel needs a name (errors name it), got none");
  simdriver::Task task;
  task.kind = simdriver::Task::Kind::Kernel;
  task.name = simdriver::intern_name(name);
  task.kernel = kernel;
  task.args = args;
  std::unique_lock<std::mutex> lock(driver().mutex);
  simStatus_t status = simSuccess;
  auto target = simdriver::resolve_stream(stream, &status);
  if (target == nullptr) return status;
  return simdriver::run_on_caller(lock, target, std::move(task));
}

void simKernelSetErrorMessage(const char* message) {
  if (t_in_kernel) t_kernel_message = message == nullptr ? "" : message;
}

}  // extern "C"
