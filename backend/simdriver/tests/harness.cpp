// The harness: registration, failure records, child processes, gates, and main().
//
//   simdriver_tests              runs every test, prints one line per test and "N passed, M failed"
//   simdriver_tests NAME...      runs the named tests
//   simdriver_tests --run NAME   runs one test (a CHILD_TEST too); exit status 0 when it passed
#include "harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

extern char** environ;

namespace {

constexpr int kSecondsPerTest = 90;

std::vector<std::string> g_failures;
const char* g_running_test = "";
bool g_settle_after_each_test = true;  // not in a fresh process: what it leaves queued is what it tests
std::mutex g_gates_mutex;
std::vector<harness::Gate*> g_gates;

void on_alarm(int) {
  const char* prefix = "TIMEOUT: the test ";
  const char* suffix = " ran out of time; a synchronising call or a gate did not return\n";
  ssize_t ignored = write(STDOUT_FILENO, prefix, std::strlen(prefix));
  ignored = write(STDOUT_FILENO, g_running_test, std::strlen(g_running_test));
  ignored = write(STDOUT_FILENO, suffix, std::strlen(suffix));
  (void)ignored;
  _exit(3);
}

int gate_kernel(void* args) {
  auto* gate = static_cast<harness::Gate*>(args);
  gate->entered = true;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!gate->open.load()) {
    if (std::chrono::steady_clock::now() > deadline) {
      simKernelSetErrorMessage("the test never opened this gate");
      gate->left = true;
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  gate->left = true;
  return 0;
}

// After each test: no gate stays closed, no work stays queued, no error stays pending.
void settle_after_test() {
  {
    std::lock_guard<std::mutex> lock(g_gates_mutex);
    for (auto* gate : g_gates) gate->open = true;
  }
  int count = 0;
  if (simGetDeviceCount(&count) != simSuccess) return;
  for (int device = 0; device < count; ++device) {
    int active = 0;
    if (simDevicePrimaryCtxGetState(device, &active) == simSuccess && active == 1 && simSetDevice(device) == simSuccess)
      simDeviceSynchronize();
  }
  simSetDevice(0);
  simGetLastError();
}

bool run_one(const harness::Test& test) {
  g_failures.clear();
  g_running_test = test.name;
  alarm(kSecondsPerTest);
  test.body();
  alarm(0);
  if (g_settle_after_each_test) settle_after_test();
  if (g_failures.empty()) {
    std::printf("ok      %s\n", test.name);
  } else {
    std::printf("FAILED  %s\n", test.name);
    for (const auto& failure : g_failures) std::printf("        %s\n", failure.c_str());
  }
  std::fflush(stdout);
  return g_failures.empty();
}

void read_until_done(int out_fd, int err_fd, pid_t pid, int timeout_seconds, harness::ChildResult* result) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  struct pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&result->out, &result->err};
  int open_pipes = 2;
  while (open_pipes > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result->timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    if (poll(fds, 2, static_cast<int>(left.count())) <= 0) continue;
    for (int index = 0; index < 2; ++index) {
      if (fds[index].fd < 0 || fds[index].revents == 0) continue;
      char buffer[4096];
      ssize_t got = read(fds[index].fd, buffer, sizeof buffer);
      if (got > 0) {
        sinks[index]->append(buffer, static_cast<size_t>(got));
      } else {
        fds[index].fd = -1;
        --open_pipes;
      }
    }
  }
  close(out_fd);
  close(err_fd);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) result->exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result->signal = WTERMSIG(status);
}

}  // namespace

namespace harness {

std::vector<Test>& registry() {
  static std::vector<Test> tests;
  return tests;
}

Registrar::Registrar(const char* name, void (*body)(), bool fresh_process_only) {
  registry().push_back(Test{name, body, fresh_process_only});
}

void record_failure(const char* file, int line, const std::string& what) {
  const char* base = std::strrchr(file, '/');
  g_failures.push_back(std::string(base != nullptr ? base + 1 : file) + ":" + std::to_string(line) + ": " + what);
}

std::string describe(simStatus_t status) {
  std::string text = simGetErrorName(status);
  const char* message = simGetLastErrorMessage();
  if (status != simSuccess && message != nullptr && *message != '\0') text += std::string(" (") + message + ")";
  return text;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string ChildResult::summary() const {
  return "exit code " + std::to_string(exit_code) + ", signal " + std::to_string(signal) +
         (timed_out ? ", timed out" : "") + "; stdout: " + out + "; stderr: " + err;
}

ChildResult run_in_fresh_process(const char* test, const std::vector<std::string>& environment, int timeout_seconds) {
  // Everything the child needs is built before fork(): after it, the child only calls exec.
  std::vector<std::string> variables;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string variable(*entry);
    bool replaced = false;
    for (const auto& added : environment)
      replaced = replaced || variable.compare(0, added.find('=') + 1, added, 0, added.find('=') + 1) == 0;
    if (!replaced) variables.push_back(variable);
  }
  variables.insert(variables.end(), environment.begin(), environment.end());
  std::vector<char*> envp;
  for (auto& variable : variables) envp.push_back(variable.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", run = "--run", name = test;
  char* argv[] = {self.data(), run.data(), name.data(), nullptr};
  char executable[4096];
  ssize_t length = readlink("/proc/self/exe", executable, sizeof executable - 1);
  executable[length > 0 ? length : 0] = '\0';

  int out_pipe[2], err_pipe[2];
  ChildResult result;
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return result;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    execve(executable, argv, envp.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  read_until_done(out_pipe[0], err_pipe[0], pid, timeout_seconds, &result);
  return result;
}

ChildResult run_in_fork(const std::function<int()>& body, int timeout_seconds) {
  int out_pipe[2], err_pipe[2];
  ChildResult result;
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return result;
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(0);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    int code = body();
    std::fflush(stdout);
    std::exit(code);  // exit(), not _exit(): the driver's exit handler runs in the child too
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  read_until_done(out_pipe[0], err_pipe[0], pid, timeout_seconds, &result);
  return result;
}

Gate* new_gate() {
  auto* gate = new Gate();
  std::lock_guard<std::mutex> lock(g_gates_mutex);
  g_gates.push_back(gate);
  return gate;
}

simStatus_t launch_gate(simStream_t stream, Gate* gate) {
  return simLaunchKernel(stream, "gate", gate_kernel, gate, 0, nullptr);
}

bool wait_until_entered(Gate* gate) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!gate->entered.load()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

}  // namespace harness

int main(int argc, char** argv) {
  signal(SIGALRM, on_alarm);
  if (argc == 3 && std::strcmp(argv[1], "--run") == 0) {
    g_settle_after_each_test = false;
    for (const auto& test : harness::registry())
      if (std::strcmp(test.name, argv[2]) == 0) return run_one(test) ? 0 : 1;
    std::printf("no test named %s\n", argv[2]);
    return 2;
  }
  std::vector<const harness::Test*> selected;
  for (const auto& test : harness::registry()) {
    bool named = argc == 1;
    for (int index = 1; index < argc; ++index) named = named || std::strcmp(test.name, argv[index]) == 0;
    if (named && (!test.fresh_process_only || argc > 1)) selected.push_back(&test);
  }
  if (selected.empty()) {
    std::printf("no test matches the names given; run without arguments for all\n");
    return 2;
  }
  int passed = 0, failed = 0;
  for (const auto* test : selected) (run_one(*test) ? passed : failed) += 1;
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
